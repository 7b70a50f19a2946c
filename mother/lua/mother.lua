#!lua name=mother
-- Mother-Harness server-side functions. One library, loaded with FUNCTION LOAD REPLACE
-- by every process at start (mother/functions.py). Every key a function touches is
-- passed in KEYS; no key is built here. Time comes from the server (TIME).
-- Validate first, write last: a function that refuses writes nothing.

-- Human gates (mother/gates): a run that waits for a person has status 'waiting' and its gate at $.gate. The
-- gate zsets: KEYS of mh_transition 4 (deadlines), 5 (deadline warnings), 6 (runs:waiting, by when it began).

-- Whether a decision may close the open gate: 0 when it may, else why not: -2 the run does not wait on
-- that gate, -3 the gate's deadline passed, -4 the actor may not decide it, -5 the approval names other
-- content (digest). ``op``: {close = gate_id, actor = ..., digest = ... or '', expire = true for Mother's
-- own decision at the deadline}.
local function check_gate(run_key, status, op, now)
  if status ~= 'waiting' then return -2 end
  local raw = redis.call('JSON.GET', run_key, '$.gate.gate_id', '$.gate.deadline_ms', '$.gate.approvers',
    '$.gate.digest')
  local g = cjson.decode(raw)
  if g['$.gate.gate_id'][1] ~= op.close then return -2 end
  if op.expire then return 0 end
  local deadline = g['$.gate.deadline_ms'][1]
  if type(deadline) == 'number' and now >= deadline then return -3 end
  local approvers = g['$.gate.approvers'][1]
  if type(approvers) == 'table' and #approvers > 0 then
    local allowed = false
    for _, name in ipairs(approvers) do if name == op.actor then allowed = true end end
    if not allowed then return -4 end
  end
  if op.digest and op.digest ~= '' and op.digest ~= g['$.gate.digest'][1] then return -5 end
  return 0
end

-- Close the open gate with ``decision`` (GateDecision JSON, stamped here with the server's time), keeping it
-- in $.gates; with ``resume`` the run's wall clock goes on where it paused (the time it waited does not count:
-- its deadline and warning move out by it, and so does the guard's start time in limits:run:{id}).
-- zsets: gate deadlines, gate warnings, runs:waiting, run deadlines, run warnings; limits: limits:run:{id}.
local function close_gate(run_key, run_id, decision, now, resume, zsets, limits)
  redis.call('JSON.SET', run_key, '$.gate.decision', decision)
  redis.call('JSON.SET', run_key, '$.gate.decision.at', cjson.encode((iso(now))))
  if resume then
    local t = cjson.decode(redis.call('JSON.GET', run_key, '$.gate.deadline_ms', '$.gate.timeout_ms',
      '$.gate.paused_run_ms', '$.gate.paused_warn_ms'))
    local deadline, timeout = t['$.gate.deadline_ms'][1], t['$.gate.timeout_ms'][1]
    local waited = (type(deadline) == 'number' and type(timeout) == 'number') and math.max(0, now - (deadline - timeout)) or 0
    local run_left, warn_left = t['$.gate.paused_run_ms'][1], t['$.gate.paused_warn_ms'][1]
    if type(run_left) == 'number' then redis.call('ZADD', zsets[4], now + run_left, run_id) end
    if type(warn_left) == 'number' then redis.call('ZADD', zsets[5], now + warn_left, run_id) end
    if waited > 0 and limits and redis.call('EXISTS', limits) == 1 then
      redis.call('JSON.NUMINCRBY', limits, '$.started_ms', waited)
    end
  end
  local gate = redis.call('JSON.GET', run_key, '$.gate')
  redis.call('JSON.ARRAPPEND', run_key, '$.gates', string.sub(gate, 2, -2))
  redis.call('JSON.SET', run_key, '$.gate', 'null')
  redis.call('ZREM', zsets[1], run_id)
  redis.call('ZREM', zsets[2], run_id)
  redis.call('ZREM', zsets[3], run_id)
end

-- Open a gate on a run just moved: it waits (no phase deadline) and its wall clock pauses (what was left
-- of it is kept on the gate). ``op``: {open = the Gate's JSON text, timeout_ms = ..., warn_ms = ...}.
local function open_gate(keys, run_id, op, now)
  local deadline = now + op.timeout_ms
  local fields = {'"opened_at":' .. cjson.encode((iso(now))), '"deadline":' .. cjson.encode((iso(deadline))),
    '"deadline_ms":' .. int_text(deadline)}
  local run_deadline = redis.call('ZSCORE', keys[3], run_id)
  if run_deadline then
    fields[#fields + 1] = '"paused_run_ms":' .. int_text(math.max(0, tonumber(run_deadline) - now))
    redis.call('ZREM', keys[3], run_id)
  end
  local warning = redis.call('ZSCORE', keys[7], run_id)
  if warning then
    fields[#fields + 1] = '"paused_warn_ms":' .. int_text(math.max(0, tonumber(warning) - now))
    redis.call('ZREM', keys[7], run_id)
  end
  redis.call('JSON.SET', keys[1], '$.gate', op.open)
  redis.call('JSON.MERGE', keys[1], '$.gate', '{' .. table.concat(fields, ',') .. '}')
  redis.call('JSON.SET', keys[1], '$.status', '"waiting"')
  redis.call('ZREM', keys[2], run_id)
  redis.call('ZADD', keys[4], deadline, run_id)
  if op.warn_ms and op.warn_ms > 0 and op.warn_ms < op.timeout_ms then
    redis.call('ZADD', keys[5], now + op.warn_ms, run_id)
  end
  redis.call('ZADD', keys[6], now, run_id)
end

-- mh_transition: move a run to a phase attempt, fenced by the attempt the caller saw, and make the
-- follow-up writes that belong to the move (the new attempt's RQ job, its context, activity entries:
-- its dispatch) in the same call, only if it was applied. A move may also open a gate (the run then waits
-- for a person) or close the gate the run waits on (a person's decision); nothing else moves a waiting run.
-- KEYS: 1 run:{id}, 2 phase deadlines zset, 3 run deadlines zset, 4 gate deadlines zset, 5 gate warnings
--       zset, 6 runs:waiting zset, 7 run wall-clock warnings zset, 8 limits:run:{id}, 9 metrics:counters,
--       10.. one per follow-up command, its key
-- ARGV: 1 run_id, 2 expected phase_index, 3 expected attempt, 4 new phase_index,
--       5 new attempt, 6 new phase name, 7 phase timeout ms, 8 run duration ms (0: keep),
--       9 timestamp (ISO), 10 history entry JSON, 11 accepted PhaseResult JSON or '',
--       12 artifact ids JSON array, 13 the worker host the result came from, which must be the one Mother
--       queued the attempt on, the run's $.host ('' when the move is Mother's own: a start, a retry),
--       14 the gate op JSON or '' (open:
--       see open_gate; close: see check_gate, with decision = the GateDecision's JSON text),
--       15.. the follow-up commands (mother.functions.follow_ups), each as: n, the command's name, then
--       its n - 1 words after its key (the key is the next of KEYS 10..)
-- Returns 1 when applied, 0 when the run is terminated, waits (and no gate is closed) or the attempt is not
-- current, -1 when it is current but the result came from another host than the attempt's, -2..-5 when the gate may not
-- be closed (check_gate) -- nothing written but 1; an error, writing nothing, when the follow-ups do not
-- match their keys.
local function mh_transition(keys, args)
  local ops = read_follow_ups(keys, args, 10, 15)
  -- the fence (status, phase_index, attempt) in one read; a missing field matches nothing
  local raw = redis.call('JSON.GET', keys[1], '$.status', '$.phase_index', '$.attempt', '$.host')
  if not raw then return 0 end
  local seen = cjson.decode(raw)
  local status = seen['$.status'][1]
  if status == nil or status == 'terminated' then return 0 end
  if seen['$.phase_index'][1] ~= tonumber(args[2]) or seen['$.attempt'][1] ~= tonumber(args[3]) then return 0 end
  if args[13] ~= '' and seen['$.host'][1] ~= args[13] then return -1 end
  local gate = args[14] ~= '' and cjson.decode(args[14]) or nil
  local now = now_ms()
  if gate and gate.close then
    local refused = check_gate(keys[1], status, gate, now)
    if refused ~= 0 then return refused end
    close_gate(keys[1], args[1], gate.decision, now, true, {keys[4], keys[5], keys[6], keys[3], keys[7]}, keys[8])
  elseif status == 'waiting' then
    return 0
  end
  if args[11] ~= '' then
    redis.call('JSON.ARRAPPEND', keys[1], '$.results', args[11])
  end
  -- each artifact once (a result accepted again after a conflict names the same ones)
  for _, artifact in ipairs(cjson.decode(args[12])) do
    local value = cjson.encode(artifact)
    local found = redis.call('JSON.ARRINDEX', keys[1], '$.artifacts', value)
    if type(found) ~= 'table' or found[1] == -1 then
      redis.call('JSON.ARRAPPEND', keys[1], '$.artifacts', value)
    end
  end
  -- the position fields in one JSON.MERGE (a path per field costs a command each); an emergency stop stays in
  -- force across the move (its phase waits at its first mutating action). A new phase starts with no detour
  -- and its retries counted from its first attempt.
  local moved = status == 'budget_stopped' and 'budget_stopped' or 'running'
  if status == 'waiting' then
    local ctl = redis.call('EXISTS', keys[8]) == 1 and redis.call('JSON.GET', keys[8], '$.status')
    if ctl and string.find(ctl, 'budget_stopped', 1, true) then moved = 'budget_stopped' end
  end
  local fresh = ''
  if tonumber(args[4]) ~= seen['$.phase_index'][1] then fresh = ',"retry_base":0,"detour":null' end
  redis.call('JSON.MERGE', keys[1], '$', '{"status":"' .. moved .. '","phase_index":' .. int_text(tonumber(args[4]))
    .. ',"attempt":' .. int_text(tonumber(args[5])) .. ',"phase":' .. cjson.encode(args[6])
    .. ',"updated_at":' .. cjson.encode(args[9]) .. fresh .. '}')
  redis.call('JSON.ARRAPPEND', keys[1], '$.history', args[10])
  redis.call('ZADD', keys[2], now + tonumber(args[7]), args[1])
  if tonumber(args[8]) > 0 then
    if redis.call('ZADD', keys[3], 'NX', now + tonumber(args[8]), args[1]) == 1 then count('runs_started') end
  end
  apply_follow_ups(args, ops)
  if gate and gate.open then open_gate(keys, args[1], gate, now) end
  return 1
end

-- mh_terminate: the only writer of termination:{run_id}. Write-once (JSON.SET NX).
-- KEYS: 1 termination:{id}, 2 terminations:reason:{reason}, 3 run:{id}, 4 result:{id},
--       5 phase deadlines zset, 6 run deadlines zset, 7 limits:run:{id} (closed: no new charges),
--       8 mother:ending (the run joins it: its end is applied by mh_ended, once), 9 budget:global (its
--       concurrent_runs gauge is set from the run deadlines at once), 10 admission:waiting (a run waiting
--       for a slot leaves the queue), 11 the run wall-clock warnings zset, 12 gate deadlines, 13 gate
--       warnings, 14 runs:waiting (a run waiting for a person leaves them), 15 metrics:counters,
--       16 budget:run:{id} (what the run cost is copied onto its record: idx:runs sorts and filters on it)
-- ARGV: 1 TerminationRecord JSON, 2 run_id, 3 ResultEnvelope JSON (termination null),
--       4 timestamp (ISO), 5 reason, 6 history entry JSON, 7 '' or a gate close op (a person's denial, the
--       gate's expiry: the end happens only if the run still waits on that gate; see check_gate)
-- Returns {1, record} when this call won, {0, first record} otherwise, {-2..-5, false} when the gate op
-- was refused (nothing written).
-- the run's end as idx:runs files it: the termination record's own timestamp_ms (idx:termination counts by
-- it: the dashboard's bars link to the same runs), else the server's now
local function ended_ms(record, now)
  local ms = cjson.decode(record).timestamp_ms
  return type(ms) == 'number' and ms or now
end

local function mh_terminate(keys, args)
  local gate = args[7] and args[7] ~= '' and cjson.decode(args[7]) or nil
  local now = now_ms()
  if gate then
    local raw = redis.call('JSON.GET', keys[3], '$.status')
    local status = raw and cjson.decode(raw)[1] or nil
    local refused = check_gate(keys[3], status, gate, now)
    if refused ~= 0 then return {refused, false} end
  end
  local won = redis.call('JSON.SET', keys[1], '$', args[1], 'NX')
  if not won then
    return {0, redis.call('JSON.GET', keys[1])}
  end
  redis.call('ZADD', keys[2], now, args[2])
  count('runs_terminated|' .. args[5])
  if redis.call('EXISTS', keys[3]) == 1 then
    local created = cjson.decode(redis.call('JSON.GET', keys[3], '$.created_ms'))[1]
    local ended = ended_ms(args[1], now)
    local ts = cjson.encode(args[4])
    local facts = ''
    if type(created) == 'number' then
      observe('run_duration', ended - created)
      facts = ',"duration_ms":' .. int_text(math.max(0, ended - created))
    end
    local cost = keys[16] and redis.call('JSON.GET', keys[16], '$.spend_micro_usd', '$.total_tokens')
    if cost then
      local got = cjson.decode(cost)
      local spend, tokens = got['$.spend_micro_usd'][1], got['$.total_tokens'][1]
      if type(spend) == 'number' then facts = facts .. ',"spend_micro_usd":' .. int_text(spend) end
      if type(tokens) == 'number' then facts = facts .. ',"total_tokens":' .. int_text(tokens) end
    end
    redis.call('JSON.MERGE', keys[3], '$', '{"status":"terminated","reason":' .. cjson.encode(args[5])
      .. ',"terminated_at":' .. ts .. ',"terminated_ms":' .. int_text(ended) .. facts .. ',"updated_at":' .. ts .. '}')
    redis.call('JSON.ARRAPPEND', keys[3], '$.history', args[6])
  end
  redis.call('JSON.SET', keys[4], '$', args[3])
  redis.call('JSON.SET', keys[4], '$.termination', args[1])
  redis.call('ZREM', keys[5], args[2])
  redis.call('ZREM', keys[6], args[2])
  if keys[7] and redis.call('EXISTS', keys[7]) == 1 then
    redis.call('JSON.SET', keys[7], '$.status', '"closed"')
  end
  redis.call('ZADD', keys[8], now, args[2])
  if redis.call('EXISTS', keys[9]) == 1 then
    redis.call('JSON.SET', keys[9], '$.concurrent_runs', redis.call('ZCARD', keys[6]))
  end
  redis.call('ZREM', keys[10], args[2])
  redis.call('ZREM', keys[11], args[2])
  if gate then
    close_gate(keys[3], args[2], gate.decision, now, false, {keys[12], keys[13], keys[14]})
  elseif keys[12] then
    redis.call('ZREM', keys[12], args[2])
    redis.call('ZREM', keys[13], args[2])
    redis.call('ZREM', keys[14], args[2])
  end
  return {1, args[1]}
end

-- mh_create_run: make a run's record and announce it, in one step: the run_id is claimed for its
-- submission entry (first come: a client's mh_submit claims it before it appends the entry; a raw XADD's
-- run_id is claimed here), run:{id} is created (NX) and indexed, and its run_submitted entry appended. A
-- Mother that dies before it leaves nothing; one that dies after it leaves a run that is announced.
-- KEYS: 1 run:{id}, 2 runs:claimed, 3 runs:all, 4 runs:user:{user}, 5 activity, 6 metrics:counters,
--       7 activity:run:{id}
-- ARGV: 1 RunState JSON, 2 run_id, 3 entry id, 4 creation time ms, 5 activity maxlen,
--       6 the run_submitted entry's fields, a JSON flat list [field, value, ...]
-- Returns 1 when created, 0 when the run exists already (the caller reads whose it is), -1 when another
-- submission entry claimed the run_id (nothing written).
local function mh_create_run(keys, args)
  local owner = redis.call('HGET', keys[2], args[2])
  if owner and owner ~= args[3] then return -1 end
  if not redis.call('JSON.SET', keys[1], '$', args[1], 'NX') then return 0 end
  redis.call('HSET', keys[2], args[2], args[3])
  count('runs_submitted')
  redis.call('ZADD', keys[3], 'NX', args[4], args[2])
  redis.call('ZADD', keys[4], 'NX', args[4], args[2])
  append_activity(keys[5], args[5], keys[7], args[2], cjson.decode(args[6]))
  return 1
end

-- mh_ended: the last step of a run's end, applied once: takes the run out of mother:ending and, only if it
-- was there, appends its activity entries (``terminated`` last) and gives a spawned child's parallel_agents
-- slot back to its parent. Queued in one MULTI with the end's idempotent writes (releases, the ledger's close,
-- the ack), so an end that a Mother died before applying is applied whole by the next one, and one applied
-- twice (a Mother that stalled past the recovery's slack) changes nothing the second time.
-- KEYS: 1 mother:ending, 2 activity, 3 activity:run:{id}, 4 (optional) budget:run:{parent}
-- (an entry that names another run goes to the global stream only)
-- ARGV: 1 run_id, 2 activity maxlen, 3 JSON list of entries, each a flat list [field, value, ...]
-- Returns 1 when this call applied the end, 0 when it had been applied.
local function mh_ended(keys, args)
  if redis.call('ZREM', keys[1], args[1]) == 0 then return 0 end
  for _, fields in ipairs(cjson.decode(args[3])) do
    local named = flat_run_id(fields)
    append_activity(keys[2], args[2], keys[3], named == args[1] and named or nil, fields)
  end
  if keys[4] and redis.call('EXISTS', keys[4]) == 1 then
    redis.call('JSON.NUMINCRBY', keys[4], '$.parallel_agents', -1)
  end
  return 1
end

-- mh_due: members of a zset whose score is at or before server now minus a slack.
-- KEYS: 1 zset.  ARGV: 1 slack ms, 2 max members.  Returns {member, score, ...}.
local function mh_due(keys, args)
  local cutoff = now_ms() - tonumber(args[1])
  return redis.call('ZRANGE', keys[1], '-inf', cutoff, 'BYSCORE', 'LIMIT', 0, tonumber(args[2]), 'WITHSCORES')
end

-- stream ids as {ms, seq}, and their order
local function stream_id(text)
  local ms, seq = string.match(text or '', '^(%d+)-(%d+)$')
  if not ms then return nil end
  return {tonumber(ms), tonumber(seq)}
end

local function earlier(a, b) return a[1] < b[1] or (a[1] == b[1] and a[2] < b[2]) end

-- mh_trim_stream: trim a stream Mother consumes (submissions, events, commands) below the oldest entry any
-- of its consumer groups still needs, never dropping work: an entry delivered and not acknowledged
-- (pending), or not yet delivered; acknowledged entries younger than the retention stay for inspection.
-- KEYS: 1 the stream.  ARGV: 1 retention ms.
-- Returns how many entries were trimmed (0 when the stream has no consumer group: nothing is known done).
local function mh_trim_stream(keys, args)
  local groups = redis.pcall('XINFO', 'GROUPS', keys[1])
  if type(groups) ~= 'table' or groups.err or #groups == 0 then return 0 end
  local keep = {now_ms() - tonumber(args[1]), 0}
  for _, info in ipairs(groups) do
    local fields = {}
    for i = 1, #info, 2 do fields[info[i]] = info[i + 1] end
    local delivered = stream_id(fields['last-delivered-id'])
    if not delivered then return 0 end
    local undelivered = {delivered[1], delivered[2] + 1}  -- the group's next entry is after its last delivered one
    if earlier(undelivered, keep) then keep = undelivered end
    local pending = redis.call('XPENDING', keys[1], fields.name)  -- {count, oldest id, newest id, consumers}
    if tonumber(pending[1]) > 0 then
      local oldest = stream_id(pending[2])
      if oldest and earlier(oldest, keep) then keep = oldest end
    end
  end
  if keep[1] <= 0 then return 0 end
  return redis.call('XTRIM', keys[1], 'MINID', int_text(keep[1]) .. '-' .. int_text(keep[2]))
end

-- mh_held: what a worker host's ask writes, made only if the host holds the attempt it asks about
-- (holds: the run is at that attempt, queued on that host), with the reply and the ask's
-- acknowledgement among the follow-ups: applied, answered and acknowledged at once, or none of them.
-- KEYS: 1 run:{id}, 2.. one per follow-up command, its key
-- ARGV: 1 phase index, 2 attempt, 3 host, 4.. the follow-up commands (read_follow_ups)
-- Returns 1 when applied, 0 when the host does not hold the attempt (nothing written).
local function mh_held(keys, args)
  local ops = read_follow_ups(keys, args, 2, 4)
  if not holds(keys[1], args[1], args[2], args[3]) then return 0 end
  apply_follow_ups(args, ops)
  return 1
end

-- mh_rehost: queue a run's current attempt on a worker host: one that waited for a host to be live, or
-- one whose job waits on a host that went away, was removed or has no worker free while another has. Only
-- while the run is at that attempt and on the host the caller saw ('' for none), and, when it names the
-- queue its job waits on, only if Mother took the job off it (a worker that dequeued it first runs it).
-- The follow-ups are the new job's writes and the run's $.host; nothing is composed or counted again.
-- KEYS: 1 run:{id}, 2 the queue the job waits on (or the run key again: none), 3.. follow-up keys
-- ARGV: 1 phase index, 2 attempt, 3 the host it is on ('' for none), 4 the job id on that queue (''),
--       5.. the follow-up commands
-- Returns 1 when moved, 0 when the run moved on or its host changed, -1 when the job was not on the queue.
local function mh_rehost(keys, args)
  local ops = read_follow_ups(keys, args, 3, 5)
  local raw = redis.call('JSON.GET', keys[1], '$.status', '$.phase_index', '$.attempt', '$.host')
  if not raw then return 0 end
  local seen = cjson.decode(raw)
  local status, host = seen['$.status'][1], seen['$.host'][1]
  if host == nil or host == cjson.null then host = '' end
  if not (status == 'running' or status == 'budget_stopped') or host ~= args[3]
    or seen['$.phase_index'][1] ~= tonumber(args[1]) or seen['$.attempt'][1] ~= tonumber(args[2]) then
    return 0
  end
  if args[4] ~= '' and redis.call('LREM', keys[2], 1, args[4]) == 0 then return -1 end
  apply_follow_ups(args, ops)
  return 1
end

-- mh_forget_rejection: drop a rejection past its retention: its record, its place in the index, and its
-- run's entry in rejections:by_run while that still names it (a newer rejection of the run stays).
-- KEYS: 1 rejection:{entry}, 2 rejections zset, 3 rejections:by_run.  ARGV: 1 entry id, 2 run_id ('' for none)
local function mh_forget_rejection(keys, args)
  redis.call('DEL', keys[1])
  redis.call('ZREM', keys[2], args[1])
  if args[2] ~= '' and redis.call('HGET', keys[3], args[2]) == args[1] then redis.call('HDEL', keys[3], args[2]) end
  return 1
end

-- mh_lease: acquire or renew the leader lease.
-- KEYS: 1 lease key.  ARGV: 1 instance id, 2 ttl ms.
-- Returns 2 when newly acquired, 1 when renewed, 0 when another instance holds it.
local function mh_lease(keys, args)
  local holder = redis.call('GET', keys[1])
  if holder == args[1] then
    redis.call('PEXPIRE', keys[1], tonumber(args[2]))
    return 1
  end
  if holder then return 0 end
  redis.call('SET', keys[1], args[1], 'PX', tonumber(args[2]))
  return 2
end

-- mh_release_lease: give the lease up if we still hold it.
-- KEYS: 1 lease key.  ARGV: 1 instance id.
local function mh_release_lease(keys, args)
  if redis.call('GET', keys[1]) == args[1] then
    return redis.call('DEL', keys[1])
  end
  return 0
end

-- mh_now: the server's clock in milliseconds; given times in ms as ARGV, their ISO-8601 texts as the
-- libraries write them (`redis-cli FCALL mh_now 0 1795308086556`).
local function mh_now(keys, args)
  if #args == 0 then return now_ms() end
  local out = {}
  for i, ms in ipairs(args) do out[i] = iso(tonumber(ms)) end
  return out
end

-- mh_library_take: count one retrieval query of a library against the policy's caps, per run and per
-- user per day, both or neither (`redis-cli GET budget:library:run:RUN:LIB`).
-- KEYS: 1 the run's counter, 2 the user's counter for the day.
-- ARGV: 1 max_queries_per_run, 2 max_queries_per_user_daily, 3 the run counter's ttl (s), 4 the day's (s)
-- Returns {1, run count, day count}, or {0, 'run'|'user', count, max} refused.
local function mh_library_take(keys, args)
  local max_run, max_day = tonumber(args[1]), tonumber(args[2])
  local run = tonumber(redis.call('GET', keys[1]) or '0')
  local day = tonumber(redis.call('GET', keys[2]) or '0')
  if run >= max_run then return {0, 'run', run, max_run} end
  if day >= max_day then return {0, 'user', day, max_day} end
  run = redis.call('INCR', keys[1])
  day = redis.call('INCR', keys[2])
  if run == 1 then redis.call('EXPIRE', keys[1], tonumber(args[3])) end
  if day == 1 then redis.call('EXPIRE', keys[2], tonumber(args[4])) end
  return {1, run, day}
end

-- add calls to tool_stats:{tool} (succeeded, failed, their ms) and to the metrics; returns the totals
local function add_tool_calls(key, succeeded, failed, ms)
  local doc = get_doc(key) or {}
  local succ = (tonumber(doc.success_count) or 0) + succeeded
  local fail = (tonumber(doc.failure_count) or 0) + failed
  local total = (tonumber(doc.total_execution_ms) or 0) + ms
  local tool = string.match(key, '^tool_stats:(.*)$') or key
  if succeeded > 0 then count('tool_calls|' .. tool .. '|success', succeeded) end
  if failed > 0 then count('tool_calls|' .. tool .. '|failure', failed) end
  local calls = succ + fail
  redis.call('JSON.SET', key, '$', cjson.encode({
    success_count = succ,
    failure_count = fail,
    success_rate = math.floor(succ / calls * 1000000 + 0.5) / 1000000,
    avg_execution_ms = math.floor(total / calls * 1000 + 0.5) / 1000,
    total_execution_ms = total,
    last_used = iso(now_ms()),
  }))
  return succ, fail
end

-- mh_tool_stat: count one call of a registry tool and stamp it with the server's clock, in one step, so
-- concurrent workers never lose a count (`redis-cli JSON.GET tool_stats:git_status`).
-- KEYS: 1 tool_stats:{tool_id}, 2 metrics:counters.  ARGV: 1 ok (1|0), 2 execution time in ms.
local function mh_tool_stat(keys, args)
  local ok = args[1] == '1'
  local ms = tonumber(args[2])
  if ms == nil or ms < 0 or ms ~= ms or ms == math.huge then
    return redis.error_reply('ERR execution time must be a finite number of ms >= 0, got ' .. tostring(args[2]))
  end
  local succ, fail = add_tool_calls(keys[1], ok and 1 or 0, ok and 0 or 1, ms)
  return {succ, fail}
end

redis.register_function('mh_transition', counted(mh_transition, 9))
redis.register_function('mh_terminate', counted(mh_terminate, 15))
redis.register_function('mh_create_run', counted(mh_create_run, 6))
redis.register_function('mh_ended', mh_ended)
redis.register_function('mh_due', mh_due)
redis.register_function('mh_trim_stream', mh_trim_stream)
redis.register_function('mh_forget_rejection', mh_forget_rejection)
redis.register_function('mh_held', mh_held)
redis.register_function('mh_rehost', mh_rehost)
redis.register_function('mh_lease', mh_lease)
redis.register_function('mh_release_lease', mh_release_lease)
redis.register_function('mh_tool_stat', counted(mh_tool_stat, 2))
redis.register_function('mh_library_take', mh_library_take)
redis.register_function{function_name='mh_now', callback=mh_now, flags={'no-writes'}}

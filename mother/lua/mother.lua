#!lua name=mother
-- Mother-Harness server-side functions. One library, loaded with FUNCTION LOAD REPLACE
-- by every process at start (mother/functions.py). Every key a function touches is
-- passed in KEYS; no key is built here. Time comes from the server (TIME).
-- Validate first, write last: a function that refuses writes nothing.

-- mh_transition: move a run to a phase attempt, fenced by the attempt the caller saw, and make the
-- follow-up writes that belong to the move (the new attempt's RQ job, its context, activity entries:
-- its dispatch) in the same call, only if it was applied.
-- KEYS: 1 run:{id}, 2 phase deadlines zset, 3 run deadlines zset, 4.. one per follow-up command, its key
-- ARGV: 1 run_id, 2 expected phase_index, 3 expected attempt, 4 new phase_index,
--       5 new attempt, 6 new phase name, 7 phase timeout ms, 8 run duration ms (0: keep),
--       9 timestamp (ISO), 10 history entry JSON, 11 accepted PhaseResult JSON or '',
--       12 artifact ids JSON array, 13 the SHA-256 of the result's attempt token, which must equal the run's
--       token_digest ('' when the move is Mother's own: a start, a retry),
--       14.. the follow-up commands (mother.functions.follow_ups), each as: n, the command's name, then
--       its n - 1 words after its key (the key is the next of KEYS 4..)
-- Returns 1 when applied, 0 when the run is terminated or the attempt is not current, -1 when it is current
-- but the result's token is not the attempt's (nothing written in either case); an error, writing nothing,
-- when the follow-ups do not match their keys.
local function mh_transition(keys, args)
  -- the follow-ups, read (and their shape checked) before anything is written: {first ARGV, word count, key}
  local ops, i = {}, 14
  while i <= #args do
    local n, key = tonumber(args[i]), keys[#ops + 4]
    if n == nil or n < 1 or i + n > #args or key == nil then error('malformed follow-up command at ARGV ' .. i) end
    ops[#ops + 1] = {i, n, key}
    i = i + n + 1
  end
  if #ops ~= #keys - 3 then error('follow-up keys (' .. (#keys - 3) .. ') do not match the commands (' .. #ops .. ')') end
  -- the fence (status, phase_index, attempt) in one read; a missing field matches nothing
  local raw = redis.call('JSON.GET', keys[1], '$.status', '$.phase_index', '$.attempt', '$.token_digest')
  if not raw then return 0 end
  local seen = cjson.decode(raw)
  local status = seen['$.status'][1]
  if status == nil or status == 'terminated' then return 0 end
  if seen['$.phase_index'][1] ~= tonumber(args[2]) or seen['$.attempt'][1] ~= tonumber(args[3]) then return 0 end
  if args[13] ~= '' and seen['$.token_digest'][1] ~= args[13] then return -1 end
  local now = now_ms()
  if args[11] ~= '' then
    redis.call('JSON.ARRAPPEND', keys[1], '$.results', args[11])
  end
  local artifacts = cjson.decode(args[12])
  if #artifacts > 0 then
    local values = {}
    for i, artifact in ipairs(artifacts) do values[i] = cjson.encode(artifact) end
    redis.call('JSON.ARRAPPEND', keys[1], '$.artifacts', unpack(values))
  end
  -- the position fields in one JSON.MERGE (a path per field costs a command each); an emergency stop stays in
  -- force across the move (its phase waits at its first mutating action)
  local moved = status == 'budget_stopped' and 'budget_stopped' or 'running'
  redis.call('JSON.MERGE', keys[1], '$', '{"status":"' .. moved .. '","phase_index":' .. int_text(tonumber(args[4]))
    .. ',"attempt":' .. int_text(tonumber(args[5])) .. ',"phase":' .. cjson.encode(args[6])
    .. ',"updated_at":' .. cjson.encode(args[9]) .. '}')
  redis.call('JSON.ARRAPPEND', keys[1], '$.history', args[10])
  redis.call('ZADD', keys[2], now + tonumber(args[7]), args[1])
  if tonumber(args[8]) > 0 then
    redis.call('ZADD', keys[3], 'NX', now + tonumber(args[8]), args[1])
  end
  for _, op in ipairs(ops) do
    local at, n = op[1], op[2]
    redis.call(args[at + 1], op[3], unpack(args, at + 2, at + n))
  end
  return 1
end

-- mh_terminate: the only writer of termination:{run_id}. Write-once (JSON.SET NX).
-- KEYS: 1 termination:{id}, 2 terminations:reason:{reason}, 3 run:{id}, 4 result:{id},
--       5 phase deadlines zset, 6 run deadlines zset, 7 limits:run:{id} (closed: no new charges),
--       8 mother:ending (the run joins it: its end is applied by mh_ended, once), 9 budget:global (its
--       concurrent_runs gauge is set from the run deadlines at once), 10 admission:waiting (a run waiting
--       for a slot leaves the queue), 11 the run wall-clock warnings zset
-- ARGV: 1 TerminationRecord JSON, 2 run_id, 3 ResultEnvelope JSON (termination null),
--       4 timestamp (ISO), 5 reason, 6 history entry JSON
-- Returns {1, record} when this call won, {0, first record} otherwise.
local function mh_terminate(keys, args)
  local won = redis.call('JSON.SET', keys[1], '$', args[1], 'NX')
  if not won then
    return {0, redis.call('JSON.GET', keys[1])}
  end
  local now = now_ms()
  redis.call('ZADD', keys[2], now, args[2])
  if redis.call('EXISTS', keys[3]) == 1 then
    local ts = cjson.encode(args[4])
    redis.call('JSON.MERGE', keys[3], '$', '{"status":"terminated","reason":' .. cjson.encode(args[5])
      .. ',"terminated_at":' .. ts .. ',"updated_at":' .. ts .. '}')
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
  return {1, args[1]}
end

-- mh_create_run: make a run's record and announce it, in one step: the run_id is claimed for its
-- submission entry (first come: a client's mh_submit claims it before it appends the entry; a raw XADD's
-- run_id is claimed here), run:{id} is created (NX) and indexed, and its run_submitted entry appended. A
-- Mother that dies before it leaves nothing; one that dies after it leaves a run that is announced.
-- KEYS: 1 run:{id}, 2 runs:claimed, 3 runs:all, 4 runs:user:{user}, 5 activity
-- ARGV: 1 RunState JSON, 2 run_id, 3 entry id, 4 creation time ms, 5 activity maxlen,
--       6 the run_submitted entry's fields, a JSON flat list [field, value, ...]
-- Returns 1 when created, 0 when the run exists already (the caller reads whose it is), -1 when another
-- submission entry claimed the run_id (nothing written).
local function mh_create_run(keys, args)
  local owner = redis.call('HGET', keys[2], args[2])
  if owner and owner ~= args[3] then return -1 end
  if not redis.call('JSON.SET', keys[1], '$', args[1], 'NX') then return 0 end
  redis.call('HSET', keys[2], args[2], args[3])
  redis.call('ZADD', keys[3], 'NX', args[4], args[2])
  redis.call('ZADD', keys[4], 'NX', args[4], args[2])
  redis.call('XADD', keys[5], 'MAXLEN', '~', args[5], '*', unpack(cjson.decode(args[6])))
  return 1
end

-- mh_ended: the last step of a run's end, applied once: takes the run out of mother:ending and, only if it
-- was there, appends its activity entries (``terminated`` last) and gives a spawned child's parallel_agents
-- slot back to its parent. Queued in one MULTI with the end's idempotent writes (releases, the ledger's close,
-- the ack), so an end that a Mother died before applying is applied whole by the next one, and one applied
-- twice (a Mother that stalled past the recovery's slack) changes nothing the second time.
-- KEYS: 1 mother:ending, 2 activity, 3 (optional) budget:run:{parent}
-- ARGV: 1 run_id, 2 activity maxlen, 3 JSON list of entries, each a flat list [field, value, ...]
-- Returns 1 when this call applied the end, 0 when it had been applied.
local function mh_ended(keys, args)
  if redis.call('ZREM', keys[1], args[1]) == 0 then return 0 end
  for _, fields in ipairs(cjson.decode(args[3])) do
    redis.call('XADD', keys[2], 'MAXLEN', '~', args[2], '*', unpack(fields))
  end
  if keys[3] and redis.call('EXISTS', keys[3]) == 1 then
    redis.call('JSON.NUMINCRBY', keys[3], '$.parallel_agents', -1)
  end
  return 1
end

-- mh_due: members of a zset whose score is at or before server now minus a slack.
-- KEYS: 1 zset.  ARGV: 1 slack ms, 2 max members.  Returns {member, score, ...}.
local function mh_due(keys, args)
  local cutoff = now_ms() - tonumber(args[1])
  return redis.call('ZRANGE', keys[1], '-inf', cutoff, 'BYSCORE', 'LIMIT', 0, tonumber(args[2]), 'WITHSCORES')
end

-- mh_heartbeat: stamp a phase job as alive at server time.
-- KEYS: 1 heartbeats zset.  ARGV: 1 member (run phase attempt), 2 'XX': only a member still there
-- (a beat that comes after the phase's last write, or the watchdog, took it away does not bring it back).
-- Returns 1 when stamped, 0 when XX found no member.
local function mh_heartbeat(keys, args)
  if args[2] == 'XX' and not redis.call('ZSCORE', keys[1], args[1]) then return 0 end
  redis.call('ZADD', keys[1], now_ms(), args[1])
  return 1
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

redis.register_function('mh_transition', mh_transition)
redis.register_function('mh_terminate', mh_terminate)
redis.register_function('mh_create_run', mh_create_run)
redis.register_function('mh_ended', mh_ended)
redis.register_function('mh_due', mh_due)
redis.register_function('mh_trim_stream', mh_trim_stream)
redis.register_function('mh_forget_rejection', mh_forget_rejection)
redis.register_function('mh_heartbeat', mh_heartbeat)
redis.register_function('mh_lease', mh_lease)
redis.register_function('mh_release_lease', mh_release_lease)
redis.register_function{function_name='mh_now', callback=mh_now, flags={'no-writes'}}

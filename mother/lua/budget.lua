#!lua name=mother_budget
-- Mother-Harness budget guards: one atomic call per action. Every key a function
-- touches is passed in KEYS; time and the daily window come from the server (TIME).
-- Validate first, write last: a refusal writes only its own refusal record.
-- Money is integer micro-USD; amounts are validated by the Python caller too.

local OK = '{"ok":true}'
-- {run{dim:code}, user{dim:code}}: mother/functions.py renders it from mother.budget.CODES / USER_CODES;
-- decoded on the first threshold or refusal that needs a reason code
local CODES_JSON = '__GUARD_CODES__'
local UNRENDERED = CODES_JSON == '__GUARD' .. '_CODES__'  -- the file loaded as is, not through Python
local codes_table = nil
local function code_of(scope, dim)
  codes_table = codes_table or cjson.decode(CODES_JSON)
  return codes_table[scope][dim]
end

local function contains(list, value)
  for _, v in ipairs(list or {}) do
    if v == value then return true end
  end
  return false
end

-- a crossed hard limit: its code into limits_exceeded (the spec's string[], in crossing order) and
-- its figures into limit_crossings (same order); once per code
local function exceeded(key, doc, code, used, limit, at)
  if contains(doc.limits_exceeded, code) then return end
  count('budget_limits_exceeded|' .. code)
  local entry = {code = code, current = used, max = limit, at = at}
  redis.call('JSON.ARRAPPEND', key, '$.limits_exceeded', cjson.encode(code))
  redis.call('JSON.ARRAPPEND', key, '$.limit_crossings', cjson.encode(entry))
  doc.limits_exceeded = doc.limits_exceeded or {}
  table.insert(doc.limits_exceeded, code)
end

-- effective limit: base + deltas of overrides that have not expired (server time)
local function effective(doc, dim, now)
  local base = (doc.limits or {})[dim]
  if base == nil then return nil end
  local overrides = doc.overrides
  if overrides == nil or overrides[1] == nil then return base end
  local total = base
  for _, o in ipairs(overrides) do
    if o.dimension == dim and o.expires_at_ms > now then total = total + o.delta end
  end
  return total
end

-- a settled model call's tokens and spend, by model (mother_model_*_total): a model name of the
-- configuration's alphabet only (what a worker sends cannot make labels of anything)
local function count_model(model, add)
  if type(model) ~= 'string' or #model > 128 or not string.find(model, '^[%w_.:/@-]+$') or type(add) ~= 'table' then
    return
  end
  for _, dim in ipairs({'input_tokens', 'output_tokens', 'spend_micro_usd'}) do
    local n = tonumber(add[dim])
    if n and n > 0 and n == math.floor(n) then count('model_' .. dim .. '|' .. model, n) end
  end
  count('model_calls|' .. model)
end

-- one activity entry; ``act``: {key = the global stream, maxlen, run_key = the run's own stream}
local function activity(act, fields)
  local flat = {}
  for k, v in pairs(fields) do
    table.insert(flat, k)
    table.insert(flat, type(v) == 'table' and cjson.encode(v) or tostring(v))
  end
  append_activity(act.key, act.maxlen, act.run_key, fields.run_id, flat)
end

-- record warnings / crossings of a doc's dimensions after a charge; ``scope`` ('run' or 'user')
-- names the reason codes, which are only looked up when a threshold is reached. The limits, their
-- overrides and the warning ratio come from ``bounds`` (a run's limits document, or the user's daily
-- limits as Mother set them), never from the counters' own document, which workers may write.
local function thresholds(key, doc, dims, now, at, scope, act, bounds)
  local ratio = bounds.warning_ratio or 0.8
  for dim, _ in pairs(dims) do
    local limit = effective(bounds, dim, now)
    local used = doc[dim]
    if limit and used and used >= ratio * limit then
      local code = code_of(scope, dim)
      local warning = string.gsub(code, '_exceeded$', '_warning')
      if not contains(doc.warnings_triggered, warning) then
        redis.call('JSON.ARRAPPEND', key, '$.warnings_triggered', cjson.encode(warning))
        doc.warnings_triggered = doc.warnings_triggered or {}
        table.insert(doc.warnings_triggered, warning)
        activity(act, {type = 'budget_warning', at = at, run_id = act.run_id,
          data = {code = warning, current = used, max = limit, ratio = ratio}})
      end
      if used >= limit then exceeded(key, doc, code, used, limit, at) end
    end
  end
end

-- A call's writes to one document are gathered in a table of top-level fields (a nested table for
-- ``reserved`` and ``reservations``) holding value texts, and sent as one JSON.MERGE (RFC 7396: a
-- nested object merges into the stored one, null deletes a member): one path and one value to parse,
-- where a path per field costs more. Counters are integers, written with int_text (prelude).

local function merge_text(fields)
  local parts, n = {}, 0
  for name, value in pairs(fields) do
    n = n + 1
    parts[n] = '"' .. name .. '":' .. (type(value) == 'table' and merge_text(value) or value)
  end
  return '{' .. table.concat(parts, ',') .. '}'
end

local function merge(key, fields)
  if next(fields) ~= nil then redis.call('JSON.MERGE', key, '$', merge_text(fields)) end
end

local function add(fields, target, adds, mark)
  if adds == nil then return end
  for dim, n in pairs(adds) do
    if n ~= 0 then
      target[dim] = (target[dim] or 0) + n
      fields[dim] = int_text(target[dim])
      mark[dim] = true
    end
  end
end

local function reserve(fields, target, dims, sign)
  if dims == nil then return end
  target.reserved = target.reserved or {}
  fields.reserved = fields.reserved or {}
  for dim, n in pairs(dims) do
    target.reserved[dim] = (target.reserved[dim] or 0) + sign * n
    fields.reserved[dim] = int_text(target.reserved[dim])
  end
end

-- the user's daily document, created on first use with the limits the caller passes
local function ensure_user(key, a, day, at)
  local user = get_doc(key)
  if user then return user end
  user = {user_id = a.user_id, day = day, runs = 0, cloud_calls = 0, total_tokens = 0,
          reserved = {cloud_calls = 0, total_tokens = 0}, limits = a.user_limits,
          warning_ratio = a.user_warning_ratio, last_updated = at}
  -- one write: cjson writes an empty table as {}, so the empty lists go into the text as []
  local text = cjson.encode(user)
  redis.call('JSON.SET', key, '$', string.sub(text, 1, -2) .. ',"warnings_triggered":[],"limits_exceeded":[],"limit_crossings":[]}')
  redis.call('EXPIRE', key, tonumber(a.user_ttl_s))
  user.warnings_triggered, user.limits_exceeded = {}, {}
  return user
end

local function refuse(key, doc, code, used, limit, at, act)
  count('budget_refusals|' .. code)
  if doc and limit then exceeded(key, doc, code, used, limit, at) end
  activity(act, {type = 'budget_refused', at = at, run_id = act.run_id,
    data = {code = code, current = used or 0, max = limit or 0}})
  return cjson.encode({ok = false, code = code, current = used, max = limit})
end

-- an emergency stop's refusal: logged once per stop (the stop's time is kept in the counters' stop_refused),
-- not at every poll of a worker that waits for the reset
local function refuse_stopped(key, doc, ctl, at, act)
  local stop_at = type(ctl.stop) == 'table' and ctl.stop.at or ''
  count('budget_refusals|budget_stopped')
  if doc.stop_refused ~= stop_at then
    redis.call('JSON.SET', key, '$.stop_refused', cjson.encode(stop_at))
    activity(act, {type = 'budget_refused', at = at, run_id = act.run_id,
      data = {code = 'budget_stopped', current = 0, max = 0, stopped_at = stop_at}})
  end
  return cjson.encode({ok = false, code = 'budget_stopped'})
end

-- what a user's daily document is made with and checked against, as Mother set it in the run's limits
local function user_bounds(ctl)
  return {user_id = ctl.user_id, user_limits = ctl.user_limits or {}, user_ttl_s = ctl.user_ttl_s,
          user_warning_ratio = ctl.user_warning_ratio, limits = ctl.user_limits or {},
          warning_ratio = ctl.user_warning_ratio}
end

-- Actions the caller marks as repeating (ARGV[3] == '1': the same text on every call, like a tool charge)
-- are decoded once; the decoded table is a pure function of the text and is never written to.
local repeated, repeated_count = {}, 0
local function decode_action(text, repeats)
  if repeats ~= '1' then return cjson.decode(text) end
  local a = repeated[text]
  if a == nil then
    if repeated_count >= 64 then repeated, repeated_count = {}, 0 end  -- a new day's texts replace the old
    a = cjson.decode(text)
    repeated[text], repeated_count = a, repeated_count + 1
  end
  return a
end

-- decode the action, stamp server time, and compare the caller's idea of today with the server's;
-- ``act`` says where activity entries go and (set by the caller once known) the run they name
local function begin(args, activity_key, run_activity_key)
  if UNRENDERED then
    error('the budget library was loaded without its reason codes: load it with mother.functions.load_functions')
  end
  local a = decode_action(args[1], args[3])
  local now = now_ms()
  local at, day = iso(now)
  local retry = (a.day ~= day) and cjson.encode({retry_day = day}) or nil
  return a, {key = activity_key, maxlen = tonumber(args[2]), run_key = run_activity_key}, now, at, retry
end

-- a phase attempt as the guard names it ('index:attempt'), and the run's fence (the attempt Mother gave up on)
local function attempt_order(tag)  -- 'index:attempt' -> index, attempt (nil when not that)
  if type(tag) ~= 'string' then return nil end
  local index, attempt = string.match(tag, '^(%d+):(%d+)$')
  if not index then return nil end
  return tonumber(index), tonumber(attempt)
end

local function fenced(fence, tag)  -- whether attempt ``tag`` is at or before ``fence``
  local fi, fa = attempt_order(fence)
  local ti, ta = attempt_order(tag)
  if not fi or not ti then return false end
  return ti < fi or (ti == fi and ta <= fa)
end

-- mh_guard: check and charge one action against the run's and the user's daily budget.
-- KEYS: 1 budget:run:{id} (the run's counters), 2 budget:user:{user}:daily:{day}, 3 activity,
--       4 limits:run:{id} (what is enforced: limits, overrides, warning ratio, status and stop, fence, start
--       time, the user's daily limits; written by Mother and operators only: a worker cannot raise a limit),
--       5 metrics:counters, 6 activity:run:{id}, 7 run:{id} (for a worker host's action: whether it holds
--       the attempt), 8 journal:{id}:{phase_index} (for a phase attempt's action: where its step goes)
-- ARGV: 1 action JSON: {day, read_only, check[dims], user_check[dims], add{dim:n}, user_add{dim:n},
--        reserve{op, dims{dim:n}, user_dims{dim:n}}, settle{op, add{dim:n}, user_add{dim:n}},
--        clock ('tick': the wall clock's warning and crossing are recorded; 'deadline': the run's deadline
--        passed, its crossing is recorded), and for a phase attempt's own actions its attempt 'index:attempt'
--        and, set by Mother from the stream the ask came by, its host; ``step``: the step's record (a JSON
--        text Mother checked), appended to KEYS 8 when the action is charged (a settle: when it settles a
--        reservation not settled before), so a charged step is a recorded step; ``ask``: the ask's id,
--        kept per attempt, so an ask another Mother applies again (its first died before acknowledging
--        it) charges nothing twice},
--       2 activity maxlen, 3 '1' when the action's text repeats call after call (its decoding is kept), else absent
-- Returns JSON: {ok=true, ...} | {ok=false, code, current, max} | {retry_day=<server day>}
-- An action of an attempt at or before the run's fence (set when Mother gave back what a failed or lost
-- attempt held, before retrying it) is refused with code phase_stale: a horse that outlived its attempt
-- can no longer reserve or charge, so nothing it holds outlasts the give-back. A host's action is refused
-- (not_held) unless the host holds the attempt; it settles only the reservations it made.
-- a settle's reply: the run's counters after it
local function counters_reply(doc)
  return cjson.encode({ok = true, counters = {model_calls = doc.model_calls, input_tokens = doc.input_tokens,
    output_tokens = doc.output_tokens, spend_micro_usd = doc.spend_micro_usd, duration_sec = doc.duration_sec}})
end

local function mh_guard(keys, args)
  local a, act, now, at, retry = begin(args, keys[3], keys[6])
  if retry then return retry end
  count('guard_calls')
  local day = a.day
  local ctl = get_doc(keys[4])
  local doc = get_doc(keys[1])
  if not doc or not ctl then return cjson.encode({ok = false, code = 'no_budget'}) end
  if a.attempt ~= nil and not attempt_order(a.attempt) then
    return cjson.encode({ok = false, code = 'invalid_action', error = "attempt must be 'index:attempt'"})
  end
  if a.attempt and ctl.fence and not a.settle and fenced(ctl.fence, a.attempt) then
    return cjson.encode({ok = false, code = 'phase_stale', fence = ctl.fence})
  end
  act.run_id = ctl.run_id  -- the run its activity entries name, for the user's document too
  if a.ask and a.attempt and doc.last_asks and doc.last_asks[a.attempt] == a.ask then
    return a.settle and counters_reply(doc) or OK  -- applied before: its reply again, nothing charged
  end
  local settling = a.settle and doc.reservations and doc.reservations[a.settle.op]
  if a.host ~= nil then
    local index, attempt = attempt_order(a.attempt)
    if a.settle then
      if settling and settling.host ~= nil and settling.host ~= a.host then
        return cjson.encode({ok = false, code = 'not_held'})
      end
    elseif not index or not holds(keys[7], index, attempt, a.host) then
      return cjson.encode({ok = false, code = 'not_held'})
    end
  end
  local needs_user = a.user_check or a.user_add or (settling and (settling.user_dims or a.settle.user_add))
    or (a.reserve and a.reserve.user_dims)  -- a released reservation's late settle still charges the user
  local ub = user_bounds(ctl)
  local user = needs_user and ensure_user(keys[2], ub, day, at) or nil
  if ctl.status == 'closed' and not settling then return cjson.encode({ok = false, code = 'run_terminated'}) end
  if ctl.status == 'budget_stopped' and not a.read_only and not settling then
    return refuse_stopped(keys[1], doc, ctl, at, act)
  end
  local stored_duration = doc.duration_sec
  doc.duration_sec = math.floor((now - ctl.started_ms) / 1000)
  local wall = effective(ctl, 'duration_sec', now)
  -- checks: a dimension the action consumes must be below its (effective) limit
  if not a.read_only and not settling then
    if wall and doc.duration_sec >= wall then
      return refuse(keys[1], doc, code_of('run', 'duration_sec'), doc.duration_sec, wall, at, act)
    end
  end
  if a.check then
    local reserved = doc.reserved or {}
    for _, dim in ipairs(a.check) do
      local limit = effective(ctl, dim, now)
      local used = (doc[dim] or 0) + (reserved[dim] or 0)
      if limit and used >= limit then return refuse(keys[1], doc, code_of('run', dim), doc[dim] or 0, limit, at, act) end
    end
  end
  if user and a.user_check then
    for _, dim in ipairs(a.user_check) do
      local limit = ub.limits[dim]
      local used = (user[dim] or 0) + ((user.reserved or {})[dim] or 0)
      if limit and used >= limit then return refuse(keys[2], user, code_of('user', dim), user[dim] or 0, limit, at, act) end
    end
  end
  -- a reservation's id becomes a member name in the JSON.MERGE below: a plain name only
  if a.reserve and (type(a.reserve.op) ~= 'string' or not string.find(a.reserve.op, '^[%w_-]+$')) then
    return cjson.encode({ok = false, code = 'invalid_action', error = 'reserve.op must be letters, digits, _ or -'})
  end
  -- charges
  local touched, user_touched, run_w, user_w = {}, {}, {}, {}
  if a.settle then
    if not settling then return cjson.encode({ok = true, settled = false}) end  -- settled before: idempotent
    count_model(a.settle.model, a.settle.add)
    reserve(run_w, doc, settling.dims, -1)
    run_w.reservations = {[a.settle.op] = 'null'}
    if user and settling.user_dims then reserve(user_w, user, settling.user_dims, -1) end
    add(run_w, doc, a.settle.add, touched)
    if user then add(user_w, user, a.settle.user_add, user_touched) end
  end
  add(run_w, doc, a.add, touched)
  if user then add(user_w, user, a.user_add, user_touched) end
  if a.reserve then
    reserve(run_w, doc, a.reserve.dims, 1)
    if user then reserve(user_w, user, a.reserve.user_dims, 1) end
    run_w.reservations = {[a.reserve.op] = cjson.encode({dims = a.reserve.dims, user_dims = a.reserve.user_dims, at = at,
      attempt = a.attempt, host = a.host})}
  end
  if a.clock then touched.duration_sec = true end
  if doc.duration_sec ~= stored_duration then run_w.duration_sec = int_text(doc.duration_sec) end
  if a.ask and a.attempt then run_w.last_asks = {[a.attempt] = cjson.encode(a.ask)} end
  local stamp = '"' .. at .. '"'  -- an ISO text: nothing in it needs escaping
  run_w.last_updated = stamp
  doc.last_updated = at
  merge(keys[1], run_w)
  if user then
    user_w.last_updated = stamp
    merge(keys[2], user_w)
  end
  if a.clock == 'deadline' and wall then  -- the deadline passed: crossed, whatever whole seconds say
    exceeded(keys[1], doc, code_of('run', 'duration_sec'), math.max(doc.duration_sec, wall), wall, at)
  end
  thresholds(keys[1], doc, touched, now, at, 'run', act, ctl)
  if user then thresholds(keys[2], user, user_touched, now, at, 'user', act, ub) end
  if a.step and keys[8] then redis.call('RPUSH', keys[8], a.step) end
  if a.settle then return counters_reply(doc) end  -- the next turn's limit check needs no read
  return OK  -- the constant reply mother/budget.py compares against (OK_REPLY)
end

-- mh_release_reservations: give back what a run's model-call reservations hold when no settle will come
-- for them (the call's attempt was lost or timed out, or the run ended): each reservation's dims leave the
-- run's ``reserved``, its user_dims the ``reserved`` of the user's document of the day it was made, and the
-- reservation becomes a tombstone {at, released=<time>} (no dims): a settle that still comes (a horse that outlived its
-- attempt) charges what the call used, once, and takes the tombstone away.
-- KEYS: 1 budget:run:{id}, 2 activity, 3 limits:run:{id} (the fence), 4 activity:run:{id},
--       5.. budget:user:{user}:daily:{day} for the days in ARGV 4..
-- ARGV: 1 activity maxlen, 2 why (for the activity entry), 3 the fence: the attempt 'index:attempt' given
--       up on (its actions and earlier ones' are refused from now on: mh_guard), or '' for none, 4.. the
--       days (YYYY-MM-DD) of KEYS 5..
-- A reservation whose day is not passed is left as it is. Returns JSON {released=n, left=n}.
local function give_back(fields, target, dims)  -- reserve(fields, target, dims, -1), never below nothing
  reserve(fields, target, dims, -1)
  for dim, _ in pairs(dims) do
    if target.reserved[dim] < 0 then target.reserved[dim], fields.reserved[dim] = 0, '0' end
  end
end

local function mh_release_reservations(keys, args)
  local doc = get_doc(keys[1])
  if not doc then return cjson.encode({released = 0, left = 0}) end
  local fence = args[3]
  if fence ~= '' and not attempt_order(fence) then
    return redis.error_reply("ERR the fence must be 'index:attempt' or empty, got " .. fence)
  end
  if fence ~= '' and redis.call('EXISTS', keys[3]) == 1 then
    local current = cjson.decode(redis.call('JSON.GET', keys[3], '$.fence'))[1]
    if type(current) ~= 'string' or not fenced(current, fence) then  -- never moved back
      redis.call('JSON.SET', keys[3], '$.fence', cjson.encode(fence))
    end
  end
  local users = {}  -- day -> {key, doc (false: none), w}
  for i = 5, #keys do users[args[i - 1]] = {key = keys[i]} end
  local at = iso(now_ms())
  local run_w, released, left, tokens = {reservations = {}}, 0, 0, 0
  for op, r in pairs(doc.reservations or {}) do
    if type(r) == 'table' and r.dims then  -- a tombstone has no dims: nothing is held by it
      local u = users[string.sub(r.at or '', 1, 10)]  -- a reservation's at is server time, as the day key's day
      if r.user_dims and next(r.user_dims) and not u then
        left = left + 1
      else
        give_back(run_w, doc, r.dims)
        if u and r.user_dims then
          if u.doc == nil then u.doc = get_doc(u.key) or false end  -- a day's document may have expired
          if u.doc then
            u.w = u.w or {}
            give_back(u.w, u.doc, r.user_dims)
          end
        end
        run_w.reservations[op] = '{"dims":null,"user_dims":null,"released":"' .. at .. '"}'  -- merged into it
        released = released + 1
        tokens = tokens + (r.dims.total_tokens or 0)
      end
    end
  end
  if released == 0 then return cjson.encode({released = 0, left = left}) end
  run_w.last_updated = '"' .. at .. '"'
  merge(keys[1], run_w)
  for _, u in pairs(users) do
    if u.w then
      u.w.last_updated = '"' .. at .. '"'
      merge(u.key, u.w)
    end
  end
  activity({key = keys[2], maxlen = tonumber(args[1]), run_key = keys[4]}, {type = 'reservations_released', at = at, run_id = doc.run_id,
    data = {count = released, total_tokens = tokens, why = args[2]}})
  return cjson.encode({released = released, left = left})
end

-- mh_budget_state: set a run's budget status (budget_stopped / active) with an event, and the run's own status
-- with it at once: a running run becomes budget_stopped, and running again at the reset.
-- KEYS: 1 limits:run:{id}, 2 activity, 3 run:{id}, 4 budget:run:{id} (its counters, for the event),
--       5 activity:run:{id}
-- ARGV: 1 status, 2 event JSON (actor, reason), 3 maxlen, 4 event type
-- Returns the stop event JSON (a repeated stop: the standing one, with already=true), or an error text
-- prefixed 'ERR' (a reset of a run that is not stopped, a change to an ended run).
local function mh_budget_state(keys, args)
  local ctl = get_doc(keys[1])
  if not ctl then return 'ERR no budget for this run (it has not started, or the run id is wrong)' end
  if ctl.status == 'closed' then return 'ERR the run has ended' end
  if args[1] == 'budget_stopped' and ctl.status == 'budget_stopped' and type(ctl.stop) == 'table' then
    ctl.stop.already = true  -- a second stop changes nothing: the first one's record stands
    return cjson.encode(ctl.stop)
  end
  if args[1] == 'active' and ctl.status ~= 'budget_stopped' then
    return 'ERR the run is not emergency-stopped (its budget is ' .. tostring(ctl.status) .. '); nothing to reset'
  end
  local now = now_ms()
  local at = iso(now)
  local ev = cjson.decode(args[2])
  ev.at = at
  local doc = get_doc(keys[4]) or {}
  ev.counters = {cloud_calls = doc.cloud_calls, total_tokens = doc.total_tokens, tool_calls = doc.tool_calls,
    model_calls = doc.model_calls, spend_micro_usd = doc.spend_micro_usd,
    duration_sec = math.floor((now - (ctl.started_ms or now)) / 1000), spawns = doc.spawns}
  redis.call('JSON.MERGE', keys[1], '$', cjson.encode({status = args[1], last_updated = at}))
  redis.call('JSON.SET', keys[1], '$.stop', args[1] == 'budget_stopped' and cjson.encode(ev) or 'null')
  local from, to = 'running', 'budget_stopped'
  if args[1] == 'active' then from, to = 'budget_stopped', 'running' end
  local run_status = redis.call('EXISTS', keys[3]) == 1 and cjson.decode(redis.call('JSON.GET', keys[3], '$.status'))[1]
  if run_status == from then
    redis.call('JSON.MERGE', keys[3], '$', cjson.encode({status = to, updated_at = at}))
    redis.call('JSON.ARRAPPEND', keys[3], '$.history', cjson.encode({at = at, event = args[4],
      detail = string.sub(tostring(ev.actor) .. ': ' .. tostring(ev.reason), 1, 4000)}))
  end
  if args[4] ~= '' then
    activity({key = keys[2], maxlen = tonumber(args[3]), run_key = keys[5]}, {type = args[4], at = at, run_id = ctl.run_id, data = ev})
  end
  return cjson.encode(ev)
end

-- mh_override: add a time-boxed limit delta, never above 2x the profile default.
-- KEYS: 1 limits:run:{id}, 2 activity, 3 activity:run:{id}.  ARGV: 1 override JSON {dimension, delta, actor, reason, expires_in_ms}, 2 maxlen
local function mh_override(keys, args)
  local doc = get_doc(keys[1])
  if not doc then return 'ERR no budget for this run' end
  if doc.status == 'closed' then return 'ERR the run has ended' end  -- as stop and reset say
  local o = cjson.decode(args[1])
  local now = now_ms()
  local base = (doc.limits or {})[o.dimension]
  if base == nil then return 'ERR unknown dimension ' .. o.dimension end
  local current = effective(doc, o.dimension, now)
  if current + o.delta > 2 * base then
    return 'ERR effective limit ' .. tostring(current + o.delta) .. ' would exceed 2x the profile default (' .. tostring(2 * base) .. ')'
  end
  if current + o.delta < 0 then return 'ERR the effective limit cannot go below 0' end
  local at = iso(now)
  o.created_at = at
  o.expires_at_ms = now + o.expires_in_ms
  o.expires_at = iso(o.expires_at_ms)
  o.expires_in_ms = nil
  redis.call('JSON.ARRAPPEND', keys[1], '$.overrides', cjson.encode(o))
  activity({key = keys[2], maxlen = tonumber(args[2]), run_key = keys[3]}, {type = 'budget_override', at = at, run_id = doc.run_id,
    data = {dimension = o.dimension, delta = o.delta, actor = o.actor, reason = o.reason, expires_at = o.expires_at,
            effective = current + o.delta}})
  return cjson.encode(o)
end

-- The admission queue: runs past max_concurrent_runs wait in admission:waiting, in a fair order: a run's
-- tag is one more than the larger of the queue's virtual time (the tag of the run started last) and its
-- user's last tag, so the users with waiting runs take turns, and each user's runs keep their order; runs
-- with one tag go in the order they came (a sequence number). Its score is tag * SEQ_SPAN + sequence.
-- rendered from mother.codes.SEQ_SPAN (a library loads no number from text: read in mh_admit)
local SEQ_SPAN_TEXT = '__SEQ_SPAN__'

local function hash_number(key, field)
  return tonumber(redis.call('HGET', key, field) or '0') or 0
end

local function record_admission(run_key, decision)  -- on the run's record: a re-delivered intake reads it
  if redis.call('EXISTS', run_key) == 1 then redis.call('JSON.SET', run_key, '$.admission', decision) end
end

-- mh_admit: intake's circuit breaker, the user's daily run cap, and the admission queue, in one step;
-- decided once per run (a re-delivered intake gets the first decision back: nothing is counted twice).
-- KEYS: 1 budget:global, 2 budget:user:{user}:daily:{day}, 3 run deadlines zset, 4 activity, 5 run:{id},
--       6 admission:waiting, 7 admission:state, 8 metrics:counters, 9 activity:run:{id}
-- ARGV: 1 JSON {day, run_id, user_id, child (a spawned run: never waits, its parent waits on it),
--        global{max_concurrent_runs,max_redis_memory_mb,max_docling_jobs,warning_ratio},
--        user_limits{runs,cloud_calls,total_tokens}, user_ttl_s, user_warning_ratio}, 2 maxlen
-- Returns JSON {ok=true, admitted=true, concurrent_runs, user_runs} | {ok=true, waiting=true, position,
-- waiting_runs, running} | {ok=false, code, gauge?, current, max} | {retry_day}; ``again`` when decided before.
local function mh_admit(keys, args)
  local a, act, now, at, retry = begin(args, keys[4], keys[9])
  if retry then return retry end
  local decided = redis.call('JSON.GET', keys[5], '$.admission')
  decided = decided and cjson.decode(decided)[1]
  if decided == 'admitted' then return cjson.encode({ok = true, admitted = true, again = true}) end
  if decided == 'waiting' then
    local rank = redis.call('ZRANK', keys[6], a.run_id)
    return cjson.encode({ok = true, waiting = true, again = true, position = rank and rank + 1 or 0})
  end
  local day = a.day
  act.run_id = a.run_id
  local g = get_doc(keys[1]) or {}
  local concurrent = redis.call('ZCARD', keys[3])
  local checks = {
    {'redis_memory_mb', g.redis_memory_mb or 0, a.global.max_redis_memory_mb, 'Redis memory limit reached, rejecting new runs'},
    {'docling_jobs', g.docling_jobs or 0, a.global.max_docling_jobs, 'Max docling jobs reached, rejecting new runs'},
  }
  for _, c in ipairs(checks) do
    if c[2] >= c[3] then
      activity(act, {type = 'circuit_breaker', at = at, run_id = a.run_id,
        data = {message = c[4], gauge = c[1], current = c[2], limit = c[3]}})
      count('budget_refusals|circuit_open')
      return cjson.encode({ok = false, code = 'circuit_open', gauge = c[1], current = c[2], max = c[3]})
    end
  end
  local user = ensure_user(keys[2], a, day, at)
  if user.runs >= a.user_limits.runs then  -- Mother's limit, not what the document (workers may write it) says
    return refuse(keys[2], user, code_of('user', 'runs'), user.runs, a.user_limits.runs, at, act)
  end
  user.runs = user.runs + 1
  merge(keys[2], {runs = int_text(user.runs), last_updated = cjson.encode(at)})
  thresholds(keys[2], user, {runs = true}, now, at, 'user', act, {limits = a.user_limits, warning_ratio = a.user_warning_ratio})
  if redis.call('EXISTS', keys[1]) == 0 then
    redis.call('JSON.SET', keys[1], '$', cjson.encode({concurrent_runs = concurrent, queue_depth = 0, redis_memory_mb = 0, docling_jobs = 0}))
  end
  local max = a.global.max_concurrent_runs
  local queued = redis.call('ZCARD', keys[6])
  if not a.child and (concurrent >= max or queued > 0) then  -- wait for a slot, behind those already waiting
    local tag = math.max(hash_number(keys[7], 'vtime'), hash_number(keys[7], 'user:' .. a.user_id)) + 1
    local span = tonumber(SEQ_SPAN_TEXT)
    local seq = redis.call('HINCRBY', keys[7], 'seq', 1) % span
    redis.call('ZADD', keys[6], tag * span + seq, a.run_id)
    redis.call('HSET', keys[7], 'user:' .. a.user_id, tag)
    record_admission(keys[5], '"waiting"')
    local position = redis.call('ZRANK', keys[6], a.run_id) + 1
    redis.call('JSON.SET', keys[1], '$.queue_depth', queued + 1)
    activity(act, {type = 'run_queued', at = at, run_id = a.run_id,
      data = {position = position, waiting = queued + 1, running = concurrent, max_concurrent_runs = max}})
    return cjson.encode({ok = true, waiting = true, position = position, waiting_runs = queued + 1, running = concurrent})
  end
  -- the gauge is derived (runs with a live deadline), so a crashed worker cannot leak it
  local gauge = concurrent + 1
  redis.call('JSON.SET', keys[1], '$.concurrent_runs', gauge)
  record_admission(keys[5], '"admitted"')
  if gauge >= a.global.warning_ratio * max then
    activity(act, {type = 'circuit_breaker', at = at, run_id = a.run_id,
      data = {message = 'concurrent runs at warning level', gauge = 'concurrent_runs', current = gauge,
              limit = max, level = 'warning'}})
  end
  return cjson.encode({ok = true, admitted = true, concurrent_runs = gauge, user_runs = user.runs})
end

-- the submissions not yet handled by consumer group ``group`` of ``stream``: pending + not yet delivered
-- (counted up to ``cap`` + 1 entries when the server cannot tell the lag: entries deleted ahead of the
-- group); every entry when no group reads the stream yet, none when there is no stream
local function backlog(stream, group, cap)
  local groups = redis.pcall('XINFO', 'GROUPS', stream)
  if type(groups) ~= 'table' or groups.err then return 0 end
  for _, info in ipairs(groups) do
    local fields = {}
    for i = 1, #info, 2 do fields[info[i]] = info[i + 1] end
    if fields.name == group then
      local lag = fields.lag
      if type(lag) ~= 'number' then
        lag = #redis.call('XRANGE', stream, '(' .. fields['last-delivered-id'], '+', 'COUNT', cap + 1)
      end
      return fields.pending + lag
    end
  end
  return redis.call('XLEN', stream)
end

-- a number the leading Mother published in mother:config (its effective settings), else ``fallback``
local function published(key, path, fallback)
  local raw = redis.pcall('JSON.GET', key, path)
  if type(raw) == 'string' then
    local value = cjson.decode(raw)[1]
    if type(value) == 'number' then return value end
  end
  return fallback
end

-- mh_submit_check: what a submitter may learn before it appends, changing nothing (Mother decides at
-- intake, where the run_id is claimed, the rate window counted and the queue measured, whatever path the
-- submission came by): whether the run_id is taken, the queue is full (the submitter's stream's backlog and
-- the runs waiting for a slot, against the leading Mother's max_queue_depth), or the user's rate window is
-- full.
-- KEYS: 1 the stream it appends to, 2 runs:claimed, 3 admission:waiting, 4 mother:config, 5 the user's
--       rate-limit window
-- ARGV: 1 run_id, 2 max_queue_depth when none is published, 3 Mother's consumer group, 4 the rate limit
--       and 5 the window ms when none is published (the leading Mother's decide, as at intake)
-- Returns {'ok'} | {'run_id_taken', the entry that claimed it} | {'queue_full', depth, max}
--       | {'rate_limited', ms until a message leaves the window}
local function mh_submit_check(keys, args)
  local owner = redis.call('HGET', keys[2], args[1])
  if owner then return {'run_id_taken', owner} end
  local max = published(keys[4], '$.max_queue_depth', tonumber(args[2]))
  local depth = backlog(keys[1], args[3], max) + redis.call('ZCARD', keys[3])
  if depth >= max then return {'queue_full', depth, max} end
  local limit = published(keys[4], '$.rate_limit_messages', tonumber(args[4]))
  local now, window = now_ms(), published(keys[4], '$.rate_limit_window_ms', tonumber(args[5]))
  local since = '(' .. (now - window)
  if redis.call('ZCOUNT', keys[5], since, '+inf') >= limit then
    local oldest = redis.call('ZRANGE', keys[5], since, '+inf', 'BYSCORE', 'LIMIT', 0, 1, 'WITHSCORES')
    return {'rate_limited', tonumber(oldest[2]) + window - now}
  end
  return {'ok'}
end

-- mh_rate: sliding-window rate limit on server time; one window per user across all clients (Mother's
-- intake counts every submission here).
-- KEYS: 1 the user's window zset.  ARGV: 1 limit, 2 window ms, 3 a unique member id
-- Returns {1, remaining} or {0, retry_after_ms}.
local function mh_rate(keys, args)
  local now = now_ms()
  local window = tonumber(args[2])
  redis.call('ZREMRANGEBYSCORE', keys[1], '-inf', now - window)
  local count = redis.call('ZCARD', keys[1])
  if count >= tonumber(args[1]) then
    local oldest = tonumber(redis.call('ZRANGE', keys[1], 0, 0, 'WITHSCORES')[2])
    return {0, oldest + window - now}
  end
  redis.call('ZADD', keys[1], now, args[3])
  redis.call('PEXPIRE', keys[1], window)
  return {1, tonumber(args[1]) - count - 1}
end

redis.register_function('mh_guard', counted(mh_guard, 5))
redis.register_function('mh_budget_state', mh_budget_state)
redis.register_function('mh_override', mh_override)
redis.register_function('mh_admit', counted(mh_admit, 8))
redis.register_function{function_name='mh_submit_check', callback=mh_submit_check, flags={'no-writes'}}
redis.register_function('mh_rate', mh_rate)
redis.register_function('mh_release_reservations', mh_release_reservations)

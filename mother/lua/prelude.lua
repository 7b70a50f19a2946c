-- Shared helpers, prepended to every Mother-Harness Functions library by mother/functions.py
-- (libraries cannot call each other's local functions). Not a library of its own.

-- metrics:counters: the monotonic counters /metrics exposes (mother/web/metrics.py), one hash field
-- each ('runs_terminated|success'); counted in the same call as what they count. The key is passed in
-- KEYS like every other (ACL key patterns and a cluster's slot check see it): a function that counts is
-- registered through counted(fn, index), which takes the key from KEYS[index] for the call's length.
local metrics_key = nil
local function count(field, n)
  if metrics_key == nil then error('count() outside a counted function: metrics:counters was not passed in KEYS') end
  redis.call('HINCRBY', metrics_key, field, n or 1)
end

-- a histogram observation (mother.records.metrics.HISTOGRAMS: '<name>_bucket|<bound>', sum, count) with the
-- long bounds, rendered from mother.records.metrics.LONG_BOUNDS: {seconds, field text}
local LONG_BOUNDS = {__LONG_BOUNDS__}
local function observe(name, ms)
  local bucket = '+Inf'
  for _, b in ipairs(LONG_BOUNDS) do
    if ms <= b[1] * 1000 then bucket = b[2]; break end
  end
  count(name .. '_bucket|' .. bucket)
  count(name .. '_ms_sum', math.max(0, math.floor(ms)))
  count(name .. '_count')
end

local function counted(fn, index)
  return function(keys, args)
    local key = keys[index]
    if key ~= 'metrics:counters' then
      return redis.error_reply('ERR KEYS[' .. index .. '] must be metrics:counters, got ' .. tostring(key))
    end
    metrics_key = key
    local ok, result = pcall(fn, keys, args)
    metrics_key = nil
    if not ok then error(result, 0) end
    return result
  end
end

-- Follow-up writes: commands a function makes only when its check passed (a run's move and its new
-- attempt's job; what a host's ask writes once Mother found the host holds the attempt). Each is given as
-- ARGV n, the command's name, then its n - 1 words after its key, the key being the next of KEYS from
-- ``first_key`` (mother.functions.follow_ups). Read, and their shape checked, before anything is written:
-- returns {{first ARGV, word count, key}, ...}.
local function read_follow_ups(keys, args, first_key, first_arg)
  local ops, i = {}, first_arg
  while i <= #args do
    local n, key = tonumber(args[i]), keys[#ops + first_key]
    if n == nil or n < 1 or i + n > #args or key == nil then error('malformed follow-up command at ARGV ' .. i) end
    ops[#ops + 1] = {i, n, key}
    i = i + n + 1
  end
  if #ops ~= #keys - first_key + 1 then
    error('follow-up keys (' .. (#keys - first_key + 1) .. ') do not match the commands (' .. #ops .. ')')
  end
  return ops
end

local function apply_follow_ups(args, ops)
  for _, op in ipairs(ops) do
    local at, n = op[1], op[2]
    redis.call(args[at + 1], op[3], unpack(args, at + 2, at + n))
  end
end

-- activity: every entry goes to the global stream (live tails, metrics; capped by service.activity_maxlen)
-- and, when it names a run, to that run's own stream in the same call (kept with the run's records: the
-- run page, logs, inspect and replay read it). A function that appends entries takes the run's stream in
-- KEYS like every other key; ``run_key`` must be the stream of the run the entry names.
local RUN_ACTIVITY_PREFIX, RUN_ACTIVITY_MAXLEN = '__RUN_ACTIVITY_PREFIX__', '__RUN_ACTIVITY_MAXLEN__'
local function append_activity(stream, maxlen, run_key, run_id, flat)
  redis.call('XADD', stream, 'MAXLEN', '~', maxlen, '*', unpack(flat))
  if run_id == nil or run_id == cjson.null or run_id == '' then return end
  if run_key ~= RUN_ACTIVITY_PREFIX .. run_id then
    error('the activity stream of run ' .. tostring(run_id) .. ' must be passed in KEYS, got ' .. tostring(run_key))
  end
  redis.call('XADD', run_key, 'MAXLEN', '~', RUN_ACTIVITY_MAXLEN, '*', unpack(flat))
end

-- Whether a worker host holds a run's attempt: the run is running (or emergency-stopped) at that phase
-- index and attempt, and Mother queued that attempt on that host ($.host). An ask about an attempt the
-- host does not hold changes nothing.
local function holds(run_key, index, attempt, host)
  local raw = redis.call('JSON.GET', run_key, '$.status', '$.phase_index', '$.attempt', '$.host')
  if not raw then return false end
  local seen = cjson.decode(raw)
  local status = seen['$.status'][1]
  return (status == 'running' or status == 'budget_stopped') and seen['$.phase_index'][1] == tonumber(index)
    and seen['$.attempt'][1] == tonumber(attempt) and host ~= '' and seen['$.host'][1] == host
end

-- the run an entry's flat field list [field, value, ...] names (nil: none)
local function flat_run_id(flat)
  for i = 1, #flat - 1, 2 do
    if flat[i] == 'run_id' then return flat[i + 1] end
  end
  return nil
end

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- ISO-8601 UTC text of a time in ms, and its date. The second's text is cached (a pure function of
-- the second, so the cache can never be stale), as is each millisecond's; a call only joins the two.
local iso_second, iso_prefix, iso_day = nil, nil, nil
local ms_tails = {}  -- milliseconds -> their text and the 'Z', made once each
local function iso(ms)
  local secs = math.floor(ms / 1000)
  if secs ~= iso_second then
    local days = math.floor(secs / 86400)
    local rem = secs % 86400
    local z = days + 719468
    local era = math.floor(z / 146097)
    local doe = z - era * 146097
    local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524) - math.floor(doe / 146096)) / 365)
    local y = yoe + era * 400
    local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
    local mp = math.floor((5 * doy + 2) / 153)
    local d = doy - math.floor((153 * mp + 2) / 5) + 1
    local m = mp < 10 and mp + 3 or mp - 9
    if m <= 2 then y = y + 1 end
    iso_day = string.format('%04d-%02d-%02d', y, m, d)
    iso_prefix = string.format('%sT%02d:%02d:%02d.', iso_day, math.floor(rem / 3600), math.floor(rem % 3600 / 60), rem % 60)
    iso_second = secs
  end
  local frac = math.floor(ms % 1000)
  local tail = ms_tails[frac]
  if tail == nil then
    tail = string.format('%03dZ', frac)
    ms_tails[frac] = tail
  end
  return iso_prefix .. tail, iso_day
end

-- an integer's exact JSON text (Lua numbers are doubles, exact below 2^53): '%d' within that range,
-- '%.0f' beyond (it never writes an exponent)
local function int_text(n)
  if n > -9007199254740992 and n < 9007199254740992 then return string.format('%d', n) end
  return string.format('%.0f', n)
end

local function get_doc(key)
  local raw = redis.call('JSON.GET', key)
  if not raw then return nil end
  return cjson.decode(raw)
end

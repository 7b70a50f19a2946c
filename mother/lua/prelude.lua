-- Shared helpers, prepended to every Mother-Harness Functions library by mother/functions.py
-- (libraries cannot call each other's local functions). Not a library of its own.

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function iso(ms)
  local secs = math.floor(ms / 1000)
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
  return string.format('%04d-%02d-%02dT%02d:%02d:%02d.%03dZ', y, m, d,
    math.floor(rem / 3600), math.floor(rem % 3600 / 60), rem % 60, ms % 1000), string.format('%04d-%02d-%02d', y, m, d)
end

local function get_doc(key)
  local raw = redis.call('JSON.GET', key)
  if not raw then return nil end
  return cjson.decode(raw)
end

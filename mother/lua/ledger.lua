#!lua name=mother_ledger
-- The hierarchical spend ledger (the spec's BudgetLedger) in Redis. One document per
-- thread (run): ledger:{id} = {thread_id, parent_id, ancestors[], max_spend, reserved,
-- own_spend, actual, active_reserved, status}, and its children in the set ledger_children:{id}
-- (kept out of the document so a busy parent stays small to decode). Money is integer micro-USD.
-- remaining(t) = max_spend - actual - active_reserved (the reserved of t's active children).
-- Every key is passed in KEYS; validate first, write last.

local function remaining(doc) return doc.max_spend - doc.actual - doc.active_reserved end

local function err(text) return cjson.encode({ok = false, error = text}) end

-- ledger_register: KEYS 1 ledger:{id}. ARGV 1 id, 2 max_spend, 3 created_at
local function ledger_register(keys, args)
  local doc = get_doc(keys[1])
  if doc then
    if doc.max_spend ~= tonumber(args[2]) or doc.parent_id ~= cjson.null then
      return err('thread ' .. args[1] .. ' is already registered with another budget or as a child')
    end
    return cjson.encode({ok = true, existed = true, remaining = remaining(doc)})
  end
  local max = tonumber(args[2])
  redis.call('JSON.SET', keys[1], '$', cjson.encode({thread_id = args[1], parent_id = cjson.null, max_spend = max,
    reserved = max, own_spend = 0, actual = 0, active_reserved = 0, status = 'active', created_at = args[3]}))
  redis.call('JSON.SET', keys[1], '$.ancestors', '[]')
  return cjson.encode({ok = true, remaining = max})
end

-- ledger_reserve: KEYS 1 ledger:{parent}, 2 ledger:{child}, 3 ledger_children:{parent}.
-- ARGV 1 child id, 2 amount, 3 created_at
local function ledger_reserve(keys, args)
  local parent = get_doc(keys[1])
  if not parent then return err('no parent thread in the ledger') end
  if parent.status ~= 'active' then return err('parent thread is ' .. parent.status) end
  if redis.call('EXISTS', keys[2]) == 1 then return err('thread ' .. args[1] .. ' already has a reservation') end
  local amount = tonumber(args[2])
  local left = remaining(parent)
  if amount > left then
    return cjson.encode({ok = false, insufficient = true, remaining = left, requested = amount})
  end
  local ancestors = parent.ancestors or {}
  local chain = {}
  for _, a in ipairs(ancestors) do chain[#chain + 1] = a end
  chain[#chain + 1] = parent.thread_id
  redis.call('JSON.SET', keys[2], '$', cjson.encode({thread_id = args[1], parent_id = parent.thread_id,
    ancestors = chain, max_spend = amount, reserved = amount, own_spend = 0, actual = 0, active_reserved = 0,
    status = 'active', created_at = args[3]}))
  redis.call('JSON.NUMINCRBY', keys[1], '$.active_reserved', amount)
  redis.call('SADD', keys[3], args[1])
  return cjson.encode({ok = true, remaining = left - amount})
end

-- The three steps of a thread's end, shared by the functions that make them one at a time (the spec's
-- API) and ledger_close (a run's end, all three at once). ``doc`` is the thread's document as read.
local function report(key, doc, own)  -- its own spend set (not added); returns actual, overspend
  local actual = doc.actual - doc.own_spend + own
  redis.call('JSON.SET', key, '$.own_spend', own)
  redis.call('JSON.SET', key, '$.actual', actual)
  local over = 0
  if doc.parent_id ~= cjson.null and actual > doc.reserved then over = actual - doc.reserved end
  return actual, over
end

local function cascade(keys, first, amount)  -- amount added to the actual of keys[first..]
  for i = first, #keys do
    redis.call('JSON.NUMINCRBY', keys[i], '$.actual', amount)
  end
end

local function release(key, parent_key, doc, actual, status)  -- reserved := actual; returns what it freed
  redis.call('JSON.SET', key, '$.status', cjson.encode(status))
  redis.call('JSON.SET', key, '$.reserved', actual)
  if doc.parent_id ~= cjson.null then
    redis.call('JSON.NUMINCRBY', parent_key, '$.active_reserved', -doc.reserved)
  end
  return doc.reserved - actual
end

-- ledger_report: a thread's own spend so far (set, not added). KEYS 1 ledger:{id}. ARGV 1 own spend
-- Returns {ok, actual, overspend (actual - reserved when positive, for a child)}.
local function ledger_report(keys, args)
  local doc = get_doc(keys[1])
  if not doc then return err('thread is not in the ledger') end
  local actual, over = report(keys[1], doc, tonumber(args[1]))
  return cjson.encode({ok = true, actual = actual, overspend = over})
end

-- ledger_cascade: add a child's spend to every ancestor's actual.
-- KEYS 1 ledger:{child}, 2.. ledger:{ancestor} from the parent up to the root. ARGV 1 amount
local function ledger_cascade(keys, args)
  local child = get_doc(keys[1])
  if not child then return err('thread is not in the ledger') end
  local chain = child.ancestors or {}
  if #keys - 1 ~= #chain then return err('ancestor keys do not match the thread\'s lineage') end
  cascade(keys, 2, tonumber(args[1]))
  return cjson.encode({ok = true, ancestors = #chain})
end

-- ledger_release: on completion reserved := actual; the parent stops counting the reservation.
-- KEYS 1 ledger:{id}, 2 ledger:{parent} (or the same key for a root). ARGV 1 final status
local function ledger_release(keys, args)
  local doc = get_doc(keys[1])
  if not doc then return err('thread is not in the ledger') end
  if doc.status ~= 'active' then return cjson.encode({ok = true, already = doc.status}) end
  return cjson.encode({ok = true, freed = release(keys[1], keys[2], doc, doc.actual, args[1])})
end

-- ledger_close: a thread's end in one step, once: report its own spend, add it to every ancestor's actual
-- and release its reservation. A thread no longer active is left as it is (its close was applied: a second
-- one would cascade its spend twice).
-- KEYS 1 ledger:{id}, 2 ledger:{parent} (or the same key for a root), 3.. ledger:{ancestor} from the parent up
-- to the root. ARGV 1 own spend, 2 final status.
-- Returns {ok, actual, overspend, freed}, or {ok, already = status} when it was closed before.
local function ledger_close(keys, args)
  local doc = get_doc(keys[1])
  if not doc then return err('thread is not in the ledger') end
  if doc.status ~= 'active' then return cjson.encode({ok = true, already = doc.status, overspend = 0, freed = 0}) end
  if #keys - 2 ~= #(doc.ancestors or {}) then return err('ancestor keys do not match the thread\'s lineage') end
  local own = tonumber(args[1])
  local actual, over = report(keys[1], doc, own)
  cascade(keys, 3, own)
  local freed = release(keys[1], keys[2], doc, actual, args[2])
  return cjson.encode({ok = true, actual = actual, overspend = over, freed = freed})
end

redis.register_function('ledger_register', ledger_register)
redis.register_function('ledger_reserve', ledger_reserve)
redis.register_function('ledger_report', ledger_report)
redis.register_function('ledger_cascade', ledger_cascade)
redis.register_function('ledger_release', ledger_release)
redis.register_function('ledger_close', ledger_close)

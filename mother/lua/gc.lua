#!lua name=mother_gc
-- Artifact lifecycle and retention (seed 003 §6). Each function changes one artifact or one run, in
-- one step, and checks first that the index still says it is due: a GC killed half way and run again
-- finishes the first's work and removes nothing twice. Times are the caller's `now` (the server's
-- clock, read by the GC, or given to it to collect as of another time).

-- the bytes a key holds (0 when it does not exist)
local function usage(key)
  return tonumber(redis.call('MEMORY', 'USAGE', key) or 0) or 0
end

-- an entry about an artifact; one that names its run goes to the run's own stream too (``run_key``)
local function audit(stream, maxlen, at, kind, fields, run_key)
  local flat = {'type', kind, 'at', at}
  local run_id = fields.run_id
  if run_id then
    table.insert(flat, 'run_id'); table.insert(flat, run_id)
    fields.run_id = nil
  end
  table.insert(flat, 'data'); table.insert(flat, cjson.encode(fields))
  append_activity(stream, maxlen, run_key, run_id, flat)
end

-- delete an artifact (content, archive, metadata) and take it off both indexes, with an audit entry;
-- returns {bytes, keys removed}
-- ``pending``: no entry of its own; the id joins that list, which mh_gc_drain turns into one entry a batch
local function delete_artifact(keys, id, stream, maxlen, at, fields, pending, run_key)
  local freed = usage(keys[1]) + usage(keys[2]) + usage(keys[3])
  local removed = redis.call('DEL', keys[1], keys[2], keys[3])
  redis.call('ZREM', keys[4], id)
  redis.call('ZREM', keys[5], id)
  if pending then
    redis.call('RPUSH', pending, id)
  else
    fields.artifact_id, fields.bytes, fields.keys = id, freed, removed
    audit(stream, maxlen, at, 'artifact_deleted', fields, run_key)
  end
  return freed, removed
end

local function set_fields(key, fields)
  for path, value in pairs(fields) do
    redis.call('JSON.SET', key, '$.' .. path, cjson.encode(value))
  end
end

-- the content of a workspace artifact: the stored manifest, or what it holds when it is too long to be one
local MAX_CONTENT = 1000000

-- A run's stored workspace (workers/workspaces.py) becomes one of its artifacts at its end, once: kind
-- 'workspace', its content the manifest (path -> sha256, size, mode, mtime), its size the files' bytes.
-- Its retention, star and protection then keep the stored contents: the GC deletes them with it.
local function workspace_artifact(run_id, manifest_key, art_key, meta_key, run_key, id)
  if redis.call('EXISTS', meta_key) == 1 then return end
  local raw = redis.call('GET', manifest_key)
  if not raw then return end
  local ok, doc = pcall(cjson.decode, raw)
  if not ok or type(doc) ~= 'table' or type(doc.files) ~= 'table' then return end
  local files = 0
  for _ in pairs(doc.files) do files = files + 1 end
  local content = raw
  if #raw > MAX_CONTENT then
    content = cjson.encode({run_id = run_id, files = files, bytes = doc.bytes,
      note = 'the manifest is longer than an artifact holds: `mother artifacts export` writes the files'})
  end
  local now = iso(now_ms())
  redis.call('JSON.SET', art_key, '$', cjson.encode({artifact_id = id, run_id = run_id,
    phase = 'workspace', attempt = 0, kind = 'workspace', content = content}))
  redis.call('JSON.SET', meta_key, '$', cjson.encode({artifact_id = id, run_id = run_id,
    phase = 'workspace', kind = 'workspace', created_at = now,
    size_bytes = math.floor(tonumber(doc.bytes) or 0), content_type = 'application/json',
    status = 'active', retention_class = 'default', protected = false, user_starred = false}))
  if redis.call('EXISTS', run_key) == 1 then
    local listed = redis.call('JSON.ARRINDEX', run_key, '$.artifacts', cjson.encode(id))
    if type(listed) == 'table' and listed[1] == -1 then
      redis.call('JSON.ARRAPPEND', run_key, '$.artifacts', cjson.encode(id))
    end
  end
end

-- mh_retain: a run ended; its stored workspace becomes an artifact (workspace_artifact), then its
-- accepted artifacts move to their retention class and its records are scheduled. A protected artifact
-- leaves the indexes (kept forever); one that is gone is skipped. Idempotent (Mother applies an end
-- again after a crash).
-- KEYS: 1 artifacts:expiry, 2 artifacts:archive_due, 3 retention:runs, 4 workspace:{run},
--       5 artifact:{workspace artifact}, 6 artifact_meta:{workspace artifact}, 7 run:{id},
--       8.. artifact_meta:{id}
-- ARGV: 1 run_id, 2 class, 3 expires_ms, 4 archive_ms ('' none), 5 records_ms, 6 the workspace
--       artifact's id, then per artifact its id (in KEYS order)
local function mh_retain(keys, args)
  local cls, expires, archive, records = args[2], tonumber(args[3]), args[4], tonumber(args[5])
  local expires_iso = iso(expires)
  local archive_iso = archive ~= '' and iso(tonumber(archive)) or nil
  local moved = 0
  workspace_artifact(args[1], keys[4], keys[5], keys[6], keys[7], args[6])
  local metas, ids = {keys[6]}, {args[6]}
  for i = 8, #keys do
    metas[#metas + 1] = keys[i]
    ids[#ids + 1] = args[7 + i - 8]
  end
  for i = 1, #metas do
    local id, meta = ids[i], metas[i]
    local doc = get_doc(meta)
    if doc then
      local fields = {retention_class = cls, expires_at = expires_iso}
      if doc.status ~= 'archived' and archive_iso then fields.archive_due_at = archive_iso end
      set_fields(meta, fields)
      if doc.protected then
        -- kept forever while protected; its times stay on it for when it is not
        redis.call('ZREM', keys[1], id)
        redis.call('ZREM', keys[2], id)
      else
        redis.call('ZADD', keys[1], expires, id)
        if doc.status ~= 'archived' and archive_iso then
          redis.call('ZADD', keys[2], tonumber(archive), id)
        end
        moved = moved + 1
      end
    end
  end
  redis.call('ZADD', keys[3], records, args[1])
  return moved
end

-- mh_gc_expire: delete one expired artifact (its content, archive and metadata), or skip it.
-- KEYS: 1 artifact_meta, 2 artifact, 3 archive:artifact, 4 artifacts:expiry, 5 artifacts:archive_due,
--       6 activity, 7 gc:deleted (its id goes there; mh_gc_drain writes one entry a batch),
--       8 activity:run:{id} of the artifact's run (its deletion_scheduled entry)
-- ARGV: 1 id, 2 now_ms, 3 notify_ms (a starred one's grace; '' : starred ones are protected),
--       4 activity maxlen
-- Returns {outcome, bytes, keys removed}: deleted, protected, deferred, not_due, gone.
local function mh_gc_expire(keys, args)
  local id, now = args[1], tonumber(args[2])
  local score = redis.call('ZSCORE', keys[4], id)
  if not score then return {'not_due', 0} end
  if tonumber(score) > now then return {'not_due', 0} end
  local at = iso(now)
  local doc = get_doc(keys[1])
  if doc and doc.protected then
    redis.call('ZREM', keys[4], id)
    redis.call('ZREM', keys[5], id)
    return {'protected', 0}
  end
  if doc and doc.user_starred and doc.status ~= 'scheduled_deletion' then
    if args[3] == '' then
      redis.call('ZREM', keys[4], id)
      redis.call('ZREM', keys[5], id)
      return {'protected', 0}
    end
    local later = now + tonumber(args[3])
    set_fields(keys[1], {status = 'scheduled_deletion', expires_at = iso(later), deletion_notified_at = at})
    redis.call('ZADD', keys[4], later, id)
    audit(keys[6], args[4], at, 'artifact_deletion_scheduled',
      {run_id = doc.run_id, artifact_id = id, delete_at = iso(later),
       message = 'a starred artifact expired: it is deleted at delete_at unless it is protected'}, keys[8])
    return {'deferred', 0}
  end
  local freed, removed = delete_artifact(keys, id, keys[6], args[4], at, {}, keys[7])
  if not doc then return {'gone', freed, removed} end
  return {'deleted', freed, removed}
end

-- mh_gc_archive: replace an artifact's active copy with its compressed archive (made by the GC from
-- the content whose sha1 it gives: if the content changed since, nothing is done).
-- KEYS: 1 artifact_meta, 2 artifact, 3 archive:artifact, 4 artifacts:archive_due
-- ARGV: 1 id, 2 now_ms, 3 sha1 of the content the archive holds, 4 the archive's bytes
-- Returns {outcome, bytes freed}: archived, protected, not_due, changed, gone.
local function mh_gc_archive(keys, args)
  local id, now = args[1], tonumber(args[2])
  local score = redis.call('ZSCORE', keys[4], id)
  if not score or tonumber(score) > now then return {'not_due', 0} end
  local doc = get_doc(keys[1])
  local raw = redis.call('JSON.GET', keys[2])
  if not doc or not raw or doc.status == 'archived' then
    redis.call('ZREM', keys[4], id)
    return {'gone', 0}
  end
  if doc.protected then
    redis.call('ZREM', keys[4], id)
    return {'protected', 0}
  end
  if redis.sha1hex(raw) ~= args[3] then return {'changed', 0} end
  local before = usage(keys[2])
  redis.call('SET', keys[3], args[4])
  redis.call('DEL', keys[2])
  set_fields(keys[1], {status = 'archived', archived_at = iso(now)})
  redis.call('ZREM', keys[4], id)
  return {'archived', before - usage(keys[3])}
end

-- mh_gc_forget_run: remove an ended run's own records and its entries in the run indexes, if its
-- retention is still due (a starred or protected artifact's run was re-scheduled by the GC instead).
-- KEYS: 1 retention:runs, 2 runs:all, 3 runs:user:{user}, 4 the reason's termination index,
--       5 gc:forgotten (its id goes there; mh_gc_drain writes one entry a batch), 6 runs:claimed,
--       7.. the run's keys (run, termination, result, budgets, limits, contexts, ...)
-- ARGV: 1 run_id, 2 now_ms
-- Returns {removed keys, bytes} or {-1, 0} when not due.
local function mh_gc_forget_run(keys, args)
  local run_id, now = args[1], tonumber(args[2])
  local score = redis.call('ZSCORE', keys[1], run_id)
  if not score or tonumber(score) > now then return {-1, 0} end
  local freed = 0
  for i = 7, #keys do freed = freed + usage(keys[i]) end
  local removed = 0
  if #keys >= 7 then removed = redis.call('DEL', unpack(keys, 7)) end
  redis.call('ZREM', keys[1], run_id)
  redis.call('ZREM', keys[2], run_id)
  redis.call('ZREM', keys[3], run_id)
  redis.call('ZREM', keys[4], run_id)
  -- its run_id's claim goes with it (runs:claimed grew by one a run, forever)
  redis.call('HDEL', keys[6], run_id)
  redis.call('RPUSH', keys[5], run_id)
  return {removed, freed}
end

local function ms_of(text)
  -- 'YYYY-MM-DDTHH:MM:SS.mmmZ' -> ms (the inverse of iso)
  local y, m, d, hh, mm, ss, ms = string.match(text, '^(%d+)-(%d+)-(%d+)T(%d+):(%d+):(%d+)%.(%d+)Z$')
  y, m, d = tonumber(y), tonumber(m), tonumber(d)
  if m <= 2 then y = y - 1 end
  local era = math.floor(y / 400)
  local yoe = y - era * 400
  local mp = (m + 9) % 12
  local doy = math.floor((153 * mp + 2) / 5) + d - 1
  local doe = yoe * 365 + math.floor(yoe / 4) - math.floor(yoe / 100) + doy
  local days = era * 146097 + doe - 719468
  return ((days * 24 + tonumber(hh)) * 60 + tonumber(mm)) * 60000 + tonumber(ss) * 1000 + tonumber(ms)
end

-- back on the indexes by the times it carries (an artifact no longer protected)
local function reindex(doc, id, expiry, archive_due)
  if doc.expires_at and doc.expires_at ~= cjson.null then
    redis.call('ZADD', expiry, ms_of(doc.expires_at), id)
  end
  if doc.status == 'active' and doc.archive_due_at and doc.archive_due_at ~= cjson.null then
    redis.call('ZADD', archive_due, ms_of(doc.archive_due_at), id)
  end
end

-- mh_artifact_control: a person's control of one artifact, checked and applied in one step.
-- KEYS: 1 artifact_meta, 2 artifact, 3 archive:artifact, 4 artifacts:expiry, 5 artifacts:archive_due,
--       6 activity, 7 activity:run:{id} of the artifact's run
-- ARGV: 1 op (star|unstar|protect|unprotect|delete), 2 id, 3 now_ms, 4 actor, 5 reason (protect),
--       6 '1' when a star protects (exceptions.user_starred), 7 activity maxlen
-- Returns the metadata as JSON after the op ('' after delete).
local function mh_artifact_control(keys, args)
  local op, id, now, actor = args[1], args[2], tonumber(args[3]), args[4]
  local doc = get_doc(keys[1])
  if not doc then return redis.error_reply('ERR no artifact ' .. id .. ' (no artifact_meta:' .. id .. ')') end
  local at = iso(now)
  if op == 'star' or op == 'protect' then
    local reason = op == 'star' and 'user_starred' or args[5]
    local fields = {}
    if op == 'star' then fields.user_starred = true end
    if op == 'protect' or args[6] == '1' then
      if not doc.protected then
        fields.protected = true
        fields.protection_reason = reason
      elseif op == 'protect' then
        fields.protection_reason = reason
      end
      -- protected: never collected, so off the indexes
      redis.call('ZREM', keys[4], id)
      redis.call('ZREM', keys[5], id)
    end
    if doc.status == 'scheduled_deletion' and (fields.protected or doc.protected) then
      fields.status = 'active'
    end
    set_fields(keys[1], fields)
  elseif op == 'unstar' or op == 'unprotect' then
    local fields = {}
    if op == 'unstar' then fields.user_starred = false end
    local lifts = (op == 'unprotect' and doc.protected) or
      (op == 'unstar' and doc.protected and doc.protection_reason == 'user_starred')
    if lifts then
      fields.protected = false
      fields.protection_reason = cjson.null
      doc.protected = false
    end
    if op == 'unstar' then doc.user_starred = false end
    -- whatever took it off the indexes before (a protection, a star the GC kept), nothing keeps it
    -- now unless a star still does: back on them
    if not doc.protected and not (doc.user_starred and args[6] == '1') then
      reindex(doc, id, keys[4], keys[5])
    end
    set_fields(keys[1], fields)
  elseif op == 'delete' then
    if doc.protected then
      return redis.error_reply('ERR artifact ' .. id .. ' is protected (' .. tostring(doc.protection_reason) ..
        '): unprotect it first')
    end
    delete_artifact(keys, id, keys[6], args[7], at, {run_id = doc.run_id, actor = actor, early = true}, nil, keys[7])
    return ''
  else
    return redis.error_reply('ERR unknown artifact op ' .. tostring(op))
  end
  audit(keys[6], args[7], at, 'artifact_' .. op .. (op:sub(-1) == 'r' and 'red' or 'ed'),
    {run_id = doc.run_id, artifact_id = id, actor = actor, reason = args[5] ~= '' and args[5] or nil}, keys[7])
  return redis.call('JSON.GET', keys[1])
end

-- mh_artifact_restore: put an archived artifact's content back (the GC's archive, decompressed and
-- checked by the caller) and drop the archive.
-- KEYS: 1 artifact_meta, 2 artifact, 3 archive:artifact, 4 activity, 5 activity:run:{id} of its run
-- ARGV: 1 id, 2 the content (JSON), 3 now_ms, 4 actor, 5 activity maxlen, 6 sha1 of the archive read
local function mh_artifact_restore(keys, args)
  local doc = get_doc(keys[1])
  if not doc then return redis.error_reply('ERR no artifact ' .. args[1]) end
  local blob = redis.call('GET', keys[3])
  if doc.status ~= 'archived' or not blob then
    return redis.error_reply('ERR artifact ' .. args[1] .. ' is not archived (status ' .. tostring(doc.status) .. ')')
  end
  if redis.sha1hex(blob) ~= args[6] then
    return redis.error_reply('ERR the archive of ' .. args[1] .. ' changed while it was read; try again')
  end
  redis.call('JSON.SET', keys[2], '$', args[2])
  redis.call('DEL', keys[3])
  set_fields(keys[1], {status = 'active', archived_at = cjson.null, archive_due_at = cjson.null})
  audit(keys[4], args[5], iso(tonumber(args[3])), 'artifact_restored',
    {run_id = doc.run_id, artifact_id = args[1], actor = args[4]}, keys[5])
  return redis.call('JSON.GET', keys[1])
end

-- mh_gc_drain: one activity entry for what the GC removed since the last one (a batch): how many, and
-- the first ids; the list emptied in the same step, so each removal is in exactly one entry.
-- KEYS: 1 gc:deleted or gc:forgotten, 2 activity (activity:inbox for the maintenance user)
-- ARGV: 1 the entry's type, 2 activity maxlen, 3 now_ms, 4 ids named at most
-- Returns how many the entry counts (0: none, no entry).
local function mh_gc_drain(keys, args)
  local count = redis.call('LLEN', keys[1])
  if count == 0 then return 0 end
  local named = redis.call('LRANGE', keys[1], 0, tonumber(args[4]) - 1)
  redis.call('DEL', keys[1])
  append_activity(keys[2], args[2], nil, nil, {'type', args[1], 'at', iso(tonumber(args[3])),
    'agent', 'system', 'data', cjson.encode({count = count, ids = named, more_ids = count - #named})})
  return count
end

redis.register_function('mh_gc_drain', mh_gc_drain)
redis.register_function('mh_retain', mh_retain)
redis.register_function('mh_gc_expire', mh_gc_expire)
redis.register_function('mh_gc_archive', mh_gc_archive)
redis.register_function('mh_gc_forget_run', mh_gc_forget_run)
redis.register_function('mh_artifact_control', mh_artifact_control)
redis.register_function('mh_artifact_restore', mh_artifact_restore)

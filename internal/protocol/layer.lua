-- Layer "limit" (semaphores and read-write locks): code that runs around a
-- kernel script, acquire.lua or extend.lua, which runs unchanged as the
-- function kernel(KEYS, ARGV) on its own keys and arguments. A layer may
-- add refusals, never grants: it turns some calls away before the kernel
-- runs, and writes its own records only beside the kernel's decision, so a
-- lock key is set by the kernel's rules alone (see docs/DESIGN.md,
-- "Semaphores and read-write locks").
--
-- KEYS: the kernel's lock keys (a semaphore's slot or a reader's; a
-- writer's every reader slot and the writer key), then the layer's keys,
-- then the node's state: the limit record; for a writer, also the writer's
-- intent; for a reader, the intent and the writer key. ARGV[1] is the limit
-- (a decimal string); ARGV[2] the role: '' for a semaphore, 'r' for a
-- reader, 'w' .. ms .. ':' .. id for a writer id whose intent lasts ms (0:
-- a writer that does not wait, and leaves none). ARGV[3..] are the
-- kernel's arguments (token, ttl, ...).
--
-- The limit record holds the limit for at least as long as any lock key
-- that a grant or an extend set on the node: each grant and extend raises
-- its TTL to the lock's (PEXPIRE GT, Redis 7.0). An acquire that finds
-- another limit there is refused: {-4, the recorded limit}. A reader that
-- finds a writer's intent, or the writer key held (not a tombstone), is
-- refused: {-5, 0}; the writer key is then marked as waited for, as the
-- strategies' refused hook does (announce.lua), so that its release wakes
-- the reader. A writer's refused acquire writes its intent; its grant takes
-- every intent off (a writer still waiting writes its own again at its next
-- round). Replies are otherwise the kernel's.
local limit, role = ARGV[1], ARGV[2]
local own = 1
if role == 'r' then own = 3 elseif role ~= '' then own = 2 end
local n = #KEYS
local keys = {}
for i = 1, n - 1 - own do keys[i] = KEYS[i] end
keys[#keys + 1] = KEYS[n]
local rec, intent, writer = KEYS[n - own], KEYS[n - own + 1], KEYS[n - own + 2]
local argv = {unpack(ARGV, 3)}

--@@acquire
if role == 'r' then
  local seen = redis.call('MGET', intent, writer)
  local w = seen[2]
  if w and string.sub(w, 1, #'@GONE@') == '@GONE@' then w = false end
  if seen[1] or w then
    if w and string.sub(w, 1, #'@WAITED@') ~= '@WAITED@' then
      redis.pcall('SET', writer, '@WAITED@' .. w, 'KEEPTTL')
    end
    return {-5, 0}
  end
end
local had = redis.call('SET', rec, limit, 'NX', 'PX', argv[2], 'GET')
if had and had ~= limit then return {-4, had} end
local r = kernel(keys, argv)
local ms, id
if own == 2 then ms, id = string.match(role, '^w(%d+):(.*)$') end
if r == 0 or type(r) == 'table' and r[1] == 0 then
  if had then redis.call('PEXPIRE', rec, argv[2], 'GT') end
  if id then redis.call('DEL', intent) end
  return r
end
if not had then redis.call('DEL', rec) end
if id and ms ~= '0' then redis.call('SET', intent, id, 'PX', ms) end
return r

--@@extend
local r = kernel(keys, argv)
if r == 1 then
  redis.call('SET', rec, limit, 'NX', 'PX', argv[2])
  redis.call('PEXPIRE', rec, argv[2], 'GT')
end
return r

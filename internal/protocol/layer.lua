-- Layer "limit" (semaphores and read-write locks): code around a kernel
-- script, acquire.lua or extend.lua, which runs unchanged at the mark
-- "--@kernel" on its own keys and arguments: the layer takes its own off
-- the ends of KEYS and ARGV first. A layer may add refusals, never grants:
-- it turns calls away before the kernel runs and writes only its own
-- record, so a lock key is set by the kernel's rules alone (see
-- docs/DESIGN.md, "Semaphores and read-write locks").
--
-- KEYS: the kernel's (lock keys, then the node's state), then the layer's:
-- for a reader the writer key, then for all the limit record. ARGV: the
-- kernel's, then for a semaphore's slot its limit (a decimal string), for
-- a writer the ms its intent lasts (0: none). A read-write lock's limit is
-- its number of readers, put in for @READERS@ when the scripts are built.
-- An extend's are the limit record and the limit, for every role.
--
-- The limit record holds the limit for at least as long as any lock key of
-- the semaphore on the node: a grant or an extend raises its TTL to the
-- lock's (PEXPIRE GT, Redis 7.0). An acquire that finds another limit
-- there is refused: {-4, the recorded limit}. A read-write lock's record
-- may say, after the limit, that a writer waits until a node time or
-- holds: limit .. 'w' .. ms (0: holds). A reader is refused while a writer
-- waits or holds the writer key (not a tombstone): {-5, 0}; the writer key
-- is then marked as waited for, as the strategies' refused hook does
-- (announce.lua), so that its release wakes the reader. Other replies are
-- the kernel's.

--@@semaphore
local n, m = #KEYS, #ARGV
local rec, limit = KEYS[n], ARGV[m]
KEYS[n] = nil
ARGV[m] = nil
local had = redis.call('SET', rec, limit, 'NX', 'PX', ARGV[2], 'GET')
if had then
  if had ~= limit then return {-4, had} end
  redis.call('PEXPIRE', rec, ARGV[2], 'GT')
end
--@kernel

--@@reader
local n, limit = #KEYS, '@READERS@'
local rec, writer = KEYS[n], KEYS[n - 1]
KEYS[n] = nil
KEYS[n - 1] = nil
local had = redis.call('SET', rec, limit, 'NX', 'PX', ARGV[2], 'GET')
if had then
  if had ~= limit then
    local l, til = string.match(had, '^(%d+)w(%d+)$')
    if l ~= limit then return {-4, l or had} end
    local t = redis.call('TIME')
    local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    local w = redis.call('GET', writer)
    if w and string.sub(w, 1, #'@GONE@') == '@GONE@' then w = false end
    if w and string.sub(w, 1, #'@WAITED@') ~= '@WAITED@' then
      redis.pcall('SET', writer, '@WAITED@' .. w, 'KEEPTTL')
    end
    if w or tonumber(til) > now then return {-5, 0} end
    redis.call('SET', rec, limit, 'KEEPTTL') -- the writer is gone
  end
  redis.call('PEXPIRE', rec, ARGV[2], 'GT')
end
--@kernel

--@@writer
local n, m, limit = #KEYS, #ARGV, '@READERS@'
local rec, intent = KEYS[n], tonumber(ARGV[m])
KEYS[n] = nil
ARGV[m] = nil
local had = redis.call('GET', rec)
if had then
  local l = string.match(had, '^(%d+)')
  if l ~= limit then return {-4, l or had} end
end
local function kernel()
  --@kernel
end
local r = kernel()
local ms, v = tonumber(ARGV[2]), limit .. 'w0'
if not (r == 0 or type(r) == 'table' and r[1] == 0) then
  if intent <= 0 then return r end
  local t = redis.call('TIME')
  ms, v = intent, limit .. 'w' .. (tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + intent)
end
if had then
  redis.call('SET', rec, v, 'KEEPTTL')
  redis.call('PEXPIRE', rec, ms, 'GT')
else
  redis.call('SET', rec, v, 'PX', ms)
end
return r

--@@extend
local n, m = #KEYS, #ARGV
local rec, limit = KEYS[n], ARGV[m]
KEYS[n] = nil
ARGV[m] = nil
local function kernel()
  --@kernel
end
local r = kernel()
if r == 1 then
  redis.call('SET', rec, limit, 'NX', 'PX', ARGV[2])
  redis.call('PEXPIRE', rec, ARGV[2], 'GT')
end
return r

-- Layer "limit" (semaphores and read-write locks): code around a kernel
-- script, acquire.lua or extend.lua, which runs unchanged at the mark
-- "--@kernel" on its own keys and arguments: the layer takes its own off
-- the ends of KEYS and ARGV first. A layer may add refusals, never grants:
-- it turns calls away before the kernel runs, writes its own record, and
-- otherwise only marks a key it refused for as waited for (value.lua), so
-- a lock key's holder and TTL are set by the kernel's rules alone (see
-- docs/DESIGN.md, "Semaphores and read-write locks").
--
-- KEYS: the kernel's (lock keys, then the node's state), then the layer's:
-- for a reader the writer key, then for all the limit record. A writer's
-- layer reads the reader slots too, whose names it makes from the writer
-- key's (see docs/DESIGN.md): sending them would cost more than the rest
-- of the round. ARGV: the kernel's, then for a
-- semaphore's slot its limit (a decimal string), for a writer the ms its
-- intent lasts (0: none). A read-write lock's limit is its number of
-- readers, put in for @READERS@ when the scripts are built. An extend's
-- are the limit record and the limit, for a semaphore's slot and a reader
-- (a writer's extend is the kernel's alone).
--
-- The limit record holds the limit for at least as long as any lock key of
-- the semaphore on the node: a grant or an extend raises its TTL to the
-- lock's (PEXPIRE GT, Redis 7.0). An acquire that finds another limit
-- there is refused: {-4, the recorded limit}. A read-write lock's record
-- may say, after the limit, that a writer waits until a node time:
-- limit .. 'w' .. ms (0: none). A writer's round that finds no reader slot
-- live and the writer key free deletes the record, so that the next
-- writer finds none and need not look at the slots.
--
-- Readers and the writer exclude each other on the node, each in its one
-- script: a reader is refused while a token holds the writer key (not
-- tombstones only, see value.lua): {-5, 0}; a writer is refused while a
-- token holds any reader slot: the longest TTL left to those slots, as the
-- kernel refuses a taken key. A reader is refused too while a writer's
-- intent lasts: {-5, 0}. The key refused for is then marked as waited for,
-- as the strategies' refused hook does (announce.lua), so that its release
-- wakes the caller. A writer's round leaves its intent when a reader slot
-- or the writer key is held by another token. Other replies are the
-- kernel's.

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
local w = redis.call('GET', writer)
if w then
  local v = w
  if string.sub(v, 1, #'@WAITED@') == '@WAITED@' then v = string.sub(v, #'@WAITED@' + 1) end
  if string.sub(v, 1, #'@GONE@') == '@GONE@' then
    w = false
  else
    if v == w then redis.pcall('SET', writer, '@WAITED@' .. w, 'KEEPTTL') end
    return {-5, 0}
  end
end
local had = redis.call('SET', rec, limit, 'NX', 'PX', ARGV[2], 'GET')
if had then
  if had ~= limit then
    local l, til = string.match(had, '^(%d+)w(%d+)$')
    if l ~= limit then return {-4, l or had} end
    local t = redis.call('TIME')
    if tonumber(til) > tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) then return {-5, 0} end
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
-- Without the record no reader slot is live: every grant or extend of a
-- slot keeps the record at least as long (and a node that lost the record
-- lost its state). most is the longest TTL left to a live slot (nil: none).
local had, most = redis.call('GET', rec), nil
if had then
  local l = string.match(had, '^(%d+)')
  if l ~= limit then return {-4, l or had} end
  -- The slots' keys: the writer key's name with its number for "writer"
  -- (the same hash tag, so the same Cluster slot).
  local base, slots = string.sub(KEYS[1], 1, #KEYS[1] - #'writer'), {}
  for i = 1, @READERS@ do slots[i] = base .. (i - 1) end
  if redis.call('EXISTS', unpack(slots)) > 0 then
    local vals = redis.call('MGET', unpack(slots))
    for i = 1, @READERS@ do
      local v = vals[i]
      if v then
        local marked = string.sub(v, 1, #'@WAITED@') == '@WAITED@'
        if marked then v = string.sub(v, #'@WAITED@' + 1) end
        if string.sub(v, 1, #'@GONE@') ~= '@GONE@' then
          local left = redis.call('PTTL', slots[i])
          if left < 0 or most == -1 then
            most = -1
          else
            most = math.max(most or 1, left)
          end
          if not marked then redis.pcall('SET', slots[i], '@WAITED@' .. vals[i], 'KEEPTTL') end
        end
      end
    end
  end
end
-- busy: a reader slot, or the writer key, is held by another token.
local busy = most ~= nil
if not busy and (had or intent > 0) then
  local v = redis.call('GET', KEYS[1])
  if v then
    if string.sub(v, 1, #'@WAITED@') == '@WAITED@' then v = string.sub(v, #'@WAITED@' + 1) end
    v = string.match(v, '^[^\n]*')
    busy = v ~= ARGV[1] and string.sub(v, 1, #'@GONE@') ~= '@GONE@'
  end
end
if busy and intent > 0 then
  local t = redis.call('TIME')
  local v = limit .. 'w' .. (tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + intent)
  if had then
    redis.call('SET', rec, v, 'KEEPTTL')
    redis.call('PEXPIRE', rec, intent, 'GT')
  else
    redis.call('SET', rec, v, 'PX', intent)
  end
elseif had and not busy then
  -- No reader slot is live: the record may go, with the writer's intent,
  -- so that the next writer need not look at the slots.
  redis.call('DEL', rec)
end
if most then return most end
--@kernel

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

-- acquire: take every key of KEYS[1..n-1] for token ARGV[1] for ARGV[2]
-- ms, all or none. KEYS[n], the last, is the node's state, a hash without
-- expiry: the client's key prefix, then "@STATE@" (then, on a Cluster
-- node, the slot's tag), with
--   g = the node time in ms until which the node is in its restart guard
--       (0: established),
--   id = the token of the round that created the state,
--   f = the fence counter (absent: unknown, after the node lost its data),
--   r = the replication ID of the server whose data holds the state (see
--       check.lua and newstate.lua).
-- ARGV[3] is the restart guard in ms (0: off). ARGV[4 .. 3+L] belong to
-- the waiting strategy (L = strategy.argc, see strategy.lua). Then, each optional
-- ('' or left out: none):
-- ARGV[4+L], the id of a guarded state to establish at once (only a
--   client that saw every node guarded at once sends it: a new deployment);
-- ARGV[5+L], the token of a lock of the same client that Unlock handed
--   over to this round's caller: a key that holds it counts as free.
-- A tombstone of another token ("@GONE@" .. token, see release.lua) counts
-- as free. A key's mark (value.lua) stays when the round sets the key.
-- Returns
--   0 when every key now holds our token (newly set, or already ours: a
--     lost reply or a retry, in which case the TTL is reset), or, when
--     the client is fenced, {0, f} with f = -1 when the counter is unknown;
--   the largest remaining TTL in ms (≥ 1) of the keys that another token
--     holds, or -1 when one of them has no expiry;
--   -3 when a key holds the tombstone of this very token: the round gave
--     up on this node and released it before this request arrived;
--   {-2, ms left in the guard, id} when the node is in its restart guard.
-- The restart guard is read only before a grant: a round that finds the
-- keys taken is refused either way.
local state, token, ttl, guard = KEYS[#KEYS], ARGV[1], ARGV[2], tonumber(ARGV[3])
local fenced = @FENCED@ -- the client's locks carry fences
strategy.acquire()
local establish, over = ARGV[4 + strategy.argc] or '', ARGV[5 + strategy.argc]
if over == '' then over = nil end

-- guarded returns the reply for a node in its restart guard, or nil when
-- it may grant.
local function guarded()
  if guard <= 0 then return nil end
  local g = redis.call('HGET', state, 'g')
  if g == '0' then return nil end
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  if not g then
    -- No state: the node is new or lost its data (restart without
    -- persistence, flush, eviction). It may have granted locks it forgot.
    newState(state, now, guard, token)
    return {-2, guard, token}
  end
  local id = redis.call('HGET', state, 'id')
  if establish ~= '' and establish == id then
    -- Every node was guarded at once: a new deployment. Its counter is
    -- known: no fence was issued before (one written meanwhile is kept).
    redis.call('HSET', state, 'g', '0')
    redis.call('HSETNX', state, 'f', '0')
  elseif tonumber(g) > now then
    return {-2, tonumber(g) - now, id}
  else
    redis.call('HSET', state, 'g', '0')
  end
  return nil
end

-- granted is the reply once every key holds the token.
local function granted()
  if strategy.granted then strategy.granted() end
  if not fenced then return 0 end
  local f = redis.call('HGET', state, 'f')
  if f then return {0, tonumber(f)} end
  if guard > 0 then return {0, -1} end
  return {0, 0}
end

-- The usual case, a single free key, in one call; SET ... GET returns the
-- value of a key that exists. (NX with GET needs Redis 7.0: before, the
-- error leaves first unknown.)
local first
if #KEYS == 2 then
  first = redis.pcall('SET', KEYS[1], token, 'NX', 'PX', ttl, 'GET')
  if first == false then
    local g = guarded()
    if g then
      redis.call('DEL', KEYS[1]) -- taken back in the same script: nobody saw it
      return g
    end
    return granted()
  end
  if type(first) ~= 'string' then first = nil end
end
local wait, marks = 0, {}
for i = 1, #KEYS - 1 do
  local v = first
  if i > 1 or not v then v = redis.call('GET', KEYS[i]) end
  local h, mark = holder(v)
  marks[i] = mark
  if h == '@GONE@' .. token then return -3 end
  if h and h ~= token and h ~= over and string.sub(h, 1, #'@GONE@') ~= '@GONE@' and not strategy.ours(h) then
    local left = redis.call('PTTL', KEYS[i])
    if left == -1 then return -1 end
    strategy.refused(KEYS[i], v, mark)
    wait = math.max(wait, left, 1)
  end
end
if wait > 0 then
  strategy.waits(wait)
  return wait
end
local g = guarded()
if g then return g end
for i = 1, #KEYS - 1 do
  redis.call('SET', KEYS[i], marks[i] .. token, 'PX', ttl)
end
return granted()

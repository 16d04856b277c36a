-- acquire: take every key of KEYS[1..n-1] for token ARGV[1] for ARGV[2]
-- ms, all or none. KEYS[n], the last, is the node's state, a hash without
-- expiry (the client's key prefix, "@STATE@", and on a Cluster node the
-- slot's tag): g = the node time in ms until which the node is in its
-- restart guard (0: established); id = the token of the round that made
-- the state; f = the fence counter (absent: unknown, after a loss of data);
-- r = the replication ID of the server that holds it (see check.lua);
-- v = the guarded state's mark (absent: none).
-- ARGV[3] is the restart guard in ms (0: off); ARGV[4 .. 3+argc] belong to
-- the waiting strategy (argc = 0 without one). Optional, '' for none:
-- ARGV[4+argc], the new-deployment shortcut's request for a guarded state
-- (sent only by a client that saw every node guarded at once, and each
-- mark either unset or the one it sends): "m" or "e", then h, the 32-hex
-- mark of the state ids the client saw, then the state's id. "m" marks
-- the state with h if it has that id and no other mark, and grants
-- nothing while the guard lasts; "e" ends the guard at once if the state
-- has that id and the mark h (docs/SAFETY.md, "The new-deployment
-- shortcut"); and
-- ARGV[5+argc], the token of the lock handed over to the round's caller,
-- whose keys the round takes: a key that holds it counts as free, as does
-- one that holds only tombstones (tombstone.lua). A key that the round
-- sets keeps its mark and its tombstones (value.lua).
-- Returns 0 when every key now holds our token (newly set, or already
-- ours: a lost reply or a retry, which resets the TTL), or, for a fenced
-- client, {0, f} (f = -1: unknown); the largest TTL in ms (≥ 1) left to the
-- keys another token holds, or -1 when one has no expiry; -3 when a key
-- keeps this very token's tombstone (the round gave up on this node and
-- released it before this request came); {-2, ms left, id, v} when the
-- node is in its restart guard, which is read only before a grant (v: the
-- state's mark, '' for none); a key that held the token then holds it no
-- more.
-- A "--@name" line is where a waiting strategy's code for that hook goes
-- (see announce.lua), or a comment without one; no hook decides a grant.
local state, token, ttl, guard = KEYS[#KEYS], ARGV[1], ARGV[2], tonumber(ARGV[3])
local fenced = @FENCED@ -- the client's locks carry fences
local quiet = true -- the strategy has nothing to do at a grant
--@quiet
-- The usual case, a single free key on an established node, in one call
-- and a read; SET ... GET returns the value of a key that exists. (NX with
-- GET needs Redis 7.0: before, the error leaves first unknown.)
local first
if #KEYS == 2 then
  first = redis.pcall('SET', KEYS[1], token, 'NX', 'PX', ttl, 'GET')
  if first == false and quiet and not fenced and (guard <= 0 or redis.call('HGET', state, 'g') == '0') then
    return 0
  end
end
local argc = 0
--@acquire
@VALUE@
local establish, handover = ARGV[4 + argc] or '', ARGV[5 + argc]
if handover == '' then handover = nil end

-- Refused if another token holds a key (the single key set above holds
-- ours). Only a round still free keeps what its grant needs of each key.
local wait, marks, rests, mine = 0
if first ~= false then
  if type(first) ~= 'string' then first = nil end
  for i = 1, #KEYS - 1 do
    local key, v = KEYS[i], first
    if i > 1 or not v then v = redis.call('GET', key) end
    local h, mark, rest = holder(v)
    if rest ~= '' and buried(rest, token) then return -3 end
    local free = not h or h == token or h == handover
    --@free
    if not free then
      local left = redis.call('PTTL', key)
      if left == -1 then return -1 end
      --@refused
      wait = math.max(wait, left, 1)
    elseif wait == 0 then
      if not marks then marks, rests, mine = {}, {}, {} end
      marks[i], rests[i], mine[i] = mark, rest, h == token
    end
  end
  if wait > 0 then
    --@waits
    return wait
  end
end

-- Made only past a refusal: closures of the script's locals cost a
-- refused round a tenth of its instructions (bench/README.md).
@NEWSTATE@
@GUARD@

-- granted is the reply once every key holds the token; tails[i] is what
-- follows the token on key i (its tombstones), nil for nothing.
local tails = {}
local function granted()
  --@granted
  if not fenced then return 0 end
  local f = redis.call('HGET', state, 'f')
  if f then return {0, tonumber(f)} end
  if guard > 0 then return {0, -1} end
  return {0, 0}
end

if first == false then -- the single key, set above
  local g = guarded()
  if g then
    redis.call('DEL', KEYS[1]) -- taken back in the same script: nobody saw it
    return g
  end
  return granted()
end
local g = guarded()
if g then
  -- A key that already holds the token (the pipelined acquire's SET, or a
  -- retry's) is taken back, its tombstones kept: a guarded node keeps
  -- nothing of the round, which counts it as refused and releases nothing.
  for i = 1, #KEYS - 1 do
    if mine[i] then bury(KEYS[i], nil, rests[i], ttl) end
  end
  return g
end
for i = 1, #KEYS - 1 do
  tails[i] = bury(KEYS[i], marks[i] .. token, rests[i], ttl)
end
return granted()

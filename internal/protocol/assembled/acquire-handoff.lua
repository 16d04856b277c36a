-- acquire: take every key of KEYS[1..n-1] for token ARGV[1] for ARGV[2]
-- ms, all or none. KEYS[n], the last, is the node's state, a hash without
-- expiry (the client's key prefix, "redquorum:node", and on a Cluster node the
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
local fenced = false -- the client's locks carry fences
local quiet = true -- the strategy has nothing to do at a grant
quiet = (ARGV[6] or '') == '' -- a grant leaves the client's entries alone
quiet = quiet and string.sub(token, 1, #'h:') ~= 'h:' -- a grant marks a hand value's keys
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
argc = 3
local ticket, entries = ARGV[4] or '', ARGV[6] or ''
local place -- the waiter's id; nil for a round that does not wait
if ticket ~= '' then
  place = ARGV[5]
  if not place or place == '' then place = token end
end
local entry, joins = place, place ~= nil -- what a refused round adds to the line, and whether
local line -- the first key's line, once needed (--@line)
-- prefixOf returns the client's key prefix: what comes before "redquorum:node"
-- in state, the node's state key, which a Cluster slot's tag may follow.
-- The usual key ends in it and is compared plainly, without the pattern,
-- which backtracks from the end. Defined by the strategy sections that
-- need it, before their first use.
local function prefixOf(state)
  if string.sub(state, -#'redquorum:node') == 'redquorum:node' then return string.sub(state, 1, -#'redquorum:node' - 1) end
  return string.match(state, '^(.*)redquorum:node') or ''
end
argc = 5
local channel, before = ARGV[7] or '', ARGV[8] or ''
local hand = string.sub(token, 1, #'h:') == 'h:' -- a round for a hand value
if place and channel ~= '' then entry = place .. '|' .. token .. '|' .. ttl .. '|' .. channel end
joins = joins and not hand
local drop = entries == '1' and channel -- the channel whose entries a round takes off
-- The kernel's view of a lock key's value (inserted in the kernel scripts
-- when they are loaded): its holder, a token, perhaps after a mark that a
-- waiting strategy put before it (see announce.lua), then the tombstones
-- that the key keeps, each after a '\n' (see tombstone.lua). A key that
-- keeps tombstones and has no holder begins with the first of them.
-- holder returns the token that v holds (nil for none: v is false for a
-- missing key, or holds only tombstones), the mark ('' for none) and the
-- tombstones ('' for none, each after a '\n'). Tokens are compared without
-- the mark and the tombstones, and a key that the kernel sets again for the
-- same holder keeps both, so that a strategy's mark never changes who holds
-- a key, whichever strategy (or none) the client that reads it has.
local function holder(v)
  if not v then return nil, '', '' end
  local mark, rest = '', ''
  if string.sub(v, 1, #'w:') == 'w:' then
    mark = 'w:'
    v = string.sub(v, #'w:' + 1)
  end
  local cut = string.find(v, '\n', 1, true)
  if cut then
    rest = string.sub(v, cut)
    v = string.sub(v, 1, cut - 1)
  end
  if string.sub(v, 1, #'redquorum:gone:') == 'redquorum:gone:' then return nil, mark, '\n' .. v .. rest end
  return v, mark, rest
end

-- Tombstones (inserted in acquire.lua and release.lua after their usual
-- cases, when the scripts are loaded). A tombstone, "redquorum:gone:" .. token, is
-- what a release of token leaves on a key that does not hold it, so that
-- token's acquire, if the network still delivers it, is refused. A key
-- keeps each tombstone until the tombstone expires, whoever holds the key
-- meanwhile, or until the key itself expires; it keeps at most 8,
-- and beyond that drops the one that expires first. Forms (see value.lua):
-- a key with no holder and one tombstone is "redquorum:gone:" .. token, which
-- expires with the key (the form of the previous release, whose clients
-- refuse their own acquire on it); otherwise each tombstone is
-- "\nredquorum:gone:" .. token .. "\t" .. its expiry in node ms, after the holder,
-- and on a key with no holder the first is without its '\n' and the key
-- expires with the last tombstone. A holder's key keeps its own TTL.

-- buried reports whether rest, the tombstones of a key (see holder),
-- hold token's.
local function buried(rest, token)
  local e = '\nredquorum:gone:' .. token
  rest = rest .. '\n'
  return string.find(rest, e .. '\n', 1, true) ~= nil or string.find(rest, e .. '\t', 1, true) ~= nil
end

-- bury sets key to head (a mark and a holder) and the tombstones of rest
-- that have not expired, for ttl ms, and returns what follows head. With
-- head nil, the key has no holder: it keeps the live tombstones of rest,
-- with add's (a token) for ttl ms when add is given, and is deleted when
-- none is left.
local function bury(key, head, rest, ttl, add)
  if rest == '' and head then
    redis.call('SET', key, head, 'PX', ttl)
    return ''
  end
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  -- tail is the tombstones kept, each after a '\n', n their number, last
  -- the latest expiry and lone the first one's token part.
  local tail, n, last, lone
  if not add then
    -- The usual case, no tombstone added, none expired, each in its timed
    -- form: rest stays as it is, read by plain finds (the loop below reads
    -- each tombstone by patterns into a table and writes it anew, some 5k
    -- instructions a tombstone).
    local at, first = 1
    n, last = 0, 0
    while at <= #rest do
      local tab = string.find(rest, '\t', at + 1, true)
      local nl = string.find(rest, '\n', at + 1, true) or #rest + 1
      local exp = tab and tab < nl and tonumber(string.sub(rest, tab + 1, nl - 1))
      if not exp or exp <= now then break end
      n, last, first, at = n + 1, math.max(last, exp), first or tab, nl
    end
    if at > #rest and n <= 8 then
      tail, lone = rest, not head and first and string.sub(rest, 2, first - 1)
    end
  end
  if not tail then
    local kept = {}
    for e in string.gmatch(rest, '\n([^\n]+)') do
      local at, _, exp = string.find(e, '\t(%d+)$')
      local tomb = at and string.sub(e, 1, at - 1)
      if tomb then
        exp = tonumber(exp)
      else
        tomb, exp = e, now + redis.call('PTTL', key) -- the single form: the key's expiry
      end
      if exp > now then kept[#kept + 1] = {tomb, exp} end
    end
    if add then kept[#kept + 1] = {'redquorum:gone:' .. add, now + ttl} end
    while #kept > 8 do
      local first = 1
      for i = 2, #kept do
        if kept[i][2] < kept[first][2] then first = i end
      end
      table.remove(kept, first)
    end
    tail, n, last, lone = {}, #kept, 0, kept[1] and kept[1][1]
    for i, k in ipairs(kept) do
      tail[i] = '\n' .. k[1] .. '\t' .. string.format('%.0f', k[2])
      last = math.max(last, k[2])
    end
    tail = table.concat(tail)
  end
  if head then
    redis.call('SET', key, head .. tail, 'PX', ttl)
  elseif n == 0 then
    redis.call('DEL', key)
  elseif n == 1 then
    redis.call('SET', key, lone, 'PX', last - now)
  else
    redis.call('SET', key, string.sub(tail, 2), 'PX', last - now)
  end
  return tail
end

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
    if not free then
      free = (channel ~= '' and before ~= '' and (h == before or h == 'h:' .. before)) or (handover ~= nil and h == 'h:' .. handover)
    end
    if not free then
      local left = redis.call('PTTL', key)
      if left == -1 then return -1 end
      if mark == '' then redis.pcall('SET', key, 'w:' .. v, 'KEEPTTL') end
      wait = math.max(wait, left, 1)
    elseif wait == 0 then
      if not marks then marks, rests, mine = {}, {}, {} end
      marks[i], rests[i], mine[i] = mark, rest, h == token
    end
  end
  if wait > 0 then
    if joins then
      if not line then
        local prefix = prefixOf(state)
        line = prefix .. 'redquorum:queue:' .. string.sub(KEYS[1], #prefix + 1)
      end
      if entries == '1' and place ~= token then redis.pcall('ZREM', line, place) end
      if drop and drop ~= '' then
        local all = redis.pcall('ZRANGE', line, 0, -1)
        if type(all) == 'table' then
          local suffix = '|' .. drop
          for _, m in ipairs(all) do
            if string.sub(m, -#suffix) == suffix then redis.pcall('ZREM', line, m) end
          end
        end
      end
      -- pcall: a hint, which an ACL or a Cluster's slots may refuse.
      redis.pcall('ZADD', line, 'NX', ticket, entry)
      redis.pcall('PEXPIRE', line, wait + tonumber(ttl))
    end
    return wait
  end
end

-- Made only past a refusal: closures of the script's locals cost a
-- refused round a tenth of its instructions (bench/README.md).
-- newState, shared by acquire.lua and extend.lua (inserted in their text
-- when the scripts are loaded):
-- record in state, a node's missing state, that the node lost its data and
-- is guarded for guard ms from node time now, under id (see acquire.lua),
-- with the run_id and master_replid of the server process whose data now
-- holds it (see check.lua): a connection opened later to this same process
-- finds its own record, and a promoted replica or a restarted server does
-- not. INFO is read only here, when a state is made, never on the usual
-- path. A server whose INFO cannot be read records nothing, and no check
-- of it compares.
local function newState(state, now, guard, id)
  redis.call('HSET', state, 'g', string.format('%.0f', now + guard), 'id', id)
  local info = redis.pcall('INFO', 'replication')
  local r = type(info) == 'string' and string.match(info, 'master_replid:(%x+)')
  local server = r and redis.pcall('INFO', 'server')
  local p = type(server) == 'string' and string.match(server, 'run_id:(%x+)')
  if p then redis.call('HSET', state, 'p', p, 'r', r) end
end

-- guarded, acquire.lua's restart guard and new-deployment shortcut
-- (inserted in its text when the scripts are loaded, where it reads the
-- script's state, token, guard and establish: see acquire.lua's header).
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
    return {-2, guard, token, ''}
  end
  local id = redis.call('HGET', state, 'id')
  local op, h, eid = string.sub(establish, 1, 1), string.sub(establish, 2, 33), string.sub(establish, 34)
  if eid ~= id then op = '' end
  local v = redis.call('HGET', state, 'v') or ''
  if v == '' and id == redis.call('HGET', state, 'r') then
    v = 'x' -- begun by an earlier version's connection check: not empty
  end
  if op == 'e' and v == h then
    -- Every node was guarded at once, and each was then marked with the
    -- ids seen: a new deployment, or one whose every node lost its data.
    -- Its counter starts at the node's time in microseconds, above every
    -- fence issued before (docs/SAFETY.md, "Fences increase"); one
    -- written meanwhile is kept.
    redis.call('HSET', state, 'g', '0')
    redis.call('HSETNX', state, 'f', t[1] .. string.format('%06d', tonumber(t[2])))
  elseif tonumber(g) > now then
    if op == 'm' and v == '' then
      redis.call('HSET', state, 'v', h) -- set once: never changed while the state lives
      v = h
    end
    return {-2, tonumber(g) - now, id, v}
  else
    redis.call('HSET', state, 'g', '0')
  end
  return nil
end


-- granted is the reply once every key holds the token; tails[i] is what
-- follows the token on key i (its tombstones), nil for nothing.
local tails = {}
local function granted()
  if place and entries ~= '' then
    if not line then
      local prefix = prefixOf(state)
      line = prefix .. 'redquorum:queue:' .. string.sub(KEYS[1], #prefix + 1)
    end
    if entries == '1' and place ~= token then redis.pcall('ZREM', line, place) end
    if drop and drop ~= '' then
      local all = redis.pcall('ZRANGE', line, 0, -1)
      if type(all) == 'table' then
        local suffix = '|' .. drop
        for _, m in ipairs(all) do
          if string.sub(m, -#suffix) == suffix then redis.pcall('ZREM', line, m) end
        end
      end
    end
    if redis.pcall('EXISTS', line) == 1 then
      for i = 1, #KEYS - 1 do
        redis.pcall('SET', KEYS[i], 'w:' .. token .. (tails[i] or ''), 'KEEPTTL')
      end
    end
  end
  if hand then
    for i = 1, #KEYS - 1 do
      redis.pcall('SET', KEYS[i], 'w:' .. token .. (tails[i] or ''), 'KEEPTTL')
    end
  end
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


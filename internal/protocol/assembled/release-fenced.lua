-- release: delete every key of KEYS that holds token ARGV[1], or leave
-- only its tombstones where it keeps some (tombstone.lua). Returns 1 if
-- all of them held it, 0 otherwise (keys that hold another token are left
-- alone). Tokens are compared without a key's mark (value.lua).
-- ARGV[2] is a TTL in ms (0: none): a key that is missing or holds only
-- tombstones gets this token's tombstone for that long, so that this
-- token's SET, if the network still delivers it (a partition that delayed
-- it beyond the round's timeout), is refused by acquire.lua instead of
-- leaving a key that nobody holds. A tombstone is free for other tokens.
-- ARGV[3..] belong to the waiting strategy, whose hooks ("--@name", see
-- acquire.lua) may hand a key off instead of its deletion (kept), and
-- tell waiters. value.lua and tombstone.lua are inserted after the usual
-- case.
local token, ttl = ARGV[1], tonumber(ARGV[2])
-- The usual case: a single key that holds the token, unmarked (no waiter
-- found it held: nobody to tell), is deleted, and that is all.
local first
if #KEYS == 1 then
  first = redis.call('GET', KEYS[1])
  if first == token then return redis.call('DEL', KEYS[1]) end
end
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

local announce = ARGV[3] -- the node's state key: an unlock
-- prefixOf returns the client's key prefix: what comes before "redquorum:node"
-- in state, the node's state key, which a Cluster slot's tag may follow.
-- The usual key ends in it and is compared plainly, without the pattern,
-- which backtracks from the end. Defined by the strategy sections that
-- need it, before their first use.
local function prefixOf(state)
  if string.sub(state, -#'redquorum:node') == 'redquorum:node' then return string.sub(state, 1, -#'redquorum:node' - 1) end
  return string.match(state, '^(.*)redquorum:node') or ''
end
if ARGV[4] and announce then
  local prefix = prefixOf(announce)
  redis.pcall('ZREM', prefix .. 'redquorum:queue:' .. string.sub(KEYS[1], #prefix + 1), ARGV[4])
end
local n = 0
for i = 1, #KEYS do
  local key, v = KEYS[i], first
  first = nil
  if v == nil then v = redis.call('GET', key) end
  local h, mark, rest = holder(v)
  local mine = h == token
  if mine then
    local kept = false
    if mark ~= '' and announce then
      local next = ''
      if i == 1 then
        local prefix = prefixOf(announce)
        local head = redis.pcall('ZPOPMIN', prefix .. 'redquorum:queue:' .. string.sub(key, #prefix + 1))
        if type(head) == 'table' and head[1] then
          next = head[1]
          -- A handoff's entry, next, is id .. '|' .. token .. '|' .. hold .. '|' ..
          -- channel (see handoff.lua), the id and the token of equal length. at is
          -- the '|' after the token, found at twice the first '|' by an anchored
          -- match; an owner with '|' in the id (see protocol.NewToken) needs the
          -- unanchored one, tried at every position of the entry. at is nil for any
          -- other entry.
          local p = string.find(next, '|', 1, true)
          local at, _, hold, ch
          if p then at, _, hold, ch = string.find(next, '^|(%d+)|([^|]+)$', 2 * p) end
          if p and not at then at, _, hold, ch = string.find(next, '|(%d+)|([^|]+)$') end
          if at and at % 2 == 0 then next = string.sub(next, at / 2 + 1, at - 1) end
        end
      end
      if not kept then redis.pcall('PUBLISH', 'redquorum:released:' .. key, next) end
    end
    if not kept and rest == '' then
      redis.call('DEL', key)
    elseif not kept then
      bury(key, nil, rest) -- its tombstones stay
    end
    n = n + 1
  elseif not v and ttl > 0 then
    redis.call('SET', key, 'redquorum:gone:' .. token, 'PX', ttl)
  elseif not h and ttl > 0 and not buried(rest, token) then
    bury(key, nil, rest, ttl, token)
  end
end
if n == #KEYS then return 1 end
return 0


-- Tombstones (inserted in acquire.lua and release.lua after their usual
-- cases, when the scripts are loaded). A tombstone, "@GONE@" .. token, is
-- what a release of token leaves on a key that does not hold it, so that
-- token's acquire, if the network still delivers it, is refused. A key
-- keeps each tombstone until the tombstone expires, whoever holds the key
-- meanwhile, or until the key itself expires; it keeps at most @MAXGONE@,
-- and beyond that drops the one that expires first. Forms (see value.lua):
-- a key with no holder and one tombstone is "@GONE@" .. token, which
-- expires with the key (the form of the previous release, whose clients
-- refuse their own acquire on it); otherwise each tombstone is
-- "\n@GONE@" .. token .. "\t" .. its expiry in node ms, after the holder,
-- and on a key with no holder the first is without its '\n' and the key
-- expires with the last tombstone. A holder's key keeps its own TTL.

-- buried reports whether rest, the tombstones of a key (see holder),
-- hold token's.
local function buried(rest, token)
  local e = '\n@GONE@' .. token
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
    if at > #rest and n <= @MAXGONE@ then
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
    if add then kept[#kept + 1] = {'@GONE@' .. add, now + ttl} end
    while #kept > @MAXGONE@ do
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

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

-- fence: the second phase of a fenced lock. If every key of KEYS[1..n-1]
-- holds token ARGV[1] (compared without a key's mark, see value.lua), raise
-- the fence counter in the node's state KEYS[n] (see acquire.lua) to at
-- least ARGV[2], which also makes an unknown counter known, and return 1.
-- Otherwise change nothing and return 0.
for i = 1, #KEYS - 1 do
  if holder(redis.call('GET', KEYS[i])) ~= ARGV[1] then return 0 end
end
local f = redis.call('HGET', KEYS[#KEYS], 'f')
if not f or tonumber(f) < tonumber(ARGV[2]) then
  redis.call('HSET', KEYS[#KEYS], 'f', ARGV[2])
end
return 1


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

-- (@WAITED@ stands for protocol.WaitedPrefix.)
-- fence: the second phase of a fenced lock. If every key of KEYS[1..n-1] holds
-- token ARGV[1] (with or without the mark of a key waited for, see
-- acquire.lua), raise the fence counter in the node's state KEYS[n] (see
-- acquire.lua) to at least ARGV[2], which also makes an unknown counter known,
-- and return 1. Otherwise change nothing and return 0.
local waited = '@WAITED@'
for i = 1, #KEYS - 1 do
  local v = redis.call('GET', KEYS[i])
  if v and string.sub(v, 1, #waited) == waited then v = string.sub(v, #waited + 1) end
  if v ~= ARGV[1] then return 0 end
end
local f = redis.call('HGET', KEYS[#KEYS], 'f')
if not f or tonumber(f) < tonumber(ARGV[2]) then
  redis.call('HSET', KEYS[#KEYS], 'f', ARGV[2])
end
return 1

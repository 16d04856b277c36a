-- release: delete every key of KEYS that holds token ARGV[1]. Returns 1 if
-- all of them did, 0 otherwise (keys that are gone or hold another token are
-- left alone).
local n = 0
for i = 1, #KEYS do
  if redis.call('GET', KEYS[i]) == ARGV[1] then
    n = n + redis.call('DEL', KEYS[i])
  end
end
if n == #KEYS then return 1 end
return 0

-- release: delete every key of KEYS that holds token ARGV[1]. Returns 1 if
-- all of them did, 0 otherwise (keys that are gone or hold another token are
-- left alone).
-- When ARGV[2] is "1" (an unlock, not the clean-up of a failed round), each
-- deletion is announced on the channel "redquorum:released:" .. the key, so
-- that waiting clients retry at once; a failed PUBLISH (for example an ACL
-- without channel rights) does not fail the release.
local n = 0
for i = 1, #KEYS do
  if redis.call('GET', KEYS[i]) == ARGV[1] then
    n = n + redis.call('DEL', KEYS[i])
    if ARGV[2] == '1' then
      redis.pcall('PUBLISH', 'redquorum:released:' .. KEYS[i], '')
    end
  end
end
if n == #KEYS then return 1 end
return 0

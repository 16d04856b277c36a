-- release: delete KEYS[1] if it holds token ARGV[1]. Returns 1 if deleted, 0 if
-- the key is gone or holds another token (then it is left alone).
-- When ARGV[2] is "1" (an unlock, not the clean-up of a failed round), a
-- deletion is announced on the channel "redquorum:released:" .. KEYS[1] so
-- that waiting clients retry at once; a failed PUBLISH (for example an ACL
-- without channel rights) does not fail the release.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  if ARGV[2] == '1' then
    redis.pcall('PUBLISH', 'redquorum:released:' .. KEYS[1], '')
  end
  return 1
end
return 0

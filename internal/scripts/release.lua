-- release: delete KEYS[1] if it holds token ARGV[1]. Returns 1 if deleted, 0 if
-- the key is gone or holds another token (then it is left alone).
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0

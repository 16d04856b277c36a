-- extend: set the TTL of KEYS[1] to ARGV[2] ms if it holds token ARGV[1].
-- Returns 1 if extended, 0 if the key is gone or holds another token (then it
-- is left alone: a failed extend never deletes anything).
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0

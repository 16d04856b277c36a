-- extend: set the TTL of every key of KEYS to ARGV[2] ms if all of them hold
-- token ARGV[1]. Returns 1 if extended, 0 if a key is gone or holds another
-- token (then nothing is changed: a failed extend never deletes anything).
for i = 1, #KEYS do
  if redis.call('GET', KEYS[i]) ~= ARGV[1] then return 0 end
end
for i = 1, #KEYS do
  redis.call('PEXPIRE', KEYS[i], ARGV[2])
end
return 1

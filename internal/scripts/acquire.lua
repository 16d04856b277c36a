-- acquire: take KEYS[1] for token ARGV[1] for ARGV[2] milliseconds.
-- Returns 0 when the key now holds our token (newly set, or already ours: a
-- lost reply or a client-level retry, in which case the TTL is reset), the
-- holder's remaining TTL in ms (≥ 1) when another token holds it, or -1 when
-- another value holds it without expiry.
local v = redis.call('GET', KEYS[1])
if v == false or v == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 0
end
local ttl = redis.call('PTTL', KEYS[1])
if ttl == -1 then return -1 end
if ttl < 1 then return 1 end
return ttl

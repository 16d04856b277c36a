-- release: delete every key of KEYS that holds token ARGV[1]. Returns 1 if
-- all of them did, 0 otherwise (keys that are gone or hold another token
-- are left alone). Tokens are compared without a key's mark (value.lua).
-- ARGV[2] is a TTL in ms (0: none): a key that does not exist gets a
-- tombstone, "@GONE@" .. ARGV[1], for that long, so that this token's SET,
-- if the network still delivers it (a partition that delayed it beyond
-- the round's timeout), is refused by acquire.lua instead of leaving a key
-- that nobody holds. Every other token takes a tombstone for a free key.
-- ARGV[3..] belong to the waiting strategy (see strategy.lua), which may hand a
-- key off instead of its deletion, and tells waiters.
local token, ttl = ARGV[1], tonumber(ARGV[2])
strategy.release()
local n = 0
for i = 1, #KEYS do
  local v = redis.call('GET', KEYS[i])
  local h, mark = holder(v)
  if h == token or (h and strategy.mine(h)) then
    if not strategy.released(KEYS[i], mark ~= '') then redis.call('DEL', KEYS[i]) end
    n = n + 1
  elseif not v and ttl > 0 then
    redis.call('SET', KEYS[i], '@GONE@' .. token, 'PX', ttl)
  end
end
if n == #KEYS then return 1 end
return 0

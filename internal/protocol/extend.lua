-- extend: set the TTL of every key of KEYS[1..n-1] to ARGV[2] ms if all of
-- them hold token ARGV[1] (compared without a key's mark, which stays; see
-- value.lua). Returns 1 if extended, 0 if a key is gone or holds another
-- token (then no key is changed: a failed extend never deletes anything).
-- KEYS[n], the last, is the node's state (see acquire.lua): when the
-- restart guard is on (ARGV[3] > 0 ms) and the state is missing, the node
-- has lost its data, and its guard begins now, as on an acquire.
for i = 1, #KEYS - 1 do
  if holder(redis.call('GET', KEYS[i])) ~= ARGV[1] then
    local guard = tonumber(ARGV[3])
    if guard > 0 and redis.call('EXISTS', KEYS[#KEYS]) == 0 then
      local t = redis.call('TIME')
      local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
      newState(KEYS[#KEYS], now, guard, ARGV[1])
    end
    return 0
  end
end
for i = 1, #KEYS - 1 do
  redis.call('PEXPIRE', KEYS[i], ARGV[2])
end
return 1

-- (@GONE@, @RELEASED@ and @QUEUE@ stand for protocol.TombstonePrefix,
-- protocol.ReleasedChannel and protocol.QueuePrefix, replaced when the
-- scripts are loaded.)
-- release: delete every key of KEYS that holds token ARGV[1]. Returns 1 if
-- all of them did, 0 otherwise (keys that are gone or hold another token are
-- left alone).
-- When ARGV[2] is "1" (an unlock, not the clean-up of a failed round), each
-- deletion is announced on the channel "@RELEASED@" .. the key, so
-- that waiting clients retry at once; a failed PUBLISH (for example an ACL
-- without channel rights) does not fail the release.
-- ARGV[3], when given, is the lock's TTL in ms: a key that does not exist
-- gets a tombstone, the value "@GONE@" .. ARGV[1], for that long,
-- so that this token's SET, if the network still delivers it (a partition
-- that delayed it beyond the round's timeout), is refused by the acquire
-- script instead of leaving a key that nobody holds. Every other token takes
-- a tombstone for a free key.
-- ARGV[4], when given, is the client's key prefix: the announcement of
-- KEYS[1]'s release then names the next in line of its queue of waiters
-- (see acquire.lua), the one with the lowest ticket, whom it takes off the
-- queue; other announcements name nobody ('').
local n = 0
for i = 1, #KEYS do
  local v = redis.call('GET', KEYS[i])
  if v == ARGV[1] then
    n = n + redis.call('DEL', KEYS[i])
    if ARGV[2] == '1' then
      local next = ''
      if i == 1 and ARGV[4] then
        local q = ARGV[4] .. '@QUEUE@' .. string.sub(KEYS[1], #ARGV[4] + 1)
        local head = redis.pcall('ZPOPMIN', q) -- a hint: an ACL may refuse it
        if type(head) == 'table' and head[1] then next = head[1] end
      end
      redis.pcall('PUBLISH', '@RELEASED@' .. KEYS[i], next)
    end
  elseif v == false and ARGV[3] then
    redis.call('SET', KEYS[i], '@GONE@' .. ARGV[1], 'PX', ARGV[3])
  end
end
if n == #KEYS then return 1 end
return 0

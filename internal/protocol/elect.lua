-- elect: the published record of an election (see election.go in package
-- redlock), a layer over the lock: KEYS[1] is the election's lock key and
-- KEYS[2] its record key (@LEADER@ .. the name, after the client's key
-- prefix). A record is "term\nrev\ntoken\nvalue".
-- ARGV[1] is the leader's token and ARGV[2] the record to write, or '' to
-- withdraw it. ARGV[3] is '1' to announce the change on the channel
-- "@RELEASED@" .. KEYS[2] (the message is empty), '0' not to.
-- Write: if KEYS[1] holds ARGV[1] (compared without a key's mark, see
-- value.lua), set KEYS[2] to ARGV[2] with KEYS[1]'s remaining TTL, so that
-- the record expires with the lock, and return 1; otherwise change nothing
-- and return 0.
-- Withdraw: if KEYS[2] holds a record of token ARGV[1], delete it and
-- return 1; otherwise change nothing and return 0.
local token, record = ARGV[1], ARGV[2]
if record == '' then
  local v = redis.call('GET', KEYS[2])
  if not v or string.match(v, '^[^\n]*\n[^\n]*\n([^\n]*)\n') ~= token then return 0 end
  redis.call('DEL', KEYS[2])
else
  if holder(redis.call('GET', KEYS[1])) ~= token then return 0 end
  local ttl = redis.call('PTTL', KEYS[1])
  if ttl <= 0 then return 0 end
  redis.call('SET', KEYS[2], record, 'PX', ttl)
end
if ARGV[3] == '1' then redis.call('PUBLISH', '@RELEASED@' .. KEYS[2], '') end
return 1

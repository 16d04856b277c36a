-- check: run once on every new connection to a plain node, before any lock
-- command on it. It ties the node's state to the server's replication ID, so
-- that a server whose data may lack lock keys that were granted (a replica
-- promoted by a failover, a master restarted from a persisted file) starts
-- its restart guard even though it still has the state key.
-- KEYS[1] is the node's state (see acquire.lua); its field r is the
-- replication ID (master_replid) of the server whose data holds it,
-- recorded by the first check or by the acquire that made the state. Only
-- a server whose ID differs from it is guarded: a server that lost nothing
-- keeps its ID, however its connections come and go.
-- ARGV[1] is the restart guard in ms (0: off).
-- Returns
--   {0, id} when the server is a master whose replication ID id is the one
--     recorded (or is now recorded: the state had none);
--   {1, id, ms} when the state was recorded under another ID: the restart
--     guard now runs for ms on this server, and its fence counter is unknown
--     (with the guard off, ms is 0 and nothing but the ID changes);
--   {-1, role} when the server is not a master (a replica: role 'slave');
--     nothing is written;
--   {-2, err} when INFO replication cannot be read (an ACL without INFO, a
--     server without replication): nothing is checked.
local info = redis.pcall('INFO', 'replication')
if type(info) == 'table' then
  return {-2, tostring(info.err)}
end
local role = string.match(info, 'role:(%w+)')
if role ~= 'master' then
  if not role then return {-2, 'INFO replication has no role'} end
  return {-1, role}
end
local id = string.match(info, 'master_replid:(%x+)')
if not id then return {-2, 'INFO replication has no master_replid'} end
local state = KEYS[1]
local r = redis.call('HGET', state, 'r')
if r == id then return {0, id} end
local guard = tonumber(ARGV[1])
if r == false or r == '?' or guard == 0 then
  -- No ID yet: a new state (the next acquire starts its guard as usual), or
  -- one written before IDs were recorded (a deployment upgraded from a
  -- version without this check, or whose acquire marked the ID unknown
  -- with '?': its first failover is not detected).
  redis.call('HSET', state, 'r', id)
  return {0, id}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local g = tonumber(redis.call('HGET', state, 'g') or '0')
if g < now + guard then g = now + guard end
-- The id of the guarded state is the new replication ID: no other node has
-- it, so no round takes this guard for a brand-new deployment's.
redis.call('HSET', state, 'g', string.format('%.0f', g), 'id', id, 'r', id)
redis.call('HDEL', state, 'v') -- a mark is for the ids of states gone
redis.call('HDEL', state, 'f')
return {1, id, g - now}

-- check: run once on every new connection to a plain node, before any lock
-- command on it. It ties the node's state to the server process whose data
-- holds it, so that a server whose data may lack lock keys that were
-- granted starts its restart guard even though it still has the state key
-- (docs/SAFETY.md, "What a server can do" and "Failover detection").
-- KEYS[1] is the node's state (see acquire.lua); its fields
--   p = the run_id of the server process that recorded it (INFO server:
--       drawn when the process starts, server.c initServerConfig), and
--   r = that process's master_replid when it recorded it,
-- written by the first check or by the acquire that made the state.
-- The guard starts when the data may have come from elsewhere:
--   another process (p differs): a restart from a persisted file, a
--     promoted replica, another server behind the address; or
--   the same process, but it was a replica since (r differs and
--     master_replid2 is set): promotion moves the old ID into replid2
--     (replication.c shiftReplicationId).
-- A changed master_replid with replid2 clear is a healthy master's own
-- event: the first replica attached (syncCommand) or the backlog was freed
-- after repl-backlog-ttl without replicas (replicationCron). Both keep
-- every key, so the check records the new ID and guards nothing.
-- ARGV[1] is the restart guard in ms (0: off).
-- Returns
--   {0, run_id} when nothing suggests a loss (the state is recorded under
--     this process and its ID now);
--   {1, run_id, ms} when the data may have come from elsewhere: the restart
--     guard now runs for ms on this server, its fence counter is unknown,
--     and its state carries the mark 'x', which no new-deployment shortcut
--     ends (with the guard off, ms is 0 and only p and r change);
--   {-1, role} when the server is not a master (a replica: role 'slave');
--     nothing is written;
--   {-2, err} when INFO cannot be read (an ACL without INFO, a server
--     without replication): nothing is checked.
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
local id2 = string.match(info, 'master_replid2:(%x+)')
if not id or not id2 then return {-2, 'INFO replication has no master_replid'} end
local server = redis.pcall('INFO', 'server')
local run = type(server) == 'string' and string.match(server, 'run_id:(%x+)')
if not run then return {-2, 'INFO server has no run_id'} end
local state = KEYS[1]
local p, r = redis.call('HGET', state, 'p'), redis.call('HGET', state, 'r')
local guard = tonumber(ARGV[1])
local moved = p and p ~= run -- another process
local promoted = r and r ~= '?' and r ~= id and string.find(id2, '[^0]') -- a replica since
if not (moved or promoted) or guard == 0 then
  -- Nothing lost, or a state without a record yet: a new one (the next
  -- acquire starts its guard as usual), or one written before processes
  -- were recorded ('?': its first restart from a file is not detected).
  redis.call('HSET', state, 'p', run, 'r', id)
  return {0, run}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local g = tonumber(redis.call('HGET', state, 'g') or '0')
if g < now + guard then g = now + guard end
-- The guarded state's id is the process's run_id, which no other node has,
-- and its mark 'x' matches no shortcut's: this server kept data, so it is
-- never taken for a node of a new deployment.
redis.call('HSET', state, 'g', string.format('%.0f', g), 'id', run, 'v', 'x', 'p', run, 'r', id)
redis.call('HDEL', state, 'f')
return {1, run, g - now}


-- newState, shared by acquire.lua and extend.lua (inserted in their text
-- when the scripts are loaded):
-- record in state, a node's missing state, that the node lost its data and
-- is guarded for guard ms from node time now, under id (see acquire.lua),
-- with the run_id and master_replid of the server process whose data now
-- holds it (see check.lua): a connection opened later to this same process
-- finds its own record, and a promoted replica or a restarted server does
-- not. INFO is read only here, when a state is made, never on the usual
-- path. A server whose INFO cannot be read records nothing, and no check
-- of it compares.
local function newState(state, now, guard, id)
  redis.call('HSET', state, 'g', string.format('%.0f', now + guard), 'id', id)
  local info = redis.pcall('INFO', 'replication')
  local r = type(info) == 'string' and string.match(info, 'master_replid:(%x+)')
  local server = r and redis.pcall('INFO', 'server')
  local p = type(server) == 'string' and string.match(server, 'run_id:(%x+)')
  if p then redis.call('HSET', state, 'p', p, 'r', r) end
end

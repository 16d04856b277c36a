-- newState, shared by acquire.lua and extend.lua (inserted in their text
-- when the scripts are loaded):
-- record in state, a node's missing state, that the node lost its data and
-- is guarded for guard ms from node time now, under id (see acquire.lua),
-- with the replication ID of the server whose data now holds it (see
-- check.lua): a connection opened later to this same server finds its own
-- ID, and a promoted replica finds another. INFO is read only here, when a
-- state is made, never on the usual path. A server whose INFO cannot be
-- read records none, and no check of it compares IDs.
local function newState(state, now, guard, id)
  redis.call('HSET', state, 'g', string.format('%.0f', now + guard), 'id', id)
  local info = redis.pcall('INFO', 'replication')
  local r = type(info) == 'string' and string.match(info, 'master_replid:(%x+)')
  if r then redis.call('HSET', state, 'r', r) end
end

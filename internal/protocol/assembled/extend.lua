-- The kernel's view of a lock key's value (inserted in the kernel scripts
-- when they are loaded): its holder, a token, perhaps after a mark that a
-- waiting strategy put before it (see announce.lua), then the tombstones
-- that the key keeps, each after a '\n' (see tombstone.lua). A key that
-- keeps tombstones and has no holder begins with the first of them.
-- holder returns the token that v holds (nil for none: v is false for a
-- missing key, or holds only tombstones), the mark ('' for none) and the
-- tombstones ('' for none, each after a '\n'). Tokens are compared without
-- the mark and the tombstones, and a key that the kernel sets again for the
-- same holder keeps both, so that a strategy's mark never changes who holds
-- a key, whichever strategy (or none) the client that reads it has.
local function holder(v)
  if not v then return nil, '', '' end
  local mark, rest = '', ''
  if string.sub(v, 1, #'w:') == 'w:' then
    mark = 'w:'
    v = string.sub(v, #'w:' + 1)
  end
  local cut = string.find(v, '\n', 1, true)
  if cut then
    rest = string.sub(v, cut)
    v = string.sub(v, 1, cut - 1)
  end
  if string.sub(v, 1, #'redquorum:gone:') == 'redquorum:gone:' then return nil, mark, '\n' .. v .. rest end
  return v, mark, rest
end

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


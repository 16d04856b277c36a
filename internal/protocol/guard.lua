-- guarded, acquire.lua's restart guard and new-deployment shortcut
-- (inserted in its text when the scripts are loaded, where it reads the
-- script's state, token, guard and establish: see acquire.lua's header).
-- guarded returns the reply for a node in its restart guard, or nil when
-- it may grant.
local function guarded()
  if guard <= 0 then return nil end
  local g = redis.call('HGET', state, 'g')
  if g == '0' then return nil end
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  if not g then
    -- No state: the node is new or lost its data (restart without
    -- persistence, flush, eviction). It may have granted locks it forgot.
    newState(state, now, guard, token)
    return {-2, guard, token, ''}
  end
  local id = redis.call('HGET', state, 'id')
  local op, h, eid = string.sub(establish, 1, 1), string.sub(establish, 2, 33), string.sub(establish, 34)
  if eid ~= id then op = '' end
  local v = redis.call('HGET', state, 'v') or ''
  if v == '' and id == redis.call('HGET', state, 'r') then
    v = 'x' -- begun by an earlier version's connection check: not empty
  end
  if op == 'e' and v == h then
    -- Every node was guarded at once, and each was then marked with the
    -- ids seen: a new deployment, or one whose every node lost its data.
    -- Its counter starts at the node's time in microseconds, above every
    -- fence issued before (docs/SAFETY.md, "Fences increase"); one
    -- written meanwhile is kept.
    redis.call('HSET', state, 'g', '0')
    redis.call('HSETNX', state, 'f', t[1] .. string.format('%06d', tonumber(t[2])))
  elseif tonumber(g) > now then
    if op == 'm' and v == '' then
      redis.call('HSET', state, 'v', h) -- set once: never changed while the state lives
      v = h
    end
    return {-2, tonumber(g) - now, id, v}
  else
    redis.call('HSET', state, 'g', '0')
  end
  return nil
end

-- release: delete every key of KEYS that holds token ARGV[1], or leave
-- only its tombstones where it keeps some (tombstone.lua). Returns 1 if
-- all of them held it, 0 otherwise (keys that hold another token are left
-- alone). Tokens are compared without a key's mark (value.lua).
-- ARGV[2] is a TTL in ms (0: none): a key that is missing or holds only
-- tombstones gets this token's tombstone for that long, so that this
-- token's SET, if the network still delivers it (a partition that delayed
-- it beyond the round's timeout), is refused by acquire.lua instead of
-- leaving a key that nobody holds. A tombstone is free for other tokens.
-- ARGV[3..] belong to the waiting strategy, whose hooks ("--@name", see
-- acquire.lua) may hand a key off instead of its deletion (kept), and
-- tell waiters. value.lua and tombstone.lua are inserted after the usual
-- case.
local token, ttl = ARGV[1], tonumber(ARGV[2])
-- The usual case: a single key that holds the token, unmarked (no waiter
-- found it held: nobody to tell), is deleted, and that is all.
local first
if #KEYS == 1 then
  first = redis.call('GET', KEYS[1])
  if first == token then return redis.call('DEL', KEYS[1]) end
end
@VALUE@
--@release
local n = 0
for i = 1, #KEYS do
  local key, v = KEYS[i], first
  first = nil
  if v == nil then v = redis.call('GET', key) end
  local h, mark, rest = holder(v)
  local mine = h == token
  --@mine
  if mine then
    local kept = false
    --@released
    if not kept and rest == '' then
      redis.call('DEL', key)
    elseif not kept then
      bury(key, nil, rest) -- its tombstones stay
    end
    n = n + 1
  elseif not v and ttl > 0 then
    redis.call('SET', key, '@GONE@' .. token, 'PX', ttl)
  elseif not h and ttl > 0 and not buried(rest, token) then
    bury(key, nil, rest, ttl, token)
  end
end
if n == #KEYS then return 1 end
return 0

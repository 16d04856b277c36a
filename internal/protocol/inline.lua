-- Waiting strategy "in line" (Options.Waiting WaitInLine, and the base of
-- handoff.lua), over announce.lua: the nodes keep each key's waiters in
-- line, a hint for whom a release wakes first that never decides a grant.
-- The line is the sorted set prefix .. "@LINE@" .. KEYS[1] without the
-- prefix, where prefix is the client's key prefix (before "@STATE@" in the
-- state key). It expires once no waiter joined it for the holder's time
-- left plus the waiter's TTL.
-- acquire: ARGV[4] is the ticket of a waiter, a whole number that orders
-- the line (ties by entry); '' for a round that does not wait (TryLock).
-- ARGV[5] is the waiter's id ('' for the token: a waiter's first round).
-- ARGV[6] is what the client knows of its entries in the line: '1' when
-- it may have some (its waiter's earlier rounds joined, or it waited for
-- the key lately), which a round that joins, or is granted, takes off
-- first; '2' when it waited for the key lately but has no entry left on
-- any node, which saves the scan; '' when it did not wait lately. A round
-- that is refused joins the line, keeping its place; a grant leaves it,
-- and marks the keys when others are still in line (a waiter's round with
-- '1' or '2'), so that the release names the next of them.
-- release: an announced release of KEYS[1] names the first in line, the
-- lowest ticket, whom it takes off the line; other keys name nobody.
strategy.argc = 3
local ticket, place, entries -- acquire's arguments
function strategy.acquire()
  ticket, entries = ARGV[4] or '', ARGV[6] or ''
  if ticket ~= '' then
    place = ARGV[5]
    if not place or place == '' then place = ARGV[1] end
  end
  if not place or entries == '' then strategy.granted = nil end
end
-- line returns the line of the lock key key, given the node's state key.
function strategy.line(state, key)
  local prefix = string.match(state, '^(.*)@STATE@') or ''
  return prefix .. '@LINE@' .. string.sub(key, #prefix + 1)
end
-- entry is the waiter's entry in the line; forget takes the client's
-- entries off the line, when it may have some.
function strategy.entry() return place end
function strategy.forget(line)
  if entries == '1' and place ~= ARGV[1] then redis.pcall('ZREM', line, place) end
end
function strategy.waits(wait)
  if not place then return end
  local line = strategy.line(KEYS[#KEYS], KEYS[1])
  -- pcall: a hint, which an ACL or a Cluster's slots may refuse.
  strategy.forget(line)
  redis.pcall('ZADD', line, 'NX', ticket, strategy.entry())
  redis.pcall('PEXPIRE', line, wait + tonumber(ARGV[2]))
end
function strategy.granted()
  local line = strategy.line(KEYS[#KEYS], KEYS[1])
  strategy.forget(line)
  if redis.pcall('EXISTS', line) == 1 then
    for i = 1, #KEYS - 1 do
      redis.pcall('SET', KEYS[i], '@WAITED@' .. ARGV[1], 'KEEPTTL')
    end
  end
end
-- parse splits an entry of the line: id, and for a waiter that joined for
-- a handoff (see handoff.lua) its round's token, TTL and channel.
function strategy.parse(m)
  local ids, ttl, ch = string.match(m, '^(.+)|(%d+)|([^|]+)$')
  if not ids or #ids % 2 == 0 then return m end
  local half = (#ids - 1) / 2 -- the id and the token have the same length
  return string.sub(ids, 1, half), string.sub(ids, half + 2), tonumber(ttl), ch
end
function strategy.next(key)
  if key ~= KEYS[1] then return '' end
  local head = redis.pcall('ZPOPMIN', strategy.line(ARGV[3], key)) -- a hint: an ACL may refuse it
  if type(head) ~= 'table' or not head[1] then return '' end
  local id, token = strategy.parse(head[1])
  return token or id
end

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
-- that is refused joins the line (entry, see handoff.lua), keeping its
-- place; a grant leaves it, and marks the keys when others are still in
-- line (a waiter's round with '1' or '2'), so that the release names the
-- next of them; the mark keeps the keys' tombstones (tails, see
-- acquire.lua).
-- release: an announced release of KEYS[1] names the first in line, the
-- lowest ticket, whom it takes off the line; other keys name nobody. An
-- entry of a waiter that joined for a handoff (handoff.lua) is named by
-- its round's token. ARGV[4] (optional) is the id of a waiter whose entry
-- leaves the line: one that gave up, or that holds the lock (sent where
-- its round was refused and joined), so that no release names a waiter
-- that no longer waits, whom the others would give a grace for nothing.

--@@quiet
quiet = (ARGV[6] or '') == '' -- a grant leaves the client's entries alone

--@@acquire
argc = 3
local ticket, entries = ARGV[4] or '', ARGV[6] or ''
local place -- the waiter's id; nil for a round that does not wait
if ticket ~= '' then
  place = ARGV[5]
  if not place or place == '' then place = token end
end
local entry, joins = place, place ~= nil -- what a refused round adds to the line, and whether
local line -- the first key's line, once needed (--@line)
--@prefix

--@@prefix
-- prefixOf returns the client's key prefix: what comes before "@STATE@"
-- in state, the node's state key, which a Cluster slot's tag may follow.
-- The usual key ends in it and is compared plainly, without the pattern,
-- which backtracks from the end. Defined by the strategy sections that
-- need it, before their first use.
local function prefixOf(state)
  if string.sub(state, -#'@STATE@') == '@STATE@' then return string.sub(state, 1, -#'@STATE@' - 1) end
  return string.match(state, '^(.*)@STATE@') or ''
end

--@@line
if not line then
  local prefix = prefixOf(state)
  line = prefix .. '@LINE@' .. string.sub(KEYS[1], #prefix + 1)
end

--@@release
--@prefix
if ARGV[4] and announce then
  local prefix = prefixOf(announce)
  redis.pcall('ZREM', prefix .. '@LINE@' .. string.sub(KEYS[1], #prefix + 1), ARGV[4])
end

--@@forget
if entries == '1' and place ~= token then redis.pcall('ZREM', line, place) end

--@@waits
if joins then
  --@line
  --@forget
  -- pcall: a hint, which an ACL or a Cluster's slots may refuse.
  redis.pcall('ZADD', line, 'NX', ticket, entry)
  redis.pcall('PEXPIRE', line, wait + tonumber(ttl))
end

--@@granted
if place and entries ~= '' then
  --@line
  --@forget
  if redis.pcall('EXISTS', line) == 1 then
    for i = 1, #KEYS - 1 do
      redis.pcall('SET', KEYS[i], '@WAITED@' .. token .. (tails[i] or ''), 'KEEPTTL')
    end
  end
end

--@@entry
-- A handoff's entry, next, is id .. '|' .. token .. '|' .. hold .. '|' ..
-- channel (see handoff.lua), the id and the token of equal length. at is
-- the '|' after the token, found at twice the first '|' by an anchored
-- match; an owner with '|' in the id (see protocol.NewToken) needs the
-- unanchored one, tried at every position of the entry. at is nil for any
-- other entry.
local p = string.find(next, '|', 1, true)
local at, _, hold, ch
if p then at, _, hold, ch = string.find(next, '^|(%d+)|([^|]+)$', 2 * p) end
if p and not at then at, _, hold, ch = string.find(next, '|(%d+)|([^|]+)$') end

--@@next
if i == 1 then
  local prefix = prefixOf(announce)
  local head = redis.pcall('ZPOPMIN', prefix .. '@LINE@' .. string.sub(key, #prefix + 1))
  if type(head) == 'table' and head[1] then
    next = head[1]
    --@entry
    if at and at % 2 == 0 then next = string.sub(next, at / 2 + 1, at - 1) end
  end
end

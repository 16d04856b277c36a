-- Waiting strategy "handoff" (Options.Waiting WaitHandoff), over
-- inline.lua: a release hands a single key off on the node to the first
-- in line whose client still listens, instead of deleting it.
-- acquire: ARGV[7] is the channel of the waiter's client (see
-- protocol.HandChannel), subscribed for as long as the client lives: the
-- waiter then joins for a handoff. Its entry is id .. '|' .. token .. '|'
-- .. ARGV[2] .. '|' .. ARGV[7] (the id first, so that its rounds keep its
-- place among equal tickets; the id and the token have the same length),
-- and each round replaces its previous round's entries. ARGV[8] is the
-- token of the waiter's previous round: a key that holds it (granted
-- there, its clean-up still to come) or its hand value ("@HAND@" .. token:
-- a release handed the key off to it) counts as free, and so does the
-- hand value of the lock handed over (acquire.lua). A round for a hand
-- value (the lock a handoff gave, sent to the nodes that did not hand it
-- off) never joins, and its grant marks the keys (a handoff means
-- waiters).
-- release: ARGV[4] (optional) is the channel of the releasing client, for
-- a waiter that leaves, or a lock whose round joined where it was refused:
-- where KEYS[1] does not hold the lock, the client's entries leave the
-- line first (one waiter per key at a time, and that one is done), and a
-- key handed off to it, "@HAND@" .. ARGV[1], is released like one that
-- holds it. ARGV[5] is '1' when the restart guard is off; otherwise a key
-- is handed off only by a node whose state is established (a handoff is
-- a grant). ARGV[5] is 'n' for the clean-up of a failed round, which hands
-- nothing off: it names the first in line, as a guarded node does. A key
-- is handed off to the first in line that joined for a handoff: set to
-- "@HAND@" .. token, marked, for the entry's TTL, and the client told on
-- its channel; the handoff stands only if that client
-- heard it (PUBLISH reached a subscriber on this server), so never for a
-- waiter whose process is gone (its entry is dropped and the next tried).
-- A key handed off is kept, and not announced: the others have nothing
-- to try until the next release. Otherwise the waiter is named, by its
-- token. A key handed off keeps its tombstones (rest, see value.lua), as
-- does a grant that marks its keys (tails, see acquire.lua).

--@@quiet
quiet = quiet and string.sub(token, 1, #'@HAND@') ~= '@HAND@' -- a grant marks a hand value's keys

--@@acquire
argc = 5
local channel, before = ARGV[7] or '', ARGV[8] or ''
local hand = string.sub(token, 1, #'@HAND@') == '@HAND@' -- a round for a hand value
if place and channel ~= '' then entry = place .. '|' .. token .. '|' .. ttl .. '|' .. channel end
joins = joins and not hand
local drop = entries == '1' and channel -- the channel whose entries a round takes off

--@@free
if not free then
  free = (channel ~= '' and before ~= '' and (h == before or h == '@HAND@' .. before)) or (handover ~= nil and h == '@HAND@' .. handover)
end

--@@drop
if drop and drop ~= '' then
  local all = redis.pcall('ZRANGE', line, 0, -1)
  if type(all) == 'table' then
    local suffix = '|' .. drop
    for _, m in ipairs(all) do
      if string.sub(m, -#suffix) == suffix then redis.pcall('ZREM', line, m) end
    end
  end
end

--@@forget
--@drop

--@@granted
if hand then
  for i = 1, #KEYS - 1 do
    redis.pcall('SET', KEYS[i], '@WAITED@' .. token .. (tails[i] or ''), 'KEEPTTL')
  end
end

--@@release!
--@prefix
local announce = ARGV[3] -- the node's state key: an unlock (see announce.lua)
local drop = ARGV[4] -- the releasing client's channel, for a waiter that leaves
if drop == '' then drop = nil end
if drop and announce then
  local v = first -- release.lua's usual case read the single key already
  if v == nil then v = redis.call('GET', KEYS[1]) end
  local h = holder(v)
  if h ~= token and h ~= '@HAND@' .. token then
    local prefix = prefixOf(announce)
    local line = prefix .. '@LINE@' .. string.sub(KEYS[1], #prefix + 1)
    --@drop
  end
end

--@@mine
if not mine and drop then mine = h == '@HAND@' .. token end

--@@next!
if i == 1 then
  local prefix = prefixOf(announce)
  local line = prefix .. '@LINE@' .. string.sub(key, #prefix + 1)
  for _ = 1, 8 do
    local head = redis.pcall('ZPOPMIN', line) -- a hint: an ACL may refuse it
    if type(head) ~= 'table' or not head[1] then break end
    next = head[1]
    --@entry
    if not at or at % 2 == 1 then break end -- a waiter that is only named
    next = string.sub(next, at / 2 + 1, at - 1) -- its round's token
    if #KEYS > 1 or ARGV[5] == 'n' or (ARGV[5] ~= '1' and redis.pcall('HGET', announce, 'g') ~= '0') then break end
    local value = '@HAND@' .. next
    -- Set before it is told, keeping the key's tombstones: a SET that
    -- fails ends the script before anyone heard of the handoff. To the
    -- client: the hand value's length, ':', the value and the key.
    bury(key, '@WAITED@' .. value, rest, hold)
    local heard = redis.pcall('PUBLISH', ch, #value .. ':' .. value .. key)
    if type(heard) ~= 'number' then break end -- an ACL without the channel: only named
    if heard > 0 then
      kept = true
      break
    end
    next = '' -- the waiter's client is gone: try the next one
  end
end

-- (@GONE@, @RELEASED@, @QUEUE@, @HAND@, @WAITED@ and @STATE@ stand for
-- protocol.TombstonePrefix, protocol.ReleasedChannel, protocol.QueuePrefix,
-- protocol.HandPrefix, protocol.WaitedPrefix and protocol.StateKey,
-- replaced when the scripts are loaded.)
-- release: delete every key of KEYS that holds token ARGV[1]. Returns 1 if
-- all of them did, 0 otherwise (keys that are gone or hold another token are
-- left alone).
-- Tokens are compared without the mark "@WAITED@" that a refused acquire
-- puts before a key's value (see acquire.lua).
-- ARGV[2] is one argument of up to four fields separated by '|', read
-- only where a key is not simply deleted (each argument costs the node
-- about a thousand instructions):
-- 1. "1" for an unlock, "0" for the clean-up of a failed round. An unlock
--    announces the deletion of each key marked as waited for on the
--    channel "@RELEASED@" .. the key, so that waiting clients retry at
--    once; a failed PUBLISH (for example an ACL without channel rights)
--    does not fail the release. An unmarked key refused no waiter: nobody
--    listens for it, and it is deleted without a look at its queue.
-- 2. The lock's TTL in ms (0: none): a key that does not exist gets a
--    tombstone, the value "@GONE@" .. ARGV[1], for that long, so that this
--    token's SET, if the network still delivers it (a partition that
--    delayed it beyond the round's timeout), is refused by the acquire
--    script instead of leaving a key that nobody holds. Every other token
--    takes a tombstone for a free key.
-- 3. and 4. (an unlock's, with queues of waiters) the restart guard in ms
--    (0: off) and the node's state key, the client's key prefix then
--    "@STATE@" (see acquire.lua). The announcement of KEYS[1]'s release
--    then names the next in line of its queue of waiters (see
--    acquire.lua), the one with the lowest ticket, whom it takes off the
--    queue; other announcements name nobody ('').
-- Handoff on the node: when the next in line joined for a handoff (its
-- entry is id .. '|' .. token .. '|' .. ttl .. '|' .. channel, see
-- acquire.lua) and the lock has a single key, the key is set to
-- "@HAND@" .. token, marked as waited for, for ttl ms instead of being
-- deleted, and the announcement is that value (otherwise it names the
-- waiter by the token). The waiter's client is told on its channel, and
-- the handoff stands only if that client heard it (PUBLISH reached a
-- subscriber on this server), so never for a waiter whose process is gone
-- (an entry of such a waiter is dropped and the next one is tried). It is
-- handed over only when this node may grant: with the restart guard on,
-- the node's state must be established (otherwise the waiter is named).
-- ARGV[3] (optional; on the nodes where the lock's acquire was refused
-- but joined the queue, and for a waiter that leaves) is the channel of
-- the releasing client (see acquire.lua): where KEYS[1] does not hold
-- the lock, its entries leave the queue first (it has one waiter per key
-- at a time, and that one is done), and a key handed over to it,
-- "@HAND@" .. ARGV[1], is released like one that holds it. So an unlock
-- also releases what a release handed over to the entry that its round
-- left on the nodes that refused it, and a waiter that gives up releases
-- what may have been handed over to its rounds. A handoff that no waiter
-- expects is released without ARGV[3], with the hand value as ARGV[1]:
-- the client's entries then stay, for its current waiter.
local waited = '@WAITED@'
local first, firstMarked -- the value of KEYS[1] without its mark, once read
if not ARGV[3] then
  -- The usual case first: a single key that holds the token, which no
  -- waiter found held, is deleted, and that is all.
  first = redis.call('GET', KEYS[1])
  if first == ARGV[1] and #KEYS == 1 then return redis.call('DEL', KEYS[1]) end
  firstMarked = first and string.sub(first, 1, #waited) == waited
  if firstMarked then first = string.sub(first, #waited + 1) end
end
-- read returns the value of key without its mark, and whether it had one.
local function read(key)
  local v = redis.call('GET', key)
  if v and string.sub(v, 1, #waited) == waited then return string.sub(v, #waited + 1), true end
  return v, false
end
-- The fields of ARGV[2]: announce, ttl, and the guard, state key and key
-- prefix (nil without queues).
local announce, ttl, guard, state = string.match(ARGV[2], '^(%d)|(%d+)|?(%d*)|?(.*)$')
announce, ttl, guard = announce == '1', tonumber(ttl) or 0, tonumber(guard) or 0
local prefix
if state and state ~= '' then
  prefix = string.match(state, '^(.*)@STATE@') or ''
else
  state = nil
end
local mine = ARGV[1]
if announce and prefix and ARGV[3] then
  mine = '@HAND@' .. ARGV[1]
  first, firstMarked = read(KEYS[1])
  if first ~= ARGV[1] and first ~= mine then
    -- Where the key holds the lock, its entry left the queue when the
    -- node granted or handed it over; elsewhere it may remain.
    local q = prefix .. '@QUEUE@' .. string.sub(KEYS[1], #prefix + 1)
    local all = redis.pcall('ZRANGE', q, 0, -1)
    if type(all) == 'table' then
      local suffix = '|' .. ARGV[3]
      for _, m in ipairs(all) do
        if string.sub(m, -#suffix) == suffix then redis.pcall('ZREM', q, m) end
      end
    end
  end
end
-- handoff hands KEYS[1] over to the first waiter of queue q that joined
-- for a handoff and whose client still listens: it sets the key to the
-- waiter's hand value and tells the client on its channel (PUBLISH, whose
-- count of receivers is the proof that the client is subscribed on this
-- server). It returns what the release announces and true when handed;
-- otherwise the waiter named ('' for none) and false, and the caller
-- deletes the key, which may hold a hand value that nobody heard of.
local function handoff(q)
  for _ = 1, 8 do
    local head = redis.pcall('ZPOPMIN', q) -- a hint: an ACL may refuse it
    if type(head) ~= 'table' or not head[1] then return '', false end
    local ids, ttl, ch = string.match(head[1], '^(.+)|(%d+)|([^|]+)$')
    if not ids or #ids % 2 == 0 then return head[1], false end -- a waiter that is only named
    local named = string.sub(ids, (#ids + 1) / 2 + 1) -- its round's token
    if #KEYS > 1 then return named, false end
    if guard > 0 and redis.pcall('HGET', state, 'g') ~= '0' then
      return named, false -- named, not handed
    end
    local hand = '@HAND@' .. named
    -- Set before it is told: a SET that fails ends the script before
    -- anyone heard of the handoff. (Nobody sees the key between the two.)
    redis.call('SET', KEYS[1], waited .. hand, 'PX', ttl)
    -- To the waiter's client: the hand value's length, ':', the value
    -- and the key.
    local heard = redis.pcall('PUBLISH', ch, #hand .. ':' .. hand .. KEYS[1])
    if type(heard) ~= 'number' then return named, false end -- an ACL without the channel: only named
    if heard > 0 then return hand, true end
    -- The waiter's client is gone: try the next one.
  end
  return '', false
end

local n = 0
for i = 1, #KEYS do
  local v, marked = first, firstMarked
  if i > 1 or v == nil then v, marked = read(KEYS[i]) end
  if v == ARGV[1] or v == mine then
    local next, handed = '', false
    if marked and announce and i == 1 and prefix then
      next, handed = handoff(prefix .. '@QUEUE@' .. string.sub(KEYS[1], #prefix + 1))
    end
    if handed then
      n = n + 1
    else
      n = n + redis.call('DEL', KEYS[i])
    end
    if marked and announce and not handed then
      -- (A handoff is told to its waiter's client only: the others have
      -- nothing to try until the next release.)
      redis.pcall('PUBLISH', '@RELEASED@' .. KEYS[i], next)
    end
  elseif v == false and ttl > 0 then
    redis.call('SET', KEYS[i], '@GONE@' .. ARGV[1], 'PX', ttl)
  end
end
if n == #KEYS then return 1 end
return 0

-- (@GONE@, @QUEUE@, @HAND@, @WAITED@ and @STATE@ stand for
-- protocol.TombstonePrefix, protocol.QueuePrefix, protocol.HandPrefix,
-- protocol.WaitedPrefix and protocol.StateKey, replaced when the scripts
-- are loaded; newState comes from newstate.lua the same way.)
-- acquire: take every key of KEYS[1..n-1] for token ARGV[1] for ARGV[2] ms,
-- all or none. KEYS[n], the last, is the node's state, a hash without expiry:
-- g = the node time in ms until which the node is in its restart guard (0: established),
-- id = the token of the round that created the state, f = the fence counter
-- (absent: unknown, after the node lost its data), r = the replication ID
-- of the server whose data holds the state (see check.lua).
-- The state key is the client's key prefix, then "@STATE@" (then, on a
-- Cluster node, the slot's tag).
-- ARGV[3] is the restart guard in ms (0: off). Every later argument is
-- optional: '' or left out (with every one after it) means none. Each
-- argument costs the node about a thousand instructions, so the usual
-- acquire sends three (TryLock) or four (Lock).
-- ARGV[4] is the ticket of a waiter, to join the queue of waiters of
-- KEYS[1], a hint for the order in which releases wake waiters that never
-- decides a grant: a whole number that orders the queue (ties by id).
-- ARGV[5] is the waiter's id ('' for the token: a waiter's first round).
-- When the keys are taken, the waiter joins the queue, keeping its place if
-- it is in it (see release.lua); when they are granted, it leaves it. The
-- queue is the sorted set prefix .. "@QUEUE@" .. KEYS[1] without the
-- prefix; it expires once no waiter joined it for the holder's time left
-- plus ARGV[2].
-- ARGV[6] is '1' when the caller wants the fence counter.
-- ARGV[7] is the id of a guarded state to establish at once (only a
-- client that saw every node guarded sends it).
-- ARGV[8] is the token of a holder in the same client that hands the lock
-- over to this round: keys that hold it, or that a release handed over to
-- its round ("@HAND@" .. ARGV[8]: it joined the queue there), count as
-- free.
-- ARGV[9] is the channel of the waiter's client, subscribed for as long as
-- the client lives: the waiter then joins for a handoff on the node. Its
-- entry is id .. '|' .. token .. '|' .. ARGV[2] .. '|' .. ARGV[9]: the
-- waiter's id first, so that its rounds keep its place among waiters of
-- equal tickets, then the token and TTL that a release sets the key to
-- (after "@HAND@") when it hands it over (see release.lua). The id and
-- the token have the same length. A client has one waiter per key at a
-- time, and each waiter one entry: a round that joins takes its previous
-- round's entry off. ARGV[10] is the token of the waiter's previous
-- round: its entry is taken off, and a key that holds that token (the
-- round was granted there, and its clean-up has not come yet) or that a
-- release handed to it, "@HAND@" .. ARGV[10], counts as this waiter's, so
-- free. ARGV[11] is '1' when the waiter's client may have entries in the
-- queue (the waiter's earlier rounds joined it, or the client waited for
-- the key lately): a round that joins, or is granted, takes them all off
-- first (see forget). It is '2' when the client waited for the key lately
-- but knows that it has no entry left on any node (every node handed the
-- key over to its last waiter's only round, popping its entry): a round
-- then does not look for them, which saves a scan of the queue, but is
-- granted as one with '1' (see granted). Otherwise the round leaves the
-- queue alone, which saves an uncontended lock the calls; an entry left
-- behind is only a hint (a handoff to it is released by its client, see
-- release.lua).
-- A round for a hand value ("@HAND@" .. a token: the lock that a handoff
-- gave, sent to the nodes that did not hand it over) never joins; granted,
-- it takes the client's entries off as ARGV[11] says.
-- The restart guard is read only before a grant.
-- A key that another token holds is marked as waited for ("@WAITED@" before
-- its value, its TTL kept) when it refuses this round, so that its release
-- looks at the queue and announces itself (see release.lua); a key taken
-- over by this round (already ours, or one that counts as free above)
-- keeps its mark, and a round for a hand value sets the mark (a handoff
-- means waiters), as does the grant of a waiter's round while others are
-- still in line (see granted). Every comparison here is of the value
-- without the mark. (KEEPTTL needs Redis 6.0: before, the mark is not
-- set, with pcall, and releases are not announced.)
-- Returns
--   0 when every key now holds our token (newly set, or already ours: a lost
--     reply or a retry, in which case the TTL is reset), or {0, f} when ARGV[6]
--     is '1', f = -1 when the counter is unknown;
--   the largest remaining TTL in ms (≥ 1) of the keys that another token holds,
--     or -1 when one of them has no expiry (a tombstone, "@GONE@" ..
--     a token, counts as free; see release.lua);
--   -3 when a key holds the tombstone of this very token: the round gave up
--     on this node and released it before this request arrived;
--   {-2, ms left in the guard, id} when the node is in its restart guard.
@NEWSTATE@
local state = KEYS[#KEYS]
local guard = tonumber(ARGV[3])
local waited = '@WAITED@'
local own = ARGV[1] -- what a granted key holds
if string.sub(own, 1, #'@HAND@') == '@HAND@' then own = waited .. own end
-- A single key that is free, the usual case, is taken in one call. The
-- value that SET ... GET returns when the key exists saves the GET below.
-- (NX with GET needs Redis 7.0: before, the error leaves first unknown.)
local first
if #KEYS == 2 then
  first = redis.pcall('SET', KEYS[1], own, 'NX', 'PX', ARGV[2], 'GET')
  -- Granted at once on an established node (or without a guard) when
  -- there is no fence to return and no queue to leave; the rest below.
  if first == false and ARGV[6] ~= '1' and (ARGV[11] or '') == '' and (guard <= 0 or redis.call('HGET', state, 'g') == '0') then
    return 0
  end
end
-- The optional arguments, '' when not sent.
local ticket, fenced, establish = ARGV[4] or '', ARGV[6] == '1', ARGV[7] or ''
local live, prevRound, queuedBefore = ARGV[9] or '', ARGV[10] or '', ARGV[11] == '1'
local waitedLately = queuedBefore or ARGV[11] == '2'
local place -- the waiter's id; nil for a round that does not wait
if ticket ~= '' then
  place = ARGV[5]
  if not place or place == '' then place = ARGV[1] end
end
-- guarded returns the reply for a node in its restart guard, or nil when
-- it may grant. It is asked only before a grant: a round that finds the
-- keys taken is refused either way.
local function guarded()
  if guard <= 0 then return nil end
  local g = redis.call('HGET', state, 'g')
  if g == '0' then return nil end
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  if not g then
    -- No state: the node is new or lost its data (restart without
    -- persistence, flush, eviction). It may have granted locks it forgot.
    newState(state, now, guard, ARGV[1])
    return {-2, guard, ARGV[1]}
  end
  local id = redis.call('HGET', state, 'id')
  if establish ~= '' and establish == id then
    -- Every node was guarded at once: a new deployment. Its counter is
    -- known: no fence was issued before (one written meanwhile is kept).
    redis.call('HSET', state, 'g', '0')
    redis.call('HSETNX', state, 'f', '0')
  elseif tonumber(g) > now then
    return {-2, tonumber(g) - now, id}
  else
    redis.call('HSET', state, 'g', '0')
  end
  return nil
end
local queue -- the key's queue of waiters, once needed (see queued)
local function queued()
  if not queue then
    local prefix = string.match(state, '^(.*)@STATE@') or ''
    queue = prefix .. '@QUEUE@' .. string.sub(KEYS[1], #prefix + 1)
  end
  return queue
end
-- forget takes every entry of this waiter's client off the queue, when
-- it may have some (ARGV[11]): the one the waiter's id names (a round that
-- joined before its client's channel was subscribed), its earlier rounds'
-- (an earlier round's stays where the round after was not sent), and
-- those of the client's earlier waiters for the key (a client has one
-- waiter per key at a time).
local function forget()
  if not queuedBefore then return end
  -- (A first round's id is its own new token: no entry has it yet.)
  if place ~= ARGV[1] then redis.pcall('ZREM', queued(), place) end
  if live == '' then return end
  local all = redis.pcall('ZRANGE', queued(), 0, -1)
  if type(all) ~= 'table' then return end
  local suffix = '|' .. live
  for _, m in ipairs(all) do
    if string.sub(m, -#suffix) == suffix then redis.pcall('ZREM', queued(), m) end
  end
end
-- granted is the reply once every key holds our token. A waiter that may
-- have been in the queue (ARGV[11] '1') leaves it; if others are still in
-- line (ARGV[11] '1' or '2'), its keys are marked as waited for, so that
-- its release names the next of them.
local function granted()
  if place and waitedLately then
    forget()
    if redis.pcall('EXISTS', queued()) == 1 then
      for i = 1, #KEYS - 1 do
        redis.pcall('SET', KEYS[i], '@WAITED@' .. ARGV[1], 'KEEPTTL')
      end
    end
  end
  if fenced then
    local f = redis.call('HGET', state, 'f')
    if f then return {0, tonumber(f)} end
    if guard > 0 then return {0, -1} end
    return {0, 0}
  end
  return 0
end
-- The single key taken above on a node that may be in its guard, or for
-- a round that wants the fence or leaves the queue.
if #KEYS == 2 then
  if first == false then
    local g = guarded()
    if g then
      redis.call('DEL', KEYS[1]) -- taken back in the same script: nobody saw it
      return g
    end
    return granted()
  end
  if type(first) ~= 'string' then first = nil end
end
local prev, prevHand = ARGV[8], nil
if prev == '' then prev = nil end
if prev then prevHand = '@HAND@' .. prev end
local handed, before -- the key handed over to this waiter's previous round, and that round's token
local entry = place
if place and live ~= '' then
  entry = place .. '|' .. ARGV[1] .. '|' .. ARGV[2] .. '|' .. live
  if prevRound ~= '' then handed, before = '@HAND@' .. prevRound, prevRound end
end
local gone = '@GONE@'
local wait = 0
local marked = {} -- the keys marked as waited for
for i = 1, #KEYS - 1 do
  local v = first
  if i > 1 or not v then v = redis.call('GET', KEYS[i]) end
  if v and string.sub(v, 1, #waited) == waited then
    v, marked[i] = string.sub(v, #waited + 1), true
  end
  if v == gone .. ARGV[1] then
    return -3 -- this token was released already (see release.lua): a late SET
  end
  if v ~= false and v ~= ARGV[1] and v ~= prev and v ~= prevHand and v ~= handed and v ~= before and string.sub(v, 1, #gone) ~= gone then
    local ttl = redis.call('PTTL', KEYS[i])
    if ttl == -1 then return -1 end
    if not marked[i] then redis.pcall('SET', KEYS[i], waited .. v, 'KEEPTTL') end
    if ttl < 1 then ttl = 1 end
    if ttl > wait then wait = ttl end
  end
end
if wait > 0 then
  if place and own == ARGV[1] then -- not a round for a hand value
    -- pcall: a hint, which an ACL or a Cluster's slots may refuse.
    forget()
    redis.pcall('ZADD', queued(), 'NX', ticket, entry)
    redis.pcall('PEXPIRE', queued(), wait + tonumber(ARGV[2]))
  end
  return wait
end
local g = guarded()
if g then return g end
for i = 1, #KEYS - 1 do
  if marked[i] and own == ARGV[1] then
    redis.call('SET', KEYS[i], waited .. own, 'PX', ARGV[2])
  else
    redis.call('SET', KEYS[i], own, 'PX', ARGV[2])
  end
end
return granted()

-- Waiting strategy "handoff" (Options.Waiting WaitHandoff), over inline.lua:
-- a release hands a single key off on the node to the first in line
-- whose client still listens, instead of deleting it.
-- acquire: ARGV[7] is the hand channel of the waiter's client (see
-- protocol.HandChannel), subscribed for as long as the client lives: the
-- waiter then joins for a handoff. Its entry is id .. '|' .. token .. '|'
-- .. ARGV[2] .. '|' .. ARGV[7] (the id first, so that its rounds keep its
-- place among equal tickets; the id and the token have the same length),
-- and each round replaces its previous round's entry. ARGV[8] is the token
-- of the waiter's previous round: a key that holds it (granted there, its
-- clean-up still to come) or its hand value ("@HAND@" .. token: a release
-- handed the key off to it) counts as free, and so does the hand value of
-- a lock handed over by Unlock (acquire.lua). A round for a hand value
-- (the lock a handoff gave, sent to the nodes that did not hand it off)
-- never joins, and its grant marks the keys (a handoff means waiters).
-- release: ARGV[4] (optional) is the hand channel of the releasing client,
-- for a waiter that leaves, or a lock whose round joined where it was refused:
-- where KEYS[1] does not hold the lock, the client's entries leave the
-- line first (one waiter per key at a time, and that one is done), and a
-- key handed off to it, "@HAND@" .. ARGV[1], is released like one that
-- holds it. ARGV[5] is '1' when the restart guard is off; otherwise a key
-- is handed off only by a node whose state is established (a handoff is
-- a grant). A key is handed off to the first in line that joined for a
-- handoff: set to "@HAND@" .. token, marked, for the entry's TTL, and the
-- client told on its channel; the handoff stands only if that client
-- heard it (PUBLISH reached a subscriber on this server), so never for a
-- waiter whose process is gone (its entry is dropped and the next tried).
-- A key handed off is not announced: the others have nothing to try
-- until the next release. Otherwise the waiter is named, by its token.
strategy.argc = 5
local channel, freed = '', {} -- the waiter's hand channel; hand values that count as free
local inLine = {acquire = strategy.acquire, forget = strategy.forget, entry = strategy.entry}
local hand = string.sub(ARGV[1], 1, #'@HAND@') == '@HAND@' -- a round for a hand value
function strategy.acquire()
  inLine.acquire()
  channel = ARGV[7] or ''
  local before, over = ARGV[8] or '', ARGV[10] or ''
  if channel ~= '' and before ~= '' then freed[before], freed['@HAND@' .. before] = true, true end
  if over ~= '' then freed['@HAND@' .. over] = true end
  local granted = strategy.granted -- nil when the line has nothing to do
  if hand then
    strategy.granted = function()
      strategy.mark()
      if granted then granted() end
    end
  end
end
function strategy.ours(h) return freed[h] == true end
function strategy.entry()
  if channel == '' then return inLine.entry() end
  return inLine.entry() .. '|' .. ARGV[1] .. '|' .. ARGV[2] .. '|' .. channel
end
-- drop takes every entry of the client with channel ch off line.
function strategy.drop(line, ch)
  local all = redis.pcall('ZRANGE', line, 0, -1)
  if type(all) ~= 'table' then return end
  local suffix = '|' .. ch
  for _, m in ipairs(all) do
    if string.sub(m, -#suffix) == suffix then redis.pcall('ZREM', line, m) end
  end
end
function strategy.forget(line)
  inLine.forget(line)
  if ARGV[6] == '1' and channel ~= '' then strategy.drop(line, channel) end
end
local waits = strategy.waits
function strategy.waits(wait)
  if not hand then waits(wait) end
end
function strategy.mark()
  for i = 1, #KEYS - 1 do redis.pcall('SET', KEYS[i], '@WAITED@' .. ARGV[1], 'KEEPTTL') end
end

function strategy.release()
  if not ARGV[4] or ARGV[4] == '' then return end
  freed['@HAND@' .. ARGV[1]] = true
  local h = holder(redis.call('GET', KEYS[1]))
  if h ~= ARGV[1] and h ~= '@HAND@' .. ARGV[1] and ARGV[3] then
    strategy.drop(strategy.line(ARGV[3], KEYS[1]), ARGV[4])
  end
end
function strategy.mine(h) return freed[h] == true end
-- handOff hands KEYS[1] off to the first in line that joined for a
-- handoff and whose client listens. It returns true when handed, or the
-- waiter to name ('' for none).
function strategy.handOff()
  local line = strategy.line(ARGV[3], KEYS[1])
  for _ = 1, 8 do
    local head = redis.pcall('ZPOPMIN', line) -- a hint: an ACL may refuse it
    if type(head) ~= 'table' or not head[1] then return '' end
    local id, token, ttl, ch = strategy.parse(head[1])
    if not token then return id end -- a waiter that is only named
    if #KEYS > 1 or (ARGV[5] ~= '1' and redis.pcall('HGET', ARGV[3], 'g') ~= '0') then
      return token
    end
    local value = '@HAND@' .. token
    -- Set before it is told: a SET that fails ends the script before
    -- anyone heard of the handoff. To the client: the hand value's
    -- length, ':', the value and the key.
    redis.call('SET', KEYS[1], '@WAITED@' .. value, 'PX', ttl)
    local heard = redis.pcall('PUBLISH', ch, #value .. ':' .. value .. KEYS[1])
    if type(heard) ~= 'number' then return token end -- an ACL without the channel: only named
    if heard > 0 then return true end
  end
  return ''
end
function strategy.released(key, marked)
  if not marked or not ARGV[3] then return false end
  local next = ''
  if key == KEYS[1] then next = strategy.handOff() end
  if next == true then return true end
  redis.pcall('PUBLISH', '@RELEASED@' .. key, next)
  return false
end

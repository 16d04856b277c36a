-- Waiting strategy "announce" (Options.Waiting WaitBackoff, and the base of
-- inline.lua and handoff.lua): releases wake the clients that wait.
-- acquire: a key that refuses the round because another token holds it is
-- marked as waited for: "@WAITED@" before its value, its TTL kept (KEEPTTL
-- needs Redis 6.0: before, the mark is not set, with pcall, and releases
-- are not announced).
-- release: ARGV[3], sent by an unlock (not by the clean-up of a failed
-- round), is the node's state key (the client's key prefix, then
-- "@STATE@"). Then the deletion of each marked key is announced on the
-- channel "@RELEASED@" .. the key, naming the waiter to try first
-- (strategy.next; '' for anyone), so that waiting clients try at once. A
-- failed PUBLISH (an ACL without channel rights) does not fail the
-- release. An unmarked key refused no waiter: nobody listens for it.
function strategy.refused(key, v, mark)
  if mark == '' then redis.pcall('SET', key, '@WAITED@' .. v, 'KEEPTTL') end
end
-- next returns the waiter that the announcement of key's release names.
function strategy.next(key) return '' end
function strategy.released(key, marked)
  if marked and ARGV[3] then redis.pcall('PUBLISH', '@RELEASED@' .. key, strategy.next(key)) end
  return false
end

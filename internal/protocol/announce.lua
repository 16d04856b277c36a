-- Waiting strategy "announce" (Options.Waiting WaitBackoff, and the base of
-- inline.lua and handoff.lua): releases wake the clients that wait.
--
-- A strategy is a set of sections, each "--@@name" and the code up to the
-- next: the code of the hook "name", which the kernel scripts (acquire.lua,
-- release.lua) mark with a line "--@name". When the scripts are loaded, each
-- mark is replaced by the sections of that name of the strategy and of
-- those below it, in order ("--@@name!" replaces theirs instead), and marks
-- inside sections are replaced the same way. So a strategy costs the node
-- nothing where it has no code, and the kernel reads the same with or
-- without one. Sections use the kernel's locals, named in each.
--
-- acquire: a key that refuses the round because another token holds it
-- (key, its value v and its mark) is marked as waited for: "@WAITED@"
-- before its value, its TTL kept (KEEPTTL needs Redis 6.0: before, the
-- mark is not set, with pcall, and releases are not announced).
-- release: ARGV[3], sent by an unlock (not by the clean-up of a failed
-- round), is the node's state key (the client's key prefix, then
-- "@STATE@"). Then the deletion of each marked key (key, mark) is announced
-- on the channel "@RELEASED@" .. key, naming the waiter to try first
-- (next: '' for anyone, see inline.lua), so that waiting clients try at
-- once. A failed PUBLISH (an ACL without channel rights) does not fail the
-- release. An unmarked key refused no waiter: nobody listens for it.

--@@refused
if mark == '' then redis.pcall('SET', key, '@WAITED@' .. v, 'KEEPTTL') end

--@@release
local announce = ARGV[3] -- the node's state key: an unlock

--@@released
if mark ~= '' and announce then
  local next = ''
  --@next
  if not kept then redis.pcall('PUBLISH', '@RELEASED@' .. key, next) end
end

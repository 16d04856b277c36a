-- The seam between the kernel scripts (acquire.lua, release.lua) and a
-- waiting strategy (announce.lua, inline.lua, handoff.lua), inserted before
-- the kernel when the scripts are loaded: the table strategy and its hooks,
-- here as they are without a strategy. A strategy's file, inserted after this
-- one, replaces the hooks it needs. A hook never decides a grant: the
-- kernel has decided before it calls one, and calls it on keys whose
-- holder it has compared already.
local strategy = {
  -- The number of arguments of the strategy's own, ARGV[4 .. 3 + argc] of
  -- acquire.lua (a strategy's release arguments come after the kernel's).
  argc = 0,
}
-- acquire and release are called first by the script of that name, to
-- read the strategy's arguments.
function strategy.acquire() end
function strategy.release() end
-- ours reports whether a key whose holder is h, another token, counts as
-- free for the acquiring round: the strategy knows h to be the round's own.
function strategy.ours(h) return false end
-- refused is told of each key, holding v with mark mark, that another
-- token holds; waits, of the round refused, wait ms before the longest of
-- them expires. granted, when not nil, is called once every key holds the
-- round's token.
function strategy.refused(key, v, mark) end
function strategy.waits(wait) end
strategy.granted = nil
-- mine reports whether a key whose holder is h, another token, is the
-- releasing client's to release. released is told of each key, marked or
-- not, that the release is about to delete: it returns true when it
-- disposed of the key itself (handed it off), and the kernel then leaves
-- it alone.
function strategy.mine(h) return false end
function strategy.released(key, marked) return false end

-- The kernel's view of a lock key's value (inserted in the kernel scripts
-- when they are loaded): its holder, a token, perhaps after a mark that a
-- waiting strategy put before it (see announce.lua), then the tombstones
-- that the key keeps, each after a '\n' (see tombstone.lua). A key that
-- keeps tombstones and has no holder begins with the first of them.
-- holder returns the token that v holds (nil for none: v is false for a
-- missing key, or holds only tombstones), the mark ('' for none) and the
-- tombstones ('' for none, each after a '\n'). Tokens are compared without
-- the mark and the tombstones, and a key that the kernel sets again for the
-- same holder keeps both, so that a strategy's mark never changes who holds
-- a key, whichever strategy (or none) the client that reads it has.
local function holder(v)
  if not v then return nil, '', '' end
  local mark, rest = '', ''
  if string.sub(v, 1, #'@WAITED@') == '@WAITED@' then
    mark = '@WAITED@'
    v = string.sub(v, #'@WAITED@' + 1)
  end
  local cut = string.find(v, '\n', 1, true)
  if cut then
    rest = string.sub(v, cut)
    v = string.sub(v, 1, cut - 1)
  end
  if string.sub(v, 1, #'@GONE@') == '@GONE@' then return nil, mark, '\n' .. v .. rest end
  return v, mark, rest
end

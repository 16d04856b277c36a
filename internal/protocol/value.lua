-- The kernel's view of a lock key's value (inserted in the kernel scripts
-- when they are loaded): a token, perhaps after a mark that a waiting
-- strategy put before it (see announce.lua). holder returns the token that v
-- holds and the mark ('' for none); v is false for a missing key. Tokens
-- are compared without the mark, and a key that the kernel sets again for
-- the same holder keeps it, so that a strategy's mark never changes who holds
-- a key, whichever strategy (or none) the client that reads it has.
local function holder(v)
  if v and string.sub(v, 1, #'@WAITED@') == '@WAITED@' then
    return string.sub(v, #'@WAITED@' + 1), '@WAITED@'
  end
  return v, ''
end

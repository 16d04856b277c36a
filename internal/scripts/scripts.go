// Package scripts holds the Lua scripts that run on each node. Every script
// is atomic on its node and guarded by the lock's token: none of them touches
// a key that holds another owner's token.
package scripts

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed acquire.lua
	acquireSrc string
	//go:embed release.lua
	releaseSrc string
	//go:embed extend.lua
	extendSrc string
	//go:embed fence.lua
	fenceSrc string
)

// The scripts, run with EVALSHA and a fallback to EVAL on NOSCRIPT.
var (
	Acquire = redis.NewScript(acquireSrc)
	Release = redis.NewScript(releaseSrc)
	Extend  = redis.NewScript(extendSrc)
	Fence   = redis.NewScript(fenceSrc)
)

// hashes holds each script's SHA boxed once, for [Args] and [Sub].
var hashes = map[*redis.Script]any{Acquire: Acquire.Hash(), Release: Release.Hash(), Extend: Extend.Hash(), Fence: Fence.Hash()}

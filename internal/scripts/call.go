package scripts

import (
	"context"
	"strings"

	"github.com/redis/go-redis/v9"
)

// sources maps each script to its Lua source, for the EVAL fallback.
var sources = map[*redis.Script]string{Acquire: acquireSrc, Release: releaseSrc, Extend: extendSrc, Fence: fenceSrc}

// Processor is the part of a go-redis client that [RunInt] needs.
type Processor interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// Args returns the EVALSHA arguments that run s on keys with argv. A round
// builds them once and shares them, read-only, between its calls to the
// nodes, which saves the per-node copies and boxing that [redis.Script.Run]
// makes.
func Args(s *redis.Script, keys []string, argv ...any) []any {
	args := make([]any, 0, 3+len(keys)+len(argv))
	args = append(args, "evalsha", hashes[s], len(keys))
	for _, k := range keys {
		args = append(args, k)
	}
	return append(args, argv...)
}

// Sub returns the arguments that run s on the first nkeys keys of from, a
// command built by [Args], followed by argv. It shares the keys already
// boxed in from (an interface holding a string costs an allocation).
func Sub(s *redis.Script, from []any, nkeys int, argv ...any) []any {
	args := make([]any, 0, 3+nkeys+len(argv))
	args = append(args, "evalsha", hashes[s], nkeys)
	args = append(args, from[3:3+nkeys]...)
	return append(args, argv...)
}

// Argv returns ARGV[i] (from 1) of a command built by [Args], boxed as it is.
func Argv(args []any, i int) any {
	return args[3+args[2].(int)+i-1]
}

// RunInt sends the command built by [Args] to node, by SHA, and returns its
// integer reply. When the node does not have the script (NOSCRIPT: a
// restart, SCRIPT FLUSH) it sends the source with EVAL, which also loads it.
func RunInt(ctx context.Context, node Processor, args []any) (int64, error) {
	return run(ctx, node, args, redis.NewIntCmd)
}

// Run is [RunInt] for a reply of any type, as [redis.Cmd.Result] gives it.
func Run(ctx context.Context, node Processor, args []any) (any, error) {
	return run(ctx, node, args, redis.NewCmd)
}

func run[C interface {
	redis.Cmder
	Result() (V, error)
}, V any](ctx context.Context, node Processor, args []any, newCmd func(context.Context, ...any) C) (V, error) {
	cmd := newCmd(ctx, args...)
	err := node.Process(ctx, cmd)
	if err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
		eval := make([]any, len(args))
		copy(eval, args)
		eval[0], eval[1] = "eval", sourceOf(args[1].(string))
		cmd = newCmd(ctx, eval...)
		err = node.Process(ctx, cmd)
	}
	if err != nil {
		var zero V
		return zero, err
	}
	return cmd.Result()
}

func sourceOf(sha string) string {
	for s, src := range sources {
		if s.Hash() == sha {
			return src
		}
	}
	return "" // unreachable for Args' commands; EVAL then reports the error
}

// Command redlock shows the redquorum lock at work and measures it.
//
//	redlock demo    [--nodes NODE,...] [--stock N] [--buyers N]
//	redlock bench   [--nodes NODE,...] [--duration D] [--callers N] [--slow-node D] [--json FILE] [--svg FILE] [--metrics ADDR]
//	redlock inspect KEY --nodes NODE,... [--prefix P] [--semaphore LIMIT | --rw]
//	redlock election NAME --nodes NODE,... [--prefix P] [--watch]
//	redlock guard status --nodes NODE,... [--prefix P]
//	redlock guard end    --nodes NODE,... [--prefix P] [--yes]
//	redlock guard fence  --nodes NODE,... [--prefix P] [--at-least N] [--yes]
//	redlock chaos   [--backend native|embedded] [--replicas] [--duration D] [--ttl D] [--node-timeout D] [--fencing] [--control] [--svg FILE]
//
// NODE is host:port, or redis://[user:password@]host[:port][/db], or
// rediss://... for TLS. Without --nodes, demo and bench start five
// in-process Redis-protocol nodes (miniredis). An error is one line on
// stderr. The exit status is then 2 for bad usage, and 1 for everything else.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/redquorum/redquorum/locktest/loadtest"
)

const usage = `redlock: a distributed lock over independent Redis masters.

usage:
  redlock demo    [--nodes NODE,...] [--stock N] [--buyers N]
  redlock bench   [--nodes NODE,...] [--duration D] [--callers N] [--slow-node D] [--json FILE] [--svg FILE] [--metrics ADDR]
  redlock inspect KEY --nodes NODE,... [--prefix P] [--semaphore LIMIT | --rw]
  redlock election NAME --nodes NODE,... [--prefix P] [--watch]
  redlock guard status --nodes NODE,... [--prefix P]
  redlock guard end    --nodes NODE,... [--prefix P] [--yes]
  redlock guard fence  --nodes NODE,... [--prefix P] [--at-least N] [--yes]
  redlock chaos   [--backend native|embedded] [--replicas] [--duration D] [--ttl D] [--node-timeout D] [--fencing] [--control] [--svg FILE]

Without --nodes, demo and bench run on five in-process nodes. inspect shows
who holds a key (the slots of a semaphore, the writer or readers of a
read-write lock) and each node's restart guard; election shows an election's
leader, term, TTL and value (--watch follows it); guard end ends the restart
guard on nodes you vouch for (a development reset, a deployment that came up
with a node missing): read "redlock guard end -h" first; guard fence
repairs the fence counters after a quorum of nodes lost their data. chaos
runs a short session under random faults and checks it for two holders at
once (--control: misconfigured on purpose, so it must find them).
Run "redlock COMMAND -h" for the flags of one command.
` + nodeHelp

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	var code int
	if spec, ok, err := loadtest.WorkerFromEnv(); ok {
		// One caller of a bench scenario whose callers are processes.
		if err == nil {
			err = benchWorker(ctx, spec)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "redlock bench worker:", err)
			code = 1
		}
	} else {
		code = run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	}
	stop()
	os.Exit(code)
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// usageError is a mistake in the command line. Its exit status is 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{fmt.Sprintf(format, args...)}
}

// run executes one command line and returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	// go-redis logs every failed dial; the demo kills a node on purpose.
	redis.SetLogger(quietLogger{})
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch cmd, rest := args[0], args[1:]; cmd {
	case "demo":
		err = demo(ctx, rest, stdout)
	case "bench":
		err = bench(ctx, rest, stdout, stderr)
	case "inspect":
		err = inspect(ctx, rest, stdout)
	case "election":
		err = election(ctx, rest, stdout)
	case "guard":
		err = guard(ctx, rest, stdout)
	case "chaos":
		err = chaos(ctx, rest, stdout)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		err = usagef("unknown command %q (want demo, bench, inspect, election, guard or chaos)", cmd)
	}
	name := args[0]
	if name == "guard" && len(args) > 1 && !strings.HasPrefix(args[1], "-") {
		name += " " + args[1]
	}
	var ue *usageError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "redlock %s: %v (see redlock -h)\n", name, err)
		return 2
	default:
		fmt.Fprintf(stderr, "redlock %s: %s\n", name, oneLine(err.Error()))
		return 1
	}
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// flags is a command's flag set. It reports errors instead of printing
// them, and prints its usage to out on -h.
type flags struct {
	*flag.FlagSet
	out   io.Writer
	about string // printed on -h between the synopsis and the flags
}

func newFlags(name, synopsis string, out io.Writer) flags {
	fs := flag.NewFlagSet(name+" "+synopsis, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {} // errors are reported by run, in one line
	return flags{FlagSet: fs, out: out}
}

// parse parses args and returns the positional arguments. Flags may come
// after positional arguments.
func parse(fs flags, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fmt.Fprintf(fs.out, "usage: redlock %s\n\n%s", fs.Name(), fs.about)
				fs.SetOutput(fs.out)
				fs.PrintDefaults()
				return nil, err
			}
			return nil, &usageError{err.Error()}
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

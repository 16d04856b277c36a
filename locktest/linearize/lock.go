// Package linearize checks histories for linearizability with porcupine:
// the lock's own history, recorded by locktest.Recorder, against the model
// of a lock, and the operations on a register or counter that the lock
// protects against the model of that object. It is a module of its own so
// that porcupine stays out of the builds that need only locktest.
//
// A checker that cannot fail proves nothing: each check here has a
// negative test, and a run with a misconfigured lock (a minority quorum)
// must be rejected.
package linearize

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/redquorum/redquorum/locktest"
)

// lockInput is one operation of the lock model: an acquire (of the hold with
// this id) or its release.
type lockInput struct {
	release bool
	hold    int // index of the attempt in the history
}

// free is the model state of a lock nobody holds; otherwise the state is the
// index of the holding attempt.
const free = -1

// lockModel returns the model of a lock whose acquire may fail spuriously,
// per key: the state is the holder or nobody; an acquire that succeeded
// needs the lock free and takes it; a failed acquire is always allowed and
// changes nothing; a release needs the releasing hold to be the holder and
// frees the lock.
func lockModel() porcupine.Model {
	return porcupine.Model{
		Partition: byMetadata,
		Init:      func() any { return free },
		Step: func(state, input, output any) (bool, any) {
			holder, in, ok := state.(int), input.(lockInput), output.(bool)
			switch {
			case in.release:
				return holder == in.hold, free
			case !ok:
				return true, holder // a failed acquire changes nothing
			default:
				return holder == free, in.hold
			}
		},
		DescribeOperation: func(input, output any) string {
			in := input.(lockInput)
			if in.release {
				return fmt.Sprintf("release(%d)", in.hold)
			}
			return fmt.Sprintf("acquire(%d) = %v", in.hold, output)
		},
		DescribeState: func(state any) string {
			if state.(int) == free {
				return "free"
			}
			return fmt.Sprintf("held by %d", state)
		},
	}
}

// byMetadata partitions a history by each operation's Metadata, a string.
func byMetadata(h []porcupine.Operation) [][]porcupine.Operation {
	byKey := map[string][]porcupine.Operation{}
	var keys []string
	for _, op := range h {
		k := op.Metadata.(string)
		if _, ok := byKey[k]; !ok {
			keys = append(keys, k)
		}
		byKey[k] = append(byKey[k], op)
	}
	parts := make([][]porcupine.Operation, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, byKey[k])
	}
	return parts
}

// LockOperations turns a history into porcupine operations: an acquire
// over [Call, Obtained] for every attempt and, for every hold, a release at
// the single instant End.
func LockOperations(history []locktest.Attempt) []porcupine.Operation {
	ops := make([]porcupine.Operation, 0, 2*len(history))
	for i, a := range history {
		ops = append(ops, porcupine.Operation{
			ClientId: a.Client, Input: lockInput{hold: i}, Call: a.Call,
			Output: a.OK, Return: a.Obtained, Metadata: a.Key,
		})
		if a.OK {
			ops = append(ops, porcupine.Operation{
				ClientId: a.Client, Input: lockInput{release: true, hold: i}, Call: a.End,
				Output: true, Return: a.End, Metadata: a.Key,
			})
		}
	}
	return ops
}

// CheckLock checks a lock's history against the lock model, partitioned by
// key, and returns porcupine's verdict. When the history is not
// linearizable and dir is not empty, it writes porcupine's HTML
// visualization to dir/porcupine.html and returns its path.
// The model has one holder at a time: it treats a shared (read) hold as
// exclusive, and a semaphore's holds as a lock's, so give it a lock's
// history only.
func CheckLock(history []locktest.Attempt, timeout time.Duration, dir string) (porcupine.CheckResult, string, error) {
	return check(lockModel(), LockOperations(history), timeout, dir)
}

// check runs porcupine on ops and writes the visualization of an illegal
// history to dir.
func check(model porcupine.Model, ops []porcupine.Operation, timeout time.Duration, dir string) (porcupine.CheckResult, string, error) {
	clients := map[int]int{}
	for i := range ops { // porcupine's visualization wants small client ids
		id, ok := clients[ops[i].ClientId]
		if !ok {
			id = len(clients)
			clients[ops[i].ClientId] = id
		}
		ops[i].ClientId = id
	}
	res, info := porcupine.CheckOperationsVerbose(model, ops, timeout)
	if res != porcupine.Illegal || dir == "" {
		return res, "", nil
	}
	path := filepath.Join(dir, "porcupine.html")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return res, "", err
	}
	return res, path, porcupine.VisualizePath(model, info, path)
}

// Verdict returns "ok", "ILLEGAL" or "unknown(timeout)" for a result.
func Verdict(c porcupine.CheckResult) string {
	switch c {
	case porcupine.Ok:
		return "ok"
	case porcupine.Illegal:
		return "ILLEGAL"
	}
	return "unknown(timeout)"
}

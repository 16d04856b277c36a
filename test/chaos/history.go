package chaos

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/anishathalye/porcupine"
)

// Attempt is one call of Lock by one contender. Times are wall-clock
// UnixNano readings (see the package documentation).
type Attempt struct {
	Key    string
	Client int   // contender: process*1000 + worker, for the visualization
	Call   int64 // Lock called
	// Obtained is when Lock returned the lock; for a failed attempt, when it
	// returned the error.
	Obtained int64
	OK       bool
	// End is min(Unlock start, Until) for a hold; unused for a failure.
	End int64
}

// Overlap is two holds of one key that overlap within their validity.
type Overlap struct {
	Key  string
	A, B Attempt // A obtained first
}

func (o Overlap) String() string {
	return fmt.Sprintf("key %q: hold [%d, %d] of client %d and hold [%d, %d] of client %d overlap by %v",
		o.Key, o.A.Obtained, o.A.End, o.A.Client, o.B.Obtained, o.B.End, o.B.Client,
		time.Duration(min(o.A.End, o.B.End)-o.B.Obtained))
}

// CheckOverlaps returns every pair of holds of one key where the later one
// was obtained before the earlier one ended. Each later hold is reported
// once, against the earlier hold that ends last.
func CheckOverlaps(history []Attempt) []Overlap {
	byKey := map[string][]Attempt{}
	for _, a := range history {
		if a.OK {
			byKey[a.Key] = append(byKey[a.Key], a)
		}
	}
	var found []Overlap
	for key, holds := range byKey {
		slices.SortFunc(holds, func(a, b Attempt) int { return cmp.Compare(a.Obtained, b.Obtained) })
		last := -1 // index of the hold seen so far that ends last
		for i, h := range holds {
			if last >= 0 && h.Obtained < holds[last].End {
				found = append(found, Overlap{Key: key, A: holds[last], B: h})
			}
			if last < 0 || h.End > holds[last].End {
				last = i
			}
		}
	}
	return found
}

// lockInput is one operation of the lock model: an acquire (of the hold with
// this id) or its release.
type lockInput struct {
	release bool
	hold    int // index of the attempt in the history
}

// free is the model state of a lock nobody holds; otherwise the state is the
// index of the holding attempt.
const free = -1

// lockModel is a lock whose acquire may fail spuriously, per key.
var lockModel = porcupine.Model{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
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
	},
	Init: func() any { return free },
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

// Operations turns a history into porcupine operations: an acquire over
// [Call, Obtained] for every attempt and, for every hold, a release at the
// single instant End.
func Operations(history []Attempt) []porcupine.Operation {
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

// CheckLinearizable checks the history against the lock model with porcupine
// and returns its verdict. When the history is not linearizable and dir is not
// empty, it writes porcupine's HTML visualization there and returns its path.
func CheckLinearizable(history []Attempt, timeout time.Duration, dir string) (porcupine.CheckResult, string, error) {
	ops := Operations(history)
	clients := map[int]int{}
	for i := range ops { // porcupine's visualization wants small client ids
		id, ok := clients[ops[i].ClientId]
		if !ok {
			id = len(clients)
			clients[ops[i].ClientId] = id
		}
		ops[i].ClientId = id
	}
	res, info := porcupine.CheckOperationsVerbose(lockModel, ops, timeout)
	if res != porcupine.Illegal || dir == "" {
		return res, "", nil
	}
	path := filepath.Join(dir, "porcupine.html")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return res, "", err
	}
	return res, path, porcupine.VisualizePath(lockModel, info, path)
}

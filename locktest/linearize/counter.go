package linearize

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// Kind is the kind of an operation on a protected object.
type Kind int

const (
	// Read returns the object's value.
	Read Kind = iota
	// Write sets a register's value.
	Write
	// Incr adds one to a counter and returns the new value: a critical
	// section that reads the value and writes it plus one is one Incr.
	Incr
)

// Op is one operation on a protected object: a register or a counter
// under one name. Call and Return are wall-clock UnixNano readings.
type Op struct {
	Object       string
	Client       int
	Call, Return int64
	Kind         Kind
	Value        int64 // read, written, or the new value of an Incr
}

// Recorder collects operations. The zero value is empty. It is safe for
// concurrent use.
type Recorder struct {
	mu  sync.Mutex
	ops []Op
}

// Call is one operation being recorded.
type Call struct {
	r  *Recorder
	op Op
}

// Start records that client starts an operation on object now.
func (r *Recorder) Start(client int, object string) *Call {
	return &Call{r: r, op: Op{Object: object, Client: client, Call: time.Now().UnixNano()}}
}

// Done records that the operation returned now, with its kind and value.
// An operation that failed, or whose effect is unknown, is not recorded.
func (c *Call) Done(kind Kind, value int64) {
	c.op.Return, c.op.Kind, c.op.Value = time.Now().UnixNano(), kind, value
	c.r.mu.Lock()
	defer c.r.mu.Unlock()
	c.r.ops = append(c.r.ops, c.op)
}

// Ops returns a copy of the recorded operations.
func (r *Recorder) Ops() []Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.ops)
}

// objectModel returns the model of a register (Read, Write) or a counter
// (Read, Incr) that starts at init, per object.
func objectModel(init int64) porcupine.Model {
	return porcupine.Model{
		Partition: byMetadata,
		Init:      func() any { return init },
		Step: func(state, input, _ any) (bool, any) {
			v, op := state.(int64), input.(Op)
			switch op.Kind {
			case Read:
				return op.Value == v, v
			case Write:
				return true, op.Value
			default:
				return op.Value == v+1, op.Value
			}
		},
		DescribeOperation: func(input, _ any) string {
			op := input.(Op)
			return fmt.Sprintf("%s %s = %d", op.Object, [...]string{"read", "write", "incr"}[op.Kind], op.Value)
		},
		DescribeState: func(state any) string { return fmt.Sprint(state) },
	}
}

// CheckObject checks operations on registers or counters that start at
// init against their model, partitioned by object, and returns porcupine's
// verdict. Two holders that both read 5 and write 6 make two Incr that
// return 6: not linearizable. When the history is not linearizable and dir
// is not empty, it writes porcupine's HTML visualization to
// dir/porcupine.html and returns its path.
func CheckObject(ops []Op, init int64, timeout time.Duration, dir string) (porcupine.CheckResult, string, error) {
	pops := make([]porcupine.Operation, len(ops))
	for i, op := range ops {
		pops[i] = porcupine.Operation{ClientId: op.Client, Input: op, Call: op.Call, Return: op.Return, Metadata: op.Object}
	}
	return check(objectModel(init), pops, timeout, dir)
}

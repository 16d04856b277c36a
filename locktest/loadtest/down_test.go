package loadtest

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// echoLocker "locks" by a round trip to the first node: a byte written and
// read back. It fails once that node is cut off.
type echoLocker struct{ addr string }

func (e echoLocker) Lock(ctx context.Context, _ string, _ time.Duration) (Unlocker, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", e.addr)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte{1}); err != nil {
		return nil, err
	}
	b := make([]byte, 1)
	if _, err := c.Read(b); err != nil {
		return nil, err
	}
	return echoLocker{}, nil
}

func (echoLocker) Unlock(context.Context) error { return nil }

// TestDownCutsFirstNode: with Scenario.Down, the implementation reaches the
// first node through a proxy that works until half-way through the measured
// phase and then refuses it: the run has both answered calls and failed ones.
// Without Down, none fail.
func TestDownCutsFirstNode(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				b := make([]byte, 1)
				for {
					if _, err := c.Read(b); err != nil {
						return
					}
					if _, err := c.Write(b); err != nil {
						return
					}
				}
			}()
		}
	}()
	impl := Impl{Name: "echo", New: func(addrs []string) (Locker, func(), error) {
		if len(addrs) == 0 {
			return nil, nil, errors.New("no node")
		}
		return echoLocker{addrs[0]}, func() {}, nil
	}}
	r := &Runner{Warmup: 10 * time.Millisecond}
	for _, down := range []bool{false, true} {
		sc := Scenario{ID: "d", Callers: 2, Duration: 400 * time.Millisecond, TTL: time.Second, Down: down}
		res, err := r.Run(t.Context(), impl, sc, []string{ln.Addr().String()})
		require.NoError(t, err)
		assert.Positive(t, res.Ops, "down %v: calls answered", down)
		if down {
			assert.Positive(t, res.Errors, "calls failed once the node was cut off")
		} else {
			assert.Zero(t, res.Errors)
		}
	}
}

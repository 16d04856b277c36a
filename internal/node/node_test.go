package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
)

// redisErr is an error reply from a node.
type redisErr string

func (e redisErr) Error() string { return string(e) }
func (redisErr) RedisError()     {}

// TestInDoubt: a release's failure leaves the node in doubt when no answer
// came, or when the node said the script did not run for now.
func TestInDoubt(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{ErrNotOurs, false},
		{context.DeadlineExceeded, true},
		{fmt.Errorf("dial: %w", &net.OpError{Op: "dial", Err: errors.New("connection refused")}), true},
		{redis.ErrClosed, true},
		{errors.New("broken pipe"), true},
		{redisErr("NOPERM this user has no permissions to run the 'evalsha' command"), false},
		{redisErr("ERR unknown command"), false},
		{redisErr("LOADING Redis is loading the dataset in memory"), true},
		{redisErr("BUSY Redis is busy running a script"), true},
		{redisErr("MASTERDOWN Link with MASTER is down"), true},
	} {
		assert.Equal(t, tc.want, inDoubt(tc.err), "%v", tc.err)
	}
}

package redlock

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redquorum/redquorum/internal/leakcheck"
	"github.com/redquorum/redquorum/internal/scripts"
)

// isAcquire selects the acquire script's commands.
func isAcquire(cmd redis.Cmder) bool {
	a := cmd.Args()
	return len(a) > 1 && a[1] == scripts.Acquire.Hash()
}

// TestSplitVote: a Lock whose round finds the key's nodes shared out
// between other tokens, none on a quorum, retries at once instead of after
// MinRetryDelay; one that finds a holder with a quorum, or that cannot rule
// one out because a node failed, waits as before.
func TestSplitVote(t *testing.T) {
	for _, tc := range []struct {
		name    string
		holders []string // per node: the token holding "k", "" for none, "fail" for a node whose acquire fails
		split   bool
	}{
		{"split between two others and us", []string{"A", "A", "B", "B", ""}, true},
		{"split, the others on one node each", []string{"A", "B", "C", "", ""}, true},
		{"a holder on a quorum", []string{"A", "A", "A", "B", ""}, false},
		{"a failed node could complete a quorum", []string{"A", "A", "fail", "B", ""}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			leakcheck.Check(t)
			c := newCluster(t, len(tc.holders))
			// Without the quick retry, the next round comes a minute later.
			cl := c.client(t, &Options{MinRetryDelay: time.Minute, MaxRetryDelay: time.Minute})
			free := -1
			for i, h := range tc.holders {
				switch h {
				case "":
					free = i
				case "fail":
					c.hooks[i].selectCmds(isAcquire)
					c.hooks[i].set(nil, errors.New("node down"))
				default:
					require.NoError(t, c.srv[i].Set("k", h))
					c.srv[i].SetTTL("k", time.Hour)
				}
			}
			// The other contenders release before our second round.
			var rounds atomic.Int64
			c.hooks[free].selectCmds(isAcquire)
			c.hooks[free].set(func() {
				if rounds.Add(1) == 2 {
					for i, h := range tc.holders {
						if h != "fail" {
							c.srv[i].Del("k")
						}
					}
				}
			}, nil)
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
			defer cancel()
			l, err := cl.Lock(ctx, "k", 10*time.Second)
			if tc.split {
				require.NoError(t, err, "Lock retried at once after the split")
				assert.GreaterOrEqual(t, rounds.Load(), int64(2))
				require.NoError(t, l.Unlock(t.Context()))
			} else {
				require.ErrorIs(t, err, context.DeadlineExceeded)
				assert.Equal(t, int64(1), rounds.Load(), "one round, then the backoff")
			}
			require.NoError(t, cl.Close())
		})
	}
}

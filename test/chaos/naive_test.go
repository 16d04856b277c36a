package chaos

import (
	"context"
	"crypto/rand"
	"errors"
	mrand "math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// naiveSemaphore is the design that redlock.Semaphore is not, kept here as
// a negative control: each node counts the holders of the semaphore (a
// sorted set of tokens by expiry) and admits a new one while fewer than
// limit hold it, and a holder needs a majority of the nodes. Each node
// keeps its own bound, but holders may win different majorities: with
// three nodes and a limit of 2, three holders that each win two nodes fill
// the nodes exactly, and all three hold at once. A majority bounds the
// holders at N·limit/q, not at limit (q is the quorum); only q >
// N·limit/(limit+1) would bound them at limit.
type naiveSemaphore struct {
	nodes   []redis.UniversalClient
	key     string
	limit   int
	timeout time.Duration // per node and call
}

// naiveAdmit admits ARGV[1] to the sorted set KEYS[1] until the node's
// time plus ARGV[3] ms, while fewer than ARGV[2] unexpired tokens are in
// it (1), or refuses (0).
var naiveAdmit = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 1 end
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then return 0 end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1`)

// errNaiveFull is a node's refusal: it counts limit holders already.
var errNaiveFull = errors.New("chaos: naive semaphore: full on this node")

// Acquire retries, a few milliseconds apart, until a majority of the nodes
// admit one token within its validity, or ctx is done.
func (s *naiveSemaphore) Acquire(ctx context.Context, ttl time.Duration) (*naivePermit, error) {
	for {
		start := time.Now()
		p := &naivePermit{s: s, token: rand.Text(), until: start.Add(ttl - ttl/100 - 2*time.Millisecond)}
		admitted := s.each(ctx, func(ctx context.Context, n redis.UniversalClient) error {
			v, err := naiveAdmit.Run(ctx, n, []string{s.key}, p.token, s.limit, ttl.Milliseconds()).Int()
			if err == nil && v != 1 {
				err = errNaiveFull
			}
			return err
		})
		if admitted > len(s.nodes)/2 && time.Now().Before(p.until) {
			return p, nil
		}
		_ = p.Unlock(context.WithoutCancel(ctx))
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(mrand.N(5 * time.Millisecond)):
		}
	}
}

// each runs fn on every node at once, each call bounded by s.timeout, and
// returns how many returned nil.
func (s *naiveSemaphore) each(ctx context.Context, fn func(context.Context, redis.UniversalClient) error) int {
	var ok atomic.Int32
	var wg sync.WaitGroup
	for _, n := range s.nodes {
		wg.Go(func() {
			nctx, cancel := context.WithTimeout(ctx, s.timeout)
			defer cancel()
			if fn(nctx, n) == nil {
				ok.Add(1)
			}
		})
	}
	wg.Wait()
	return int(ok.Load())
}

// close closes the node clients.
func (s *naiveSemaphore) close() {
	for _, n := range s.nodes {
		_ = n.Close()
	}
}

// naivePermit is one hold of a naiveSemaphore.
type naivePermit struct {
	s     *naiveSemaphore
	token string
	until time.Time
}

// Until is the end of the permit's validity: its TTL from the start of
// Acquire's last round, less the drift redlock allows.
func (p *naivePermit) Until() time.Time { return p.until }

// Extend is not offered: the control's holds end at their TTL.
func (p *naivePermit) Extend(context.Context, time.Duration) error {
	return errors.New("chaos: naive semaphore: no Extend")
}

// Unlock removes the permit's token from every node.
func (p *naivePermit) Unlock(ctx context.Context) error {
	p.s.each(ctx, func(ctx context.Context, n redis.UniversalClient) error {
		return n.ZRem(ctx, p.s.key, p.token).Err()
	})
	return nil
}

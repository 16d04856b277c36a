package redlock

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redquorum/redquorum/clock"
	"github.com/redquorum/redquorum/internal/hashslot"
	"github.com/redquorum/redquorum/internal/protocol"
)

// MaxKeyLen is the longest key, in bytes, that a Client accepts. Longer
// keys are refused before anything is sent.
const MaxKeyLen = 1024

// stored returns key as stored on the nodes: after Options.KeyPrefix.
func (c *Client) stored(key string) string { return c.cfg.prefix + key }

// storedKeys returns keys as stored on the nodes, with room for extra more.
func (c *Client) storedKeys(keys []string, extra int) []string {
	stored := make([]string, len(keys), len(keys)+extra)
	for i, k := range keys {
		stored[i] = c.stored(k)
	}
	return stored
}

// checkArgs validates the keys and a ttl and returns the ttl cut to whole
// milliseconds, which is what the nodes apply.
func (c *Client) checkArgs(keys []string, ttl time.Duration) (time.Duration, error) {
	if err := c.checkKeys(keys); err != nil {
		return 0, err
	}
	return c.checkTTL(ttl)
}

// checkKeys validates the keys of one lock.
func (c *Client) checkKeys(keys []string) error {
	if len(keys) == 0 {
		return errors.New("redlock: no keys")
	}
	for i, k := range keys {
		switch {
		case len(k) > MaxKeyLen:
			return fmt.Errorf("redlock: keys[%d] is %d bytes long, above MaxKeyLen (%d)", i, len(k), MaxKeyLen)
		case k == "":
			if len(keys) == 1 {
				return errors.New("redlock: empty key")
			}
			return fmt.Errorf("redlock: keys[%d] is empty", i)
		case strings.HasPrefix(k, protocol.StateKey):
			return fmt.Errorf("redlock: key %q starts with %q, which is reserved for the nodes' state", k, protocol.StateKey)
		case strings.HasPrefix(k, protocol.LinePrefix):
			return fmt.Errorf("redlock: key %q starts with %q, which is reserved for the lines of waiters", k, protocol.LinePrefix)
		case strings.HasPrefix(k, protocol.LeaderPrefix):
			return fmt.Errorf("redlock: key %q starts with %q, which is reserved for the records of elections", k, protocol.LeaderPrefix)
		case strings.HasPrefix(k, protocol.SemaphorePrefix):
			return fmt.Errorf("redlock: key %q starts with %q, which is reserved for the keys of semaphores", k, protocol.SemaphorePrefix)
		case strings.HasPrefix(k, protocol.RWMutexPrefix):
			return fmt.Errorf("redlock: key %q starts with %q, which is reserved for the keys of read-write locks", k, protocol.RWMutexPrefix)
		}
		if j := slices.Index(keys[:i], k); j >= 0 {
			return fmt.Errorf("redlock: keys[%d] %q is the same as keys[%d]", i, k, j)
		}
		if c.sharded && i > 0 && hashslot.Hashed(c.stored(k)) != hashslot.Hashed(c.stored(keys[0])) {
			return fmt.Errorf("redlock: keys[%d] %q and keys[0] %q have different hash tags: a node is a Redis Cluster or Ring, so every key of one lock needs the same hash tag, as in {order:42}:a and {order:42}:b", i, k, keys[0])
		}
	}
	return nil
}

// checkTTL validates a ttl and returns it cut to whole milliseconds.
func (c *Client) checkTTL(ttl time.Duration) (time.Duration, error) {
	ms := ttl.Truncate(time.Millisecond)
	if ttl > 0 && ms == 0 {
		return 0, fmt.Errorf("redlock: ttl %v is below the nodes' 1ms resolution", ttl)
	}
	if err := clock.CheckTTL(ms, c.cfg.drift); err != nil {
		return 0, fmt.Errorf("redlock: %w", err)
	}
	if c.cfg.guard > 0 && ms > c.cfg.guard {
		return 0, fmt.Errorf("redlock: ttl %v exceeds Options.RestartGuard %v: a node that lost its data could grant the lock again while it is held", ttl, c.cfg.guard)
	}
	return ms, nil
}

// storedKeys returns the lock's keys as stored on the nodes.
func (r *round) storedKeys() []string { return r.acq.Keys[:len(r.keys)] }

// name is how errors and logs name the lock: its key, or its keys joined by
// ", ".
func (r *round) name() string { return strings.Join(r.keys, ", ") }

package main

import (
	"context"
	"time"

	"github.com/redquorum/redquorum/locktest/loadtest"
	"github.com/redquorum/redquorum/redlock"
)

// semaphoreImpls returns the implementations that take a permit or a
// read lock where the others take a lock, on the node clients of
// loadtest.UserClients: "redquorum-sem" (a semaphore of limit 3 named by
// the key: each operation its node's first holder), "redquorum-sem-shared"
// (one semaphore for every key, whose limit record stays on the node
// between operations), "redquorum-rlock" and "redquorum-wlock" (a
// read-write lock named by the key, read-locked or write-locked).
func semaphoreImpls(opts *redlock.Options) []loadtest.Impl {
	impl := func(name string, lock func(c *redlock.Client, ctx context.Context, key string, ttl time.Duration) (loadtest.Unlocker, error)) loadtest.Impl {
		return loadtest.Impl{Name: name, New: func(addrs []string) (loadtest.Locker, func(), error) {
			nodes := loadtest.UserClients(addrs...)
			closeNodes := func() {
				for _, n := range nodes {
					_ = n.Close()
				}
			}
			c, err := redlock.New(nodes, opts)
			if err != nil {
				closeNodes()
				return nil, nil, err
			}
			return lockerFunc(func(ctx context.Context, key string, ttl time.Duration) (loadtest.Unlocker, error) {
				return lock(c, ctx, key, ttl)
			}), func() { _ = c.Close(); closeNodes() }, nil
		}}
	}
	permit := func(c *redlock.Client, ctx context.Context, name string, ttl time.Duration) (loadtest.Unlocker, error) {
		p, err := c.Semaphore(name, 3).Acquire(ctx, ttl)
		if err != nil {
			return nil, err
		}
		return p.Lock(), nil
	}
	return []loadtest.Impl{
		impl("redquorum-sem", permit),
		impl("redquorum-sem-shared", func(c *redlock.Client, ctx context.Context, _ string, ttl time.Duration) (loadtest.Unlocker, error) {
			return permit(c, ctx, "shared", ttl)
		}),
		impl("redquorum-rlock", func(c *redlock.Client, ctx context.Context, key string, ttl time.Duration) (loadtest.Unlocker, error) {
			return unlocker(c.RWMutex(key).RLock(ctx, ttl))
		}),
		impl("redquorum-wlock", func(c *redlock.Client, ctx context.Context, key string, ttl time.Duration) (loadtest.Unlocker, error) {
			return unlocker(c.RWMutex(key).Lock(ctx, ttl))
		}),
	}
}

// unlocker returns l as a loadtest.Unlocker, and nil with err.
func unlocker(l *redlock.Lock, err error) (loadtest.Unlocker, error) {
	if err != nil {
		return nil, err
	}
	return l, nil
}

// lockerFunc is a function as a loadtest.Locker.
type lockerFunc func(ctx context.Context, key string, ttl time.Duration) (loadtest.Unlocker, error)

func (f lockerFunc) Lock(ctx context.Context, key string, ttl time.Duration) (loadtest.Unlocker, error) {
	return f(ctx, key, ttl)
}

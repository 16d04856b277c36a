// Package jobrunner is an example of code under test: a job runner that
// runs each job under a lock of its own, so that two workers never run one
// job at once. Its tests use the public package locktest as any user of
// redquorum would: real redis-server nodes, a random fault schedule, a
// recorder of the critical sections, and the checkers.
package jobrunner

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redquorum/redquorum/redlock"
)

// Runner runs jobs under a lock per job. Work does the job; it must stop
// relying on the lock at until, the lock's validity end. The hooks, when
// set, see each lock after it is obtained and before it is released: tests
// record the critical sections there.
type Runner struct {
	Locks *redlock.Client
	TTL   time.Duration
	Work  func(ctx context.Context, job string, until time.Time) error

	Locked    func(job string, l *redlock.Lock) // after Lock returned l
	Failed    func(job string, err error)       // after Lock failed
	Unlocking func(job string, l *redlock.Lock) // before Unlock
}

// ErrBusy means that the job's lock could not be obtained in time.
var ErrBusy = errors.New("jobrunner: job busy")

// Run runs job once under its lock, waiting up to wait for the lock. The
// lock is released when Work returns; when the release fails the lock
// expires by itself.
func (r *Runner) Run(ctx context.Context, job string, wait time.Duration) error {
	lctx, cancel := context.WithTimeout(ctx, wait)
	l, err := r.Locks.Lock(lctx, "job:"+job, r.TTL)
	cancel()
	if err != nil {
		if r.Failed != nil {
			r.Failed(job, err)
		}
		return fmt.Errorf("%w: %s: %w", ErrBusy, job, err)
	}
	if r.Locked != nil {
		r.Locked(job, l)
	}
	werr := r.Work(ctx, job, l.Until())
	if r.Unlocking != nil {
		r.Unlocking(job, l)
	}
	_ = l.Unlock(ctx)
	return werr
}

package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redquorum/redquorum/redlock"
)

// A semaphore lets at most its limit of holders in at once: here, three
// report builds.
func ExampleClient_Semaphore() {
	addrs, stop := startNodes(3)
	defer stop()
	client, _ := redlock.New(redlock.NewNodes(addrs...), &redlock.Options{NodeTimeout: time.Second})
	defer client.Close()
	ctx := context.Background()

	sem := client.Semaphore("reports", 3)
	var permits []*redlock.Permit
	for range 3 {
		p, err := sem.Acquire(ctx, time.Minute)
		if err != nil {
			fmt.Println("acquire:", err)
			return
		}
		permits = append(permits, p)
	}
	_, err := sem.TryAcquire(ctx, time.Minute)
	fmt.Println("a fourth:", errors.Is(err, redlock.ErrNotObtained))

	_ = permits[0].Release(ctx)
	p, err := sem.TryAcquire(ctx, time.Minute)
	fmt.Println("after a release:", err == nil, p.Slot() == permits[0].Slot())

	// Another limit for the same name is refused, not mixed in.
	_, err = client.Semaphore("reports", 4).TryAcquire(ctx, time.Minute)
	fmt.Println("limit 4:", errors.Is(err, redlock.ErrLimitMismatch))

	// DoSemaphore holds a permit while fn runs, extending it as Do does.
	_ = p.Release(ctx)
	err = client.DoSemaphore(ctx, "reports", 3, time.Minute, func(ctx context.Context) error {
		fmt.Println("building a report")
		return nil
	})
	fmt.Println("done:", err)
	// Output:
	// a fourth: true
	// after a release: true true
	// limit 4: true
	// building a report
	// done: <nil>
}

// A read-write lock lets many readers in at once, or one writer alone.
func ExampleClient_RWMutex() {
	addrs, stop := startNodes(3)
	defer stop()
	client, _ := redlock.New(redlock.NewNodes(addrs...), &redlock.Options{NodeTimeout: time.Second})
	defer client.Close()
	ctx := context.Background()

	prices := client.RWMutex("prices")
	r1, _ := prices.RLock(ctx, time.Minute)
	r2, err := prices.RLock(ctx, time.Minute)
	fmt.Println("two readers:", err == nil)

	_, err = prices.TryLock(ctx, time.Minute)
	fmt.Println("writer while reading:", errors.Is(err, redlock.ErrNotObtained))

	_ = r1.Unlock(ctx)
	_ = r2.Unlock(ctx)
	w, err := prices.Lock(ctx, time.Minute)
	fmt.Println("writer alone:", err == nil)
	_, err = prices.TryRLock(ctx, time.Minute)
	fmt.Println("reader while writing:", errors.Is(err, redlock.ErrNotObtained))
	_ = w.Unlock(ctx)
	// Output:
	// two readers: true
	// writer while reading: true
	// writer alone: true
	// reader while writing: true
}

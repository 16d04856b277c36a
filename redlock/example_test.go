package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redquorum/redquorum/locktest"
	"github.com/redquorum/redquorum/redlock"
)

// startNodes starts n independent Redis masters for the examples: local
// redis-server processes (see [locktest.New]), which must be on PATH.
func startNodes(n int) (addrs []string, stop func()) {
	c := startCluster(n)
	return c.Addrs(), c.Close
}

// startCluster is startNodes that returns the nodes, for examples that
// crash one or cut it off.
func startCluster(n int) *locktest.Cluster {
	c, err := locktest.New(context.Background(), n)
	if err != nil {
		panic(err) // redis-server is not installed: see scripts/ensure-redis-server.sh
	}
	return c
}

func Example() {
	addrs, stop := startNodes(5)
	defer stop()

	nodes := redlock.NewNodes(addrs...) // or your own go-redis clients: New locks through clients made from their options
	client, err := redlock.New(nodes, &redlock.Options{
		NodeTimeout: time.Second, // generous for a loaded test machine; the default suits most deployments
	})
	if err != nil {
		panic(err)
	}
	defer client.Close()

	ctx := context.Background()
	lock, err := client.Lock(ctx, "stock:42", 10*time.Second)
	if err != nil {
		fmt.Println("not obtained:", err)
		return
	}
	// The critical section must end before lock.Until().
	fmt.Println("locked", lock.Key(), "valid for about 10s:", time.Until(lock.Until()) > 9*time.Second)

	if err := lock.Unlock(ctx); err != nil {
		fmt.Println("unlock:", err)
	}
	fmt.Println("unlocked")
	// Output:
	// locked stock:42 valid for about 10s: true
	// unlocked
}

func ExampleClient_TryLock() {
	addrs, stop := startNodes(3)
	defer stop()
	client, _ := redlock.New(redlock.NewNodes(addrs...), &redlock.Options{NodeTimeout: time.Second})
	defer client.Close()
	ctx := context.Background()

	first, _ := client.TryLock(ctx, "job", time.Minute)
	_, err := client.TryLock(ctx, "job", time.Minute)
	fmt.Println(errors.Is(err, redlock.ErrNotObtained), errors.Is(err, redlock.ErrTaken))

	var e *redlock.Error
	if errors.As(err, &e) {
		fmt.Printf("%s: %d of %d nodes granted, %d needed\n", e.Op, e.OK, len(e.Nodes), e.Quorum)
	}
	_ = first.Unlock(ctx)
	// Output:
	// true true
	// lock: 0 of 3 nodes granted, 2 needed
}

func ExampleLock_Extend() {
	addrs, stop := startNodes(3)
	defer stop()
	client, _ := redlock.New(redlock.NewNodes(addrs...), &redlock.Options{NodeTimeout: time.Second})
	defer client.Close()
	ctx := context.Background()

	lock, _ := client.Lock(ctx, "report", 2*time.Second)
	before := lock.Until()
	if err := lock.Extend(ctx, time.Minute); err != nil {
		fmt.Println("lost the lock:", errors.Is(err, redlock.ErrNotHeld))
		return
	}
	fmt.Println("extended:", lock.Until().After(before.Add(50*time.Second)))
	_ = lock.Unlock(ctx)
	// Output:
	// extended: true
}

// A job scheduled on several machines, which must run once per schedule:
// with Try, the machines that find the lock taken skip the job instead of
// running it after the first. fn finds the lock with LockFrom.
func ExampleClient_Do_try() {
	addrs, stop := startNodes(3)
	defer stop()
	client, _ := redlock.New(redlock.NewNodes(addrs...), &redlock.Options{NodeTimeout: time.Second})
	defer client.Close()
	ctx := context.Background()
	batch := func(ctx context.Context) error {
		fmt.Println("running", redlock.LockFrom(ctx).Key())
		return nil
	}

	other, _ := client.TryLock(ctx, "batch:2026-11-25", time.Minute) // another machine runs it
	err := client.Do(ctx, "batch:2026-11-25", time.Minute, batch, redlock.DoOptions{Try: true})
	fmt.Println("skipped:", errors.Is(err, redlock.ErrNotObtained))
	_ = other.Unlock(ctx)

	err = client.Do(ctx, "batch:2026-11-26", time.Minute, batch, redlock.DoOptions{Try: true})
	fmt.Println("error:", err)
	// Output:
	// skipped: true
	// running batch:2026-11-26
	// error: <nil>
}

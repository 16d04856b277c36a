package redlock_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/redquorum/redquorum/redlock"
)

// Example_quickStart is the quick start of the README, on local nodes.
// Apart from where the addresses come from, its body is the README's code.
func Example_quickStart() {
	addrs, stop := startNodes(5)
	defer stop()

	client, err := redlock.Open(addrs, nil) // nil: the documented defaults
	if err != nil {
		log.Fatal(err) // a bad address or option; nothing is open yet
	}
	defer client.Close() // releases locks still held, closes the node clients

	ctx := context.Background()
	lock, err := client.Lock(ctx, "stock:42", 10*time.Second)
	if err != nil {
		log.Print(err) // one line; errors.Is(err, redlock.ErrNotObtained)
		return
	}
	defer lock.Unlock(ctx)

	// Work on stock 42 here. It must end before lock.Until(), or call
	// lock.Extend(ctx, ttl) to keep the lock longer.
	fmt.Println("locked", lock.Key())
	// Output:
	// locked stock:42
}

// ExampleClient_Do is the README's snippet for Client.Do.
func ExampleClient_Do() {
	addrs, stop := startNodes(5)
	defer stop()
	client, err := redlock.Open(addrs, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	ctx := context.Background()
	writeReport := func(ctx context.Context) error {
		fmt.Println("writing the report")
		return ctx.Err()
	}

	err = client.Do(ctx, "report:2026-11", 10*time.Second, func(ctx context.Context) error {
		// The lock is extended about every 3 s while this runs. ctx is
		// cancelled, with context.Cause(ctx) == redlock.ErrLockLost, as soon
		// as the lock can no longer be shown to be held: stop then.
		return writeReport(ctx)
	})
	// err is writeReport's error, joined with redlock.ErrLockLost if the
	// lock was lost, or Lock's error if it was never obtained.
	fmt.Println("done:", err)
	// Output:
	// writing the report
	// done: <nil>
}

package redlock_test

import (
	"context"
	"fmt"
	"time"

	"github.com/redquorum/redquorum/redlock"
)

// A scheduler that must run in one instance at a time: each instance
// campaigns, the leader works while Done is open and fences its writes
// with its term, and a resign hands the election over at once.
func ExampleElection() {
	addrs, stop := startNodes(3)
	defer stop()
	open := func(owner string) *redlock.Client {
		c, err := redlock.Open(addrs, &redlock.Options{
			Owner:       owner,
			NodeTimeout: time.Second, // generous for a loaded test machine
		})
		if err != nil {
			panic(err)
		}
		return c
	}
	a, b := open("instance-a"), open("instance-b")
	defer a.Close()
	defer b.Close()
	ctx := context.Background()

	lead, err := a.Election("scheduler").Campaign(ctx, "instance-a v1", 10*time.Second)
	if err != nil {
		panic(err)
	}
	info, _ := b.Election("scheduler").Leader(ctx)
	fmt.Printf("leader %s: %q\n", info.Owner, info.Value)

	next := make(chan *redlock.Leadership)
	go func() {
		l, err := b.Election("scheduler").Campaign(ctx, "instance-b v1", 10*time.Second)
		if err != nil {
			panic(err)
		}
		next <- l
	}()

	select {
	case <-lead.Done():
		fmt.Println("lost the lead") // stop working: a newer term may be at work
	default:
		// Work here, passing lead.Term() with every write.
	}
	if err := lead.Proclaim(ctx, "instance-a v2"); err != nil {
		panic(err)
	}
	info, _ = b.Election("scheduler").Leader(ctx)
	fmt.Printf("leader %s: %q, same term: %v\n", info.Owner, info.Value, info.Term == lead.Term())

	if err := lead.Resign(ctx); err != nil {
		panic(err)
	}
	lb := <-next
	fmt.Println("instance-b leads; its term is higher:", lb.Term() > lead.Term())
	_ = lb.Resign(ctx)
	// Output:
	// leader instance-a: "instance-a v1"
	// leader instance-a: "instance-a v2", same term: true
	// instance-b leads; its term is higher: true
}

package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redquorum/redquorum/redlock"
)

func ExampleClient_LockMany() {
	addrs, stop := startNodes(5)
	defer stop()
	client, _ := redlock.New(redlock.NewNodes(addrs...), &redlock.Options{NodeTimeout: time.Second})
	defer client.Close()
	ctx := context.Background()

	// Both keys or neither. The shared hash tag {order:42} is needed only
	// when a node is a Redis Cluster, but does no harm elsewhere.
	lock, err := client.LockMany(ctx, []string{"{order:42}:stock", "{order:42}:payment"}, 10*time.Second)
	if err != nil {
		fmt.Println("not obtained:", err)
		return
	}
	fmt.Println("locked", lock.Keys())

	_, err = client.TryLock(ctx, "{order:42}:payment", 10*time.Second)
	fmt.Println("payment alone:", errors.Is(err, redlock.ErrTaken))

	_ = lock.Unlock(ctx)
	_, err = client.TryLockMany(ctx, []string{"{order:42}:payment", "{order:42}:stock", "{order:42}:payment"}, time.Second)
	fmt.Println(err)
	// Output:
	// locked [{order:42}:stock {order:42}:payment]
	// payment alone: true
	// redlock: keys[2] "{order:42}:payment" is the same as keys[0]
}

// account is a resource that checks fences: it refuses a write whose fence
// is lower than one it has already accepted.
type account struct {
	mu      sync.Mutex
	fence   uint64
	balance int
}

func (a *account) set(fence uint64, balance int) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if fence < a.fence {
		return errors.New("fence below the last accepted: stale lock holder")
	}
	a.fence, a.balance = fence, balance
	return nil
}

func ExampleLock_Fence() {
	addrs, stop := startNodes(5)
	defer stop()
	client, _ := redlock.New(redlock.NewNodes(addrs...), &redlock.Options{Fencing: true, NodeTimeout: time.Second})
	defer client.Close()
	ctx := context.Background()
	var acct account

	// A new deployment's fences start at the nodes' time in microseconds.
	a, _ := client.Lock(ctx, "account:7", 300*time.Millisecond)
	fmt.Println("A holds a fence:", a.Fence() > 0)
	balance := 100 // A reads the balance, then stalls (GC, swap, a paused VM) past its validity.
	time.Sleep(time.Until(a.Until()) + 50*time.Millisecond)

	b, _ := client.Lock(ctx, "account:7", time.Second)
	fmt.Println("B's fence is above A's:", b.Fence() > a.Fence())
	fmt.Println("B writes:", acct.set(b.Fence(), 50))

	// A wakes up and writes what it computed before the pause.
	fmt.Println("A writes:", acct.set(a.Fence(), balance+10))
	fmt.Println("balance", acct.balance)
	_ = b.Unlock(ctx)
	// Output:
	// A holds a fence: true
	// B's fence is above A's: true
	// B writes: <nil>
	// A writes: fence below the last accepted: stale lock holder
	// balance 50
}

// Example_restartGuard shows the node-crash scenario: A holds a lock on two
// of three nodes, one of them restarts without its data, and B asks. The
// restarted node has forgotten A's lock; its restart guard keeps it from
// granting the lock to B while A's may still be valid.
func Example_restartGuard() {
	cluster := startCluster(3)
	defer cluster.Close()
	ctx := context.Background()
	opts := &redlock.Options{RestartGuard: 30 * time.Second, NodeTimeout: time.Second}
	// On new nodes the first round finds all of them new and locks at once:
	// no waiting after a fresh deployment.
	deploy, _ := redlock.Open(cluster.Addrs(), opts)
	first, err := deploy.TryLock(ctx, "warm-up", time.Second)
	fmt.Println("first lock:", err)
	_ = first.Unlock(ctx)
	// TryLock and Unlock return once a quorum answered; Close waits for the
	// other requests too. So every node has seen the first round.
	_ = deploy.Close()

	// A reaches the nodes through links of its own, so that node 2 can be
	// cut off from A alone.
	viewA, linksA, _ := cluster.View()
	clientA, _ := redlock.New(redlock.NewNodes(viewA...), opts)
	defer clientA.Close()
	linksA[2].Partition() // node 2 is unreachable from A while A locks
	a, err := clientA.TryLock(ctx, "job", 10*time.Second)
	fmt.Println("A:", err)

	_ = cluster.Nodes[0].Restart(ctx, false) // node 0 restarts without persistence
	clientB, _ := redlock.New(redlock.NewNodes(cluster.Addrs()...), opts)
	defer clientB.Close()
	_, err = clientB.TryLock(ctx, "job", 10*time.Second)
	var e *redlock.Error
	if errors.As(err, &e) {
		fmt.Println("B: node 0 guarded:", errors.Is(e.Nodes[0].Err, redlock.ErrGuarded))
		fmt.Println("B: node 1:", e.Nodes[1].Err)
	}
	_, err = clientB.TryLock(ctx, "job", time.Minute)
	fmt.Println(err)
	linksA[2].Heal()
	_ = a.Unlock(ctx)
	// Output:
	// first lock: <nil>
	// A: <nil>
	// B: node 0 guarded: true
	// B: node 1: redlock: key held by another owner
	// redlock: ttl 1m0s exceeds Options.RestartGuard 30s: a node that lost its data could grant the lock again while it is held
}

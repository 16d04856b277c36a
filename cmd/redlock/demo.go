package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redquorum/redquorum/internal/protocol"
	"github.com/redquorum/redquorum/internal/retry"
	"github.com/redquorum/redquorum/locktest/loadtest"
	"github.com/redquorum/redquorum/redlock"
)

// demo plays the oversell scenario. Buyers check the stock, pay, and write
// the stock back. Without a lock, concurrent buyers sell the same item.
func demo(ctx context.Context, args []string, out io.Writer) error {
	fs := newFlags("demo", "[--nodes NODE,...] [--stock N] [--buyers N] [--servers N]", out)
	nodesFlag := fs.String("nodes", "", nodesUsage+" to use instead of five in-process nodes")
	stock := fs.Int("stock", 10, "items in stock")
	buyers := fs.Int("buyers", 40, "buyers arriving at the same moment")
	servers := fs.Int("servers", 4, "app servers (one redlock Client each) the buyers are spread over")
	pay := fs.Duration("pay", 2*time.Millisecond, "time a buyer takes to pay, between reading and writing the stock")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("unexpected argument %q", pos[0])
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"stock", *stock}, {"buyers", *buyers}, {"servers", *servers}} {
		if f.v < 1 {
			return usagef("--%s %d: must be at least 1", f.name, f.v)
		}
	}
	if *pay < 0 {
		return usagef("--pay %v: must not be negative", *pay)
	}

	// The nodes, and a way to take one down half-way.
	var addrs, names []string
	var kill func()
	nodeTimeout := time.Duration(0) // the default, for real masters
	killed := 2                     // the node that goes down
	if *nodesFlag == "" {
		srvs, a, err := embedded(embeddedNodes)
		if err != nil {
			return err
		}
		defer stopAll(srvs)
		addrs, names, kill = a, a, srvs[killed].Close
		// In-process nodes run Lua in an interpreter that shares this
		// process's two cores with forty buyers: give them time.
		nodeTimeout = time.Second
		fmt.Fprintf(out, "Started %d in-process Redis nodes: %s\n", len(addrs), strings.Join(addrs, " "))
	} else {
		if addrs, names, err = parseNodes(*nodesFlag); err != nil {
			return err
		}
		killed = len(addrs) / 2
		nodes, err := dialNodes(ctx, addrs, names) // fail early, with one line, on an unreachable node
		if err != nil {
			return err
		}
		closeNodes(nodes)
		// A real master is not ours to crash: the demo reaches this one
		// through a proxy and cuts the proxy instead.
		p, via, err := loadtest.ProxyNode(addrs[killed])
		if err != nil {
			return err
		}
		defer p.Close()
		addrs, names = slices.Clone(addrs), slices.Clone(names)
		shown := names[killed]
		addrs[killed], names[killed] = via, p.Addr()
		kill = func() { p.SetTarget(""); p.Cut() }
		fmt.Fprintf(out, "Using %d Redis masters: %s (node %s through a local proxy, so the demo can cut it off)\n", len(addrs), strings.Join(names, " "), shown)
	}
	prefix := "redquorum-demo:" + retry.Token() + ":" // this run's keys
	clients := make([]*redlock.Client, *servers)
	var nodeSets [][]redis.UniversalClient
	for i := range clients {
		nodes, err := dialNodes(ctx, addrs, names)
		if err != nil {
			return err
		}
		nodeSets = append(nodeSets, nodes)
		defer closeNodes(nodes)
		if clients[i], err = redlock.New(nodes, &redlock.Options{KeyPrefix: prefix, NodeTimeout: nodeTimeout}); err != nil {
			return err
		}
		defer clients[i].Close()
	}
	quorum := len(addrs)/2 + 1
	fmt.Fprintf(out, "A shop has %d items in stock. %d buyers arrive at once, served by %d app servers.\n", *stock, *buyers, *servers)
	fmt.Fprintf(out, "Each buyer reads the stock, pays (%v), then writes the stock minus one.\n\n", *pay)

	// 1. No lock.
	s := &shop{stock: *stock, pay: *pay}
	everyone(*buyers, func(int) { s.buy() })
	sold := int(s.sold.Load())
	fmt.Fprintf(out, "1) Without a lock\n   %d items sold from a stock of %d", sold, *stock)
	if over := sold - *stock; over > 0 {
		fmt.Fprintf(out, ": OVERSOLD by %d. Buyers read the same stock before anyone wrote it back.\n\n", over)
	} else {
		fmt.Fprintf(out, ". (No oversell this time: the buyers did not overlap. Try more --buyers.)\n\n")
	}

	// 2. With the lock.
	s = &shop{stock: *stock, pay: *pay}
	var (
		waits    = make([]time.Duration, *buyers)
		failures atomic.Int64
		firstErr atomic.Value
		once     sync.Once
	)
	fmt.Fprintf(out, "2) With redquorum: each buyer takes the lock \"stock\" on a majority (%d of %d) of the nodes first\n", quorum, len(addrs))
	everyone(*buyers, func(b int) {
		t0 := time.Now()
		l, err := clients[b%len(clients)].Lock(ctx, "stock", 10*time.Second)
		waits[b] = time.Since(t0)
		if err != nil {
			failures.Add(1)
			firstErr.CompareAndSwap(nil, err.Error())
			return
		}
		if s.buy() && int(s.sold.Load()) == (*stock+1)/2 {
			once.Do(func() {
				kill()
				fmt.Fprintf(out, "   ... %d sold: node %d of %d goes down. %d nodes remain, %d are needed.\n", s.sold.Load(), killed+1, len(addrs), len(addrs)-1, quorum)
			})
		}
		_ = l.Unlock(ctx)
	})
	sold = int(s.sold.Load())
	slices.Sort(waits)
	fmt.Fprintf(out, "   %d items sold from a stock of %d", sold, *stock)
	if sold == *stock {
		fmt.Fprintf(out, ": exactly right. %d buyers were told it is sold out.\n", *buyers-sold-int(failures.Load()))
	} else {
		fmt.Fprintf(out, ": WRONG.\n")
	}
	fmt.Fprintf(out, "   Time to get the lock: median %s, slowest %s.\n", loadtest.Ms(waits[len(waits)/2]), loadtest.Ms(waits[len(waits)-1]))
	for _, c := range clients {
		_ = c.Close() // waits for the releases still in flight
	}
	left := 0
	for _, n := range nodeSets[0] {
		keys, _ := n.Keys(ctx, prefix+"*").Result()
		for _, k := range keys {
			if reserved(prefix, k) { // the node's own state, or a line of waiters
				continue
			}
			v, err := n.Get(ctx, k).Result()
			if errors.Is(err, redis.Nil) || strings.HasPrefix(v, protocol.TombstonePrefix) {
				continue // gone meanwhile, or a tombstone: it holds no lock and expires by itself
			}
			left++
		}
	}
	fmt.Fprintf(out, "   Lock keys left on the nodes that are up: %d.\n", left)
	switch {
	case failures.Load() > 0:
		return fmt.Errorf("%d buyers could not get the lock: %v", failures.Load(), firstErr.Load())
	case sold != *stock:
		return fmt.Errorf("sold %d items from a stock of %d with the lock", sold, *stock)
	}
	return nil
}

// shop is the shared resource: a stock count read and written in two steps.
// It models a service that loads a row, calls a payment provider and saves
// it.
type shop struct {
	mu    sync.Mutex // makes each read and each write atomic, not the pair
	stock int
	pay   time.Duration
	sold  atomic.Int64
}

// buy sells one item if the stock read says there is one.
func (s *shop) buy() bool {
	s.mu.Lock()
	n := s.stock
	s.mu.Unlock()
	if n <= 0 {
		return false
	}
	time.Sleep(s.pay)
	s.mu.Lock()
	s.stock = n - 1
	s.mu.Unlock()
	s.sold.Add(1)
	return true
}

// everyone runs f(0..n-1) in n goroutines released at the same moment and
// waits for them.
func everyone(n int, f func(int)) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			f(i)
		})
	}
	close(start)
	wg.Wait()
}

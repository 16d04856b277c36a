package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/redquorum/redquorum/internal/testkit/faultproxy"
	"github.com/redquorum/redquorum/internal/testkit/redisproc"
	"github.com/redquorum/redquorum/redlock"
)

// electionFailover measures how long an election goes without a leader:
// runs times after the leader resigns, and runs times after the leader's
// process dies, cut off from every node at a random moment of its
// extension cycle, so that it neither extends nor releases its lock. Each
// time, a candidate of another Client is already campaigning, and the
// figure is from the resign or the cut to the candidate's Campaign
// returning. It prints p50, p99 and the largest of each, with ttl.
func electionFailover(ctx context.Context, nodes, runs int, ttl time.Duration) error {
	srv, err := redisproc.Start(ctx, nodes)
	if err != nil {
		return err
	}
	defer srv.Stop()
	var paddrs []string
	var proxies []*faultproxy.Proxy
	for _, a := range srv.Addrs {
		p, err := faultproxy.NewProxy(a)
		if err != nil {
			return err
		}
		defer p.Close()
		proxies, paddrs = append(proxies, p), append(paddrs, p.Addr())
	}
	leader, err := redlock.Open(paddrs, &redlock.Options{Fencing: true, Owner: "leader"})
	if err != nil {
		return err
	}
	defer leader.Close()
	candidate, err := redlock.Open(srv.Addrs, &redlock.Options{Fencing: true, Owner: "candidate"})
	if err != nil {
		return err
	}
	defer candidate.Close()

	var resigned, died []time.Duration
	failed := 0 // resigns that did not release: their candidate waited for the TTL
	for i := range 2 * runs {
		die := i%2 == 1
		d, err := handover(ctx, leader, candidate, proxies, ttl, die)
		switch {
		case errors.Is(err, errResign):
			failed++
			fmt.Println("  (left out)", err)
			continue
		case err != nil:
			return err
		}
		if die {
			died = append(died, d)
		} else {
			resigned = append(resigned, d)
		}
	}
	fmt.Printf("election failover, %d redis-server %s on 127.0.0.1, ttl %v, %d runs each, %d resigns that failed left out:\n", nodes, srv.Version, ttl, runs, failed)
	for _, f := range []struct {
		what string
		ds   []time.Duration
	}{{"after a resign", resigned}, {"after the leader's process died", died}} {
		slices.Sort(f.ds)
		fmt.Printf("  %-32s p50 %v  p99 %v  max %v\n", f.what, pct(f.ds, 50), pct(f.ds, 99), f.ds[len(f.ds)-1])
	}
	return nil
}

// handover makes leader lead, starts candidate campaigning, and after a
// random part of ttl resigns the leader or, when die is set, cuts it off
// from every node. It returns the time from then until the candidate
// leads, and leaves the election without a leader.
func handover(ctx context.Context, leader, candidate *redlock.Client, proxies []*faultproxy.Proxy, ttl time.Duration, die bool) (time.Duration, error) {
	lead, err := leader.Election("bench").Campaign(ctx, "leader", ttl)
	if err != nil {
		return 0, fmt.Errorf("leader's campaign: %w", err)
	}
	got := make(chan error, 1)
	var next *redlock.Leadership
	go func() {
		var err error
		next, err = candidate.Election("bench").Campaign(ctx, "candidate", ttl)
		got <- err
	}()
	time.Sleep(ttl/4 + rand.N(ttl*3/4)) // the candidate waits; the leader is anywhere in its extension cycle
	start := time.Now()
	if die {
		for _, p := range proxies {
			p.Partition()
		}
	}
	var resignErr error
	if !die {
		if err := lead.Resign(ctx); err != nil {
			resignErr = fmt.Errorf("%w: %w", errResign, err)
		}
	}
	if err := <-got; err != nil {
		return 0, fmt.Errorf("candidate's campaign: %w", err)
	}
	d := time.Since(start)
	if die {
		<-lead.Done() // its validity ran out
		for _, p := range proxies {
			p.Heal()
		}
		_ = lead.Resign(ctx) // stops its extensions; the lock is gone
	}
	if next.Resign(ctx) != nil {
		time.Sleep(ttl) // the candidate's lock expires
	}
	return d, resignErr
}

// errResign marks a resign that failed, whose run is left out.
var errResign = errors.New("resign failed")

// pct returns the p-th percentile of sorted ds.
func pct(ds []time.Duration, p int) time.Duration {
	return ds[min(len(ds)-1, len(ds)*p/100)].Round(10 * time.Microsecond)
}

package main

import (
	"testing"
	"time"

	"github.com/redquorum/redquorum/internal/testkit/redisproc"
)

// BenchmarkLockUnlock measures one lock+unlock by one caller through each
// library, and through redquorum on node clients built with go-redis's
// defaults (redquorum-user) with each waiting strategy, on the same five
// redis-server processes:
//
//	cd bench && go test -run - -bench . -benchmem
func BenchmarkLockUnlock(b *testing.B) {
	srv, err := redisproc.Start(b.Context(), 5)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(srv.Stop)
	impls, err := implsNamed(allImpls(nil), []string{"redsync", "redquorum", "redquorum-user", "redquorum-user-backoff", "redquorum-user-inline"})
	if err != nil {
		b.Fatal(err)
	}
	for _, impl := range impls {
		b.Run(impl.Name, func(b *testing.B) {
			l, closeFn, err := impl.New(srv.Addrs)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(closeFn)
			ctx := b.Context()
			b.ReportAllocs()
			for b.Loop() {
				u, err := l.Lock(ctx, "bench", 10*time.Second)
				if err != nil {
					b.Fatal(err)
				}
				if err := u.Unlock(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

package redlockprom_test

import (
	"context"
	"log"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	redlockprom "github.com/redquorum/redquorum/contrib/prometheus"
	"github.com/redquorum/redquorum/redlock"
)

// Export a Client's metrics at /metrics, with a key label bounded to the
// kind of key (the part before the first ":").
func Example() {
	metrics := redlockprom.New(&redlockprom.Options{
		KeyLabel: func(key string) string { kind, _, _ := strings.Cut(key, ":"); return kind },
	})
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics)

	addrs := []string{"redis-a:6379", "redis-b:6379", "redis-c:6379"}
	client, err := redlock.Open(addrs, &redlock.Options{Observer: metrics.Observer()})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	go func() { log.Print(http.ListenAndServe("127.0.0.1:9100", nil)) }()

	err = client.Do(context.Background(), "report:2026-11", 10*time.Second, func(ctx context.Context) error {
		return nil // the work under the lock
	})
	if err != nil {
		log.Print(err)
	}
}

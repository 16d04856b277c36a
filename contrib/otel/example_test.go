package redlockotel_test

import (
	"context"
	"log"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	redlockotel "github.com/redquorum/redquorum/contrib/otel"
	"github.com/redquorum/redquorum/redlock"
)

// Trace and measure a Client with the providers of your OpenTelemetry SDK
// setup (nil Options use the global ones).
func Example() {
	tp := sdktrace.NewTracerProvider() // with your exporter: sdktrace.WithBatcher(exp)
	defer tp.Shutdown(context.Background())
	mp := sdkmetric.NewMeterProvider() // with your reader: sdkmetric.WithReader(r)
	defer mp.Shutdown(context.Background())

	obs, err := redlockotel.New(&redlockotel.Options{TracerProvider: tp, MeterProvider: mp})
	if err != nil {
		log.Fatal(err)
	}
	addrs := []string{"redis-a:6379", "redis-b:6379", "redis-c:6379"}
	client, err := redlock.Open(addrs, &redlock.Options{Observer: obs})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	// The span redlock.Lock is a child of the span in ctx, if any.
	ctx := context.Background()
	lock, err := client.Lock(ctx, "stock:42", 10*time.Second)
	if err != nil {
		log.Print(err)
		return
	}
	defer lock.Unlock(ctx)
}

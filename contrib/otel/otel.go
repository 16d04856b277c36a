// Package redlockotel traces and measures what a [redlock.Client] does
// through OpenTelemetry. It is a module of its own, so that the redquorum
// module does not depend on OpenTelemetry.
//
//	obs, err := redlockotel.New(nil) // the global tracer and meter providers
//	if err != nil { ... }
//	client, err := redlock.Open(addrs, &redlock.Options{Observer: obs})
//
// Traces: a span per Lock, TryLock, LockMany, TryLockMany, Extend, Unlock and
// Do (named "redlock.Lock" and so on), a child of the span in the caller's
// context; the spans of Do's Lock, Extend and Unlock are children of Do's,
// and the node requests run under the operation's span (so go-redis's own
// instrumentation nests there). Attributes: redlock.key (the first key),
// redlock.keys (LockMany), redlock.outcome, redlock.rounds,
// redlock.votes (nodes that granted in the last round), redlock.waited
// (seconds, Lock), redlock.held (seconds, Unlock and Do). An event "round"
// per round, at its start, gives its votes and each node's outcome and
// latency; Do's span has an event per extension and one for a loss; a span
// during which a node changed state has an event for it. A failed
// operation records its error and sets the span's status to Error.
//
// Metrics: the same as the Prometheus adapter
// (github.com/redquorum/redquorum/contrib/prometheus), named in the
// OpenTelemetry way; an OpenTelemetry Prometheus exporter turns them into
// the same names: redquorum.operations (redquorum_operations_total),
// redquorum.lock.wait and redquorum.lock.hold (histograms in seconds),
// redquorum.node.latency (seconds, by node and request),
// redquorum.locks.held, redquorum.node.guarded and
// redquorum.node.unreachable (up-down counters),
// redquorum.node.established (by node) and redquorum.do.extensions. No metric carries the key unless
// Options.KeyLabel maps keys to a bounded set.
package redlockotel

import (
	"context"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/redquorum/redquorum/redlock"
)

// ScopeName is the instrumentation scope of the tracer and the meter.
const ScopeName = "github.com/redquorum/redquorum/contrib/otel"

// Options configures the adapter. A nil *Options means the defaults.
type Options struct {
	// TracerProvider makes the spans; nil means otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
	// MeterProvider makes the metrics; nil means otel.GetMeterProvider().
	MeterProvider metric.MeterProvider
	// KeyLabel, when set, adds the attribute "key" to the metrics
	// redquorum.operations, redquorum.lock.wait and redquorum.lock.hold,
	// with the value it returns for the operation's first key: return
	// values from a small fixed set. Spans always carry the key.
	KeyLabel func(key string) string
	// Buckets are the bounds of the duration histograms, in seconds. Nil
	// means the Prometheus adapter's DefaultBuckets.
	Buckets []float64
}

// defaultBuckets are those of the Prometheus adapter.
func defaultBuckets() []float64 {
	return []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}
}

// instruments are the adapter's tracer and metrics.
type instruments struct {
	tracer     trace.Tracer
	keyLabel   func(string) string
	ops        metric.Int64Counter
	wait       metric.Float64Histogram
	hold       metric.Float64Histogram
	latency    metric.Float64Histogram
	held       metric.Int64UpDownCounter
	guarded    metric.Int64UpDownCounter
	unreach    metric.Int64UpDownCounter
	est        metric.Int64Counter
	extensions metric.Int64Counter
}

// New returns the hooks that trace and measure a Client, for
// redlock.Options.Observer. Several Clients may share them. It fails only
// when the meter refuses an instrument.
func New(opts *Options) (*redlock.Observer, error) {
	if opts == nil {
		opts = &Options{}
	}
	tp, mp := opts.TracerProvider, opts.MeterProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	buckets := opts.Buckets
	if buckets == nil {
		buckets = defaultBuckets()
	}
	in := &instruments{tracer: tp.Tracer(ScopeName), keyLabel: opts.KeyLabel}
	if err := in.meters(mp.Meter(ScopeName), buckets); err != nil {
		return nil, err
	}
	return &redlock.Observer{Begin: in.begin, End: in.end, Do: in.do, Node: in.node}, nil
}

// meters makes the metric instruments.
func (in *instruments) meters(m metric.Meter, buckets []float64) error {
	var err error
	seconds := func(name, desc string) metric.Float64Histogram {
		var h metric.Float64Histogram
		if err == nil {
			h, err = m.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc), metric.WithExplicitBucketBoundaries(buckets...))
		}
		return h
	}
	updown := func(name, unit, desc string) metric.Int64UpDownCounter {
		var c metric.Int64UpDownCounter
		if err == nil {
			c, err = m.Int64UpDownCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		}
		return c
	}
	in.wait = seconds("redquorum.lock.wait", "Time Lock, TryLock, LockMany and TryLockMany took to obtain the lock or give up.")
	in.hold = seconds("redquorum.lock.hold", "Time locks were held, from the round that obtained them to their Unlock.")
	in.latency = seconds("redquorum.node.latency", "Time each node took to answer a request of a round, by request: acquire, extend or release.")
	in.held = updown("redquorum.locks.held", "{lock}", "Locks obtained and not yet unlocked.")
	in.guarded = updown("redquorum.node.guarded", "{client}", "Observed clients that see the node in its restart guard.")
	in.unreach = updown("redquorum.node.unreachable", "{client}", "Observed clients that see the node unreachable.")
	if err != nil {
		return err
	}
	if in.est, err = m.Int64Counter("redquorum.node.established", metric.WithUnit("{node}"),
		metric.WithDescription("Nodes of a brand-new deployment that an observed client established.")); err != nil {
		return err
	}
	if in.ops, err = m.Int64Counter("redquorum.operations", metric.WithUnit("{operation}"),
		metric.WithDescription("Lock, TryLock, LockMany, TryLockMany, Extend, Unlock and Do calls, by operation and outcome.")); err != nil {
		return err
	}
	in.extensions, err = m.Int64Counter("redquorum.do.extensions", metric.WithUnit("{extension}"),
		metric.WithDescription("Extensions that Do made while its function ran."))
	return err
}

// spanKey marks, in a context, the span that begin started, so that end
// never ends a span it did not start.
type spanKey struct{}

// spanNames are the span names of the operations.
func spanName(op redlock.Op) string {
	switch op {
	case redlock.OpLock:
		return "redlock.Lock"
	case redlock.OpTryLock:
		return "redlock.TryLock"
	case redlock.OpLockMany:
		return "redlock.LockMany"
	case redlock.OpTryLockMany:
		return "redlock.TryLockMany"
	case redlock.OpExtend:
		return "redlock.Extend"
	case redlock.OpUnlock:
		return "redlock.Unlock"
	case redlock.OpDo:
		return "redlock.Do"
	}
	return "redlock." + string(op)
}

func (in *instruments) begin(ctx context.Context, op redlock.Op, keys []string) context.Context {
	attrs := []attribute.KeyValue{attribute.String("redlock.op", string(op))}
	if len(keys) > 0 {
		attrs = append(attrs, attribute.String("redlock.key", keys[0]))
	}
	if len(keys) > 1 {
		attrs = append(attrs, attribute.StringSlice("redlock.keys", keys))
	}
	ctx, span := in.tracer.Start(ctx, spanName(op), trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...))
	return context.WithValue(ctx, spanKey{}, span)
}

// ours returns the span that begin started for the operation of ctx.
func ours(ctx context.Context) (trace.Span, bool) {
	s, ok := ctx.Value(spanKey{}).(trace.Span)
	return s, ok
}

func (in *instruments) end(ctx context.Context, e redlock.Event) {
	in.measure(ctx, e)
	span, ok := ours(ctx)
	if !ok {
		return
	}
	attrs := []attribute.KeyValue{
		attribute.String("redlock.outcome", string(e.Outcome)),
		attribute.Int("redlock.rounds", len(e.Rounds)),
	}
	if n := len(e.Rounds); n > 0 {
		attrs = append(attrs, attribute.Int("redlock.votes", e.Rounds[n-1].Granted))
	}
	if e.Op == redlock.OpLock || e.Op == redlock.OpLockMany {
		attrs = append(attrs, attribute.Float64("redlock.waited", e.Waited.Seconds()))
	}
	if e.Ended {
		attrs = append(attrs, attribute.Float64("redlock.held", e.Held.Seconds()))
	}
	span.SetAttributes(attrs...)
	begun := time.Now().Add(-e.Duration) // the rounds' times are on the Client's clock, which may be a fake
	for i, r := range e.Rounds {
		span.AddEvent("round", trace.WithTimestamp(begun.Add(r.Start.Sub(e.Start))), trace.WithAttributes(roundAttrs(i, r)...))
	}
	if e.Err != nil {
		span.RecordError(e.Err)
		span.SetStatus(codes.Error, e.Err.Error())
	}
	span.End()
}

// roundAttrs are the attributes of round i's event.
func roundAttrs(i int, r redlock.Round) []attribute.KeyValue {
	nodes := make([]string, len(r.Nodes))
	outcomes := make([]string, len(r.Nodes))
	latencies := make([]float64, len(r.Nodes))
	for j, v := range r.Nodes {
		nodes[j], outcomes[j], latencies[j] = v.Node, string(v.Outcome), v.Latency.Seconds()
	}
	return []attribute.KeyValue{
		attribute.Int("redlock.round", i+1),
		attribute.Int("redlock.votes", r.Granted),
		attribute.Float64("redlock.duration", r.Duration.Seconds()),
		attribute.StringSlice("redlock.nodes", nodes),
		attribute.StringSlice("redlock.node.outcomes", outcomes),
		attribute.Float64Slice("redlock.node.latencies", latencies),
	}
}

// measure records e in the metrics.
func (in *instruments) measure(ctx context.Context, e redlock.Event) {
	opAttrs := []attribute.KeyValue{attribute.String("op", string(e.Op)), attribute.String("outcome", string(e.Outcome))}
	var keyAttrs []attribute.KeyValue
	if in.keyLabel != nil && len(e.Keys) > 0 {
		keyAttrs = []attribute.KeyValue{attribute.String("key", in.keyLabel(e.Keys[0]))}
		opAttrs = append(opAttrs, keyAttrs...)
	}
	set := metric.WithAttributes(opAttrs...)
	in.ops.Add(ctx, 1, set)
	switch {
	case e.Op.Obtains():
		in.wait.Record(ctx, e.Duration.Seconds(), set)
		if e.Outcome == redlock.Obtained {
			in.held.Add(ctx, 1)
		}
	case e.Op == redlock.OpUnlock:
		if e.Ended {
			in.held.Add(ctx, -1)
			in.hold.Record(ctx, e.Held.Seconds(), metric.WithAttributes(keyAttrs...))
		}
	}
	req := "acquire"
	switch e.Op {
	case redlock.OpExtend:
		req = "extend"
	case redlock.OpUnlock:
		req = "release"
	}
	for _, r := range e.Rounds {
		for _, v := range r.Nodes {
			if v.Outcome.Answered() {
				in.latency.Record(ctx, v.Latency.Seconds(), metric.WithAttributes(attribute.String("node", v.Node), attribute.String("request", req)))
			}
		}
	}
}

func (in *instruments) do(ctx context.Context, e redlock.DoEvent) {
	if e.Outcome == redlock.Extended {
		in.extensions.Add(ctx, 1)
	}
	span, ok := ours(ctx)
	if !ok {
		return
	}
	if e.Outcome == redlock.Extended {
		span.AddEvent("extension", trace.WithAttributes(attribute.Int("redlock.extension", e.Extension)))
		return
	}
	span.AddEvent("lock lost", trace.WithAttributes(attribute.String("redlock.cause", e.Err.Error())))
}

func (in *instruments) node(ctx context.Context, e redlock.NodeEvent) {
	node := metric.WithAttributes(attribute.String("node", e.Node))
	switch e.Change {
	case redlock.GuardEntered:
		in.guarded.Add(ctx, 1, node)
	case redlock.GuardLeft:
		in.guarded.Add(ctx, -1, node)
	case redlock.Unreachable:
		in.unreach.Add(ctx, 1, node)
	case redlock.Reachable:
		in.unreach.Add(ctx, -1, node)
	case redlock.Established:
		in.est.Add(ctx, 1, node)
	}
	if span, ok := ours(ctx); ok {
		attrs := []attribute.KeyValue{attribute.String("redlock.node", e.Node), attribute.String("redlock.change", string(e.Change))}
		if e.Err != nil {
			attrs = append(attrs, attribute.String("redlock.error", e.Err.Error()))
		}
		span.AddEvent("node state", trace.WithAttributes(attrs...))
	}
}

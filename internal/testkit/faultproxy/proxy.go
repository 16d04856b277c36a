// Package faultproxy is an in-process TCP proxy that injects network faults
// (latency, partitions, cut connections) between a client and a server. The
// test rig puts one in front of each Redis node; the redlock command uses it
// to slow one node down in benchmarks.
package faultproxy

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy is a TCP proxy on 127.0.0.1 that forwards each accepted connection to
// a target address and injects network faults: added latency per direction,
// a partition that stalls traffic, and cutting of open connections. It is safe
// for concurrent use. Create it with [NewProxy]; the zero value is not usable.
type Proxy struct {
	ln net.Listener
	wg sync.WaitGroup // the accept loop and one per connection

	mu       sync.Mutex
	target   string        // "" while the node is down
	up, down time.Duration // client→server, server→client
	flowing  chan struct{} // closed while traffic flows; open while partitioned
	links    map[*link]struct{}
	closed   bool
}

// link is one client connection and, once dialled, its server connection.
type link struct {
	ctx    context.Context // done once the link is cut
	cancel context.CancelFunc
	client net.Conn
	mu     sync.Mutex
	server net.Conn
	heldUp atomic.Int32 // chunks read from the client, not yet written to the server
}

// NewProxy listens on a free port of 127.0.0.1 and forwards to target
// (host:port). On failure nothing is left listening.
func NewProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen: %w", err)
	}
	flowing := make(chan struct{})
	close(flowing)
	p := &Proxy{ln: ln, target: target, flowing: flowing, links: map[*link]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr returns the address clients should dial, such as "127.0.0.1:40123".
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetTarget makes new connections go to target; open connections keep their
// server. With target "" new connections are accepted and closed at once, as
// a crashed server would answer.
func (p *Proxy) SetTarget(target string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.target = target
}

// SetLatency delays every byte by up on its way to the server and by down on
// its way back, so a request/response round trip takes at least up+down
// longer. It applies to bytes read from now on, on open and new connections.
func (p *Proxy) SetLatency(up, down time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.up, p.down = up, down
}

// Partition stalls all traffic in both directions, as a network partition
// would: new connections are accepted but not forwarded, bytes on open
// connections are held (not dropped) and a side that closes is not passed on
// until [Proxy.Heal]. Clients see timeouts, never errors.
func (p *Proxy) Partition() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.flowing:
		p.flowing = make(chan struct{})
	default: // already partitioned
	}
}

// Heal ends a partition: held bytes are delivered in order and stalled new
// connections are forwarded. Heal without a partition does nothing.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.flowing:
	default:
		close(p.flowing)
	}
}

// Holding returns how many connections have bytes on their way to the
// server that the proxy has read and holds back, for latency or a partition.
func (p *Proxy) Holding() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for l := range p.links {
		if l.heldUp.Load() > 0 {
			n++
		}
	}
	return n
}

// Cut closes every open connection in both directions, as a connection reset
// would. New connections are accepted as usual.
func (p *Proxy) Cut() {
	p.mu.Lock()
	links := make([]*link, 0, len(p.links))
	for l := range p.links {
		links = append(links, l)
	}
	p.mu.Unlock()
	for _, l := range links {
		l.cut()
	}
}

// Close stops listening, cuts every connection and waits for the proxy's
// goroutines to return. Calling it again does nothing.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	err := p.ln.Close()
	p.Cut()
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		ctx, cancel := context.WithCancel(context.Background())
		l := &link{ctx: ctx, cancel: cancel, client: c}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			l.cut()
			return
		}
		p.links[l] = struct{}{}
		p.wg.Add(1)
		p.mu.Unlock()
		go p.serve(l)
	}
}

// serve forwards one connection until either side closes or the link is cut.
func (p *Proxy) serve(l *link) {
	defer p.wg.Done()
	defer func() {
		l.cut()
		p.mu.Lock()
		delete(p.links, l)
		p.mu.Unlock()
	}()
	if !p.await(l, time.Time{}) { // a partition stalls the connection here
		return
	}
	p.mu.Lock()
	target := p.target
	p.mu.Unlock()
	if target == "" {
		return
	}
	var d net.Dialer
	server, err := d.DialContext(l.ctx, "tcp", target)
	if err != nil || !l.setServer(server) {
		return
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.pipe(l, server, l.client, true)
	}()
	p.pipe(l, l.client, server, false)
	<-done
}

// pipe copies src to dst, holding each chunk for the direction's latency and
// through partitions. It cuts the link when either side fails.
func (p *Proxy) pipe(l *link, dst, src net.Conn, up bool) {
	type chunk struct {
		b  []byte
		at time.Time
	}
	ch := make(chan chunk, 16)
	go func() { // reads ahead so that latency does not limit throughput
		defer close(ch)
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				p.mu.Lock()
				delay := p.down
				if up {
					delay = p.up
				}
				p.mu.Unlock()
				if up {
					l.heldUp.Add(1) // until written or dropped, below
				}
				select {
				case ch <- chunk{slices.Clone(buf[:n]), time.Now().Add(delay)}:
				case <-l.ctx.Done():
					if up {
						l.heldUp.Add(-1)
					}
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	gone := func() { // a chunk written or dropped
		if up {
			l.heldUp.Add(-1)
		}
	}
	for c := range ch {
		if !p.await(l, c.at) {
			gone() // dropped
			break
		}
		_, err := dst.Write(c.b)
		gone()
		if err != nil {
			break
		}
	}
	// One side has closed or failed; the other learns of it only once the
	// network lets it.
	p.await(l, time.Time{})
	l.cut()
	for range ch { // wait for the reader, which the cut unblocks
		gone() // dropped
	}
}

// await waits until at and then until traffic flows. It returns false if the
// link was cut first.
func (p *Proxy) await(l *link, at time.Time) bool {
	if d := time.Until(at); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-l.ctx.Done():
			return false
		}
	}
	p.mu.Lock()
	flowing := p.flowing
	p.mu.Unlock()
	select {
	case <-flowing:
		return l.ctx.Err() == nil
	case <-l.ctx.Done():
		return false
	}
}

// setServer records the server connection; it closes c and returns false if
// the link was already cut.
func (l *link) setServer(c net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ctx.Err() != nil {
		c.Close()
		return false
	}
	l.server = c
	return true
}

// cut closes both connections, which unblocks their readers and writers.
func (l *link) cut() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cancel()
	l.client.Close()
	if l.server != nil {
		l.server.Close()
	}
}

package rig_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/redquorum/redquorum/internal/testkit/leakcheck"
	"github.com/redquorum/redquorum/locktest/rig"
)

// echoServer serves line echo on 127.0.0.1 until the test ends.
func echoServer(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { // ends when the proxy closes its side
				defer c.Close()
				io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

type line struct {
	net.Conn
	r *bufio.Reader
}

func dial(t *testing.T, p *rig.Proxy) *line {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &line{c, bufio.NewReader(c)}
}

// roundTrip sends msg and returns the echo, or the error after wait.
func (l *line) roundTrip(msg string, wait time.Duration) (string, error) {
	l.SetDeadline(time.Now().Add(wait))
	if _, err := l.Write([]byte(msg + "\n")); err != nil {
		return "", err
	}
	s, err := l.r.ReadString('\n')
	if err != nil {
		return "", err
	}
	return s[:len(s)-1], nil
}

func (l *line) expect(t *testing.T, msg string) {
	t.Helper()
	if got, err := l.roundTrip(msg, 5*time.Second); err != nil || got != msg {
		t.Fatalf("echo of %q = %q, %v", msg, got, err)
	}
}

func newProxy(t *testing.T, target string) *rig.Proxy {
	p, err := rig.NewProxy(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func TestProxy(t *testing.T) {
	leakcheck.Check(t)
	p := newProxy(t, echoServer(t))

	t.Run("Forward", func(t *testing.T) {
		dial(t, p).expect(t, "hello")
	})

	t.Run("Latency", func(t *testing.T) {
		c := dial(t, p)
		c.expect(t, "warm")
		p.SetLatency(30*time.Millisecond, 20*time.Millisecond)
		defer p.SetLatency(0, 0)
		began := time.Now()
		c.expect(t, "slow")
		if rtt := time.Since(began); rtt < 50*time.Millisecond {
			t.Fatalf("round trip took %v, want at least 50ms", rtt)
		}
	})

	t.Run("PartitionHeal", func(t *testing.T) {
		c := dial(t, p)
		c.expect(t, "before")
		p.Partition()
		if _, err := c.roundTrip("held", 200*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("round trip in a partition = %v, want a timeout", err)
		}
		fresh := dial(t, p)
		if _, err := fresh.roundTrip("new", 200*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("new connection in a partition = %v, want a timeout", err)
		}
		p.Heal()
		// Held bytes are delivered, not dropped.
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if s, err := c.r.ReadString('\n'); err != nil || s != "held\n" {
			t.Fatalf("after Heal read %q, %v; want the held line", s, err)
		}
		c.expect(t, "after")
		fresh.SetDeadline(time.Now().Add(5 * time.Second))
		if s, err := fresh.r.ReadString('\n'); err != nil || s != "new\n" {
			t.Fatalf("after Heal read %q, %v on the new connection", s, err)
		}
	})

	t.Run("Cut", func(t *testing.T) {
		c := dial(t, p)
		c.expect(t, "before")
		p.Cut()
		if _, err := c.roundTrip("x", 5*time.Second); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("round trip on a cut connection = %v, want a connection error", err)
		}
		dial(t, p).expect(t, "new")
	})

	t.Run("NoTarget", func(t *testing.T) {
		p := newProxy(t, "")
		if _, err := dial(t, p).roundTrip("x", 5*time.Second); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("round trip without a target = %v, want a connection error", err)
		}
	})

	t.Run("Close", func(t *testing.T) {
		p := newProxy(t, echoServer(t))
		c := dial(t, p)
		c.expect(t, "x")
		p.Partition() // a stalled connection must not keep Close waiting
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := net.Dial("tcp", p.Addr()); err == nil {
			t.Fatal("dial after Close succeeded")
		}
	})
}

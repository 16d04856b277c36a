package faultproxy

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestHolding: a connection counts while the proxy holds bytes on their
// way to the server, and no longer once they arrived.
func TestHolding(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	got := make(chan []byte, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		b := make([]byte, 4)
		_, _ = io.ReadFull(c, b)
		got <- b
	}()
	p, err := NewProxy(ln.Addr().String())
	require.NoError(t, err)
	defer p.Close()

	p.SetLatency(time.Second, 0)
	c, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer c.Close()
	assert.Zero(t, p.Holding(), "nothing sent yet")
	_, err = c.Write([]byte("ping"))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return p.Holding() == 1 }, 5*time.Second, time.Millisecond, "the proxy holds the bytes")
	select {
	case <-got:
		t.Fatal("the bytes arrived before their latency")
	case <-time.After(50 * time.Millisecond):
	}
	assert.Equal(t, []byte("ping"), <-got)
	assert.Eventually(t, func() bool { return p.Holding() == 0 }, 5*time.Second, time.Millisecond, "delivered")
}

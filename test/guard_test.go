package test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redquorum/redquorum/internal/protocol"
	"github.com/redquorum/redquorum/internal/testkit/leakcheck"
	"github.com/redquorum/redquorum/internal/testkit/redisproc"
	"github.com/redquorum/redquorum/redlock"
)

// guardScenarios are orders of making Clients and using their node
// clients on a healthy deployment. Each makes its Clients, establishes the
// brand-new deployment with their first locks (w.establish), then locks
// through them: no node may enter its restart guard after that.
var guardScenarios = []struct {
	name string
	run  func(w *guardWatch)
}{
	{"Client made before any use", func(w *guardWatch) {
		c := w.client(w.nodes(), false)
		w.establish(c)
		w.lockAll([]*redlock.Client{c}, 30, 4)
	}},
	{"ping before New", func(w *guardWatch) {
		nodes := w.nodes()
		w.ping(nodes)
		c := w.client(nodes, false)
		w.establish(c)
		w.lockAll([]*redlock.Client{c}, 30, 4)
	}},
	{"other commands before New", func(w *guardWatch) {
		nodes := w.nodes()
		for _, n := range nodes {
			require.NoError(w.t, n.Set(w.t.Context(), "app:k", "v", time.Minute).Err())
			require.NoError(w.t, n.Get(w.t.Context(), "app:k").Err())
			require.NoError(w.t, n.Info(w.t.Context(), "server").Err())
			require.NoError(w.t, n.Eval(w.t.Context(), "return 1", nil).Err())
		}
		w.ping(nodes)
		c := w.client(nodes, false)
		w.establish(c)
		w.lockAll([]*redlock.Client{c}, 30, 4)
	}},
	{"4 Clients on the same pinged NewNodes clients", func(w *guardWatch) {
		nodes := w.nodes()
		w.ping(nodes)
		cs := w.clients(4, nodes, false)
		w.establish(cs...)
		w.lockAll(cs, 40, 8)
	}},
	{"4 Clients on the same pinged plain clients, each deriving its own", func(w *guardWatch) {
		nodes := w.plain(func(a string) *redis.Options { return &redis.Options{Addr: a} })
		w.ping(nodes)
		cs := w.clients(4, nodes, false)
		w.establish(cs...)
		w.lockAll(cs, 40, 8)
	}},
	{"2 Clients on pinged plain clients used as given", func(w *guardWatch) {
		nodes := w.plain(redlock.NodeOptions)
		w.ping(nodes)
		cs := w.clients(2, nodes, true)
		w.establish(cs...)
		w.lockAll(cs, 30, 6)
	}},
	{"Clients made one after another, locks interleaved", func(w *guardWatch) {
		nodes := w.nodes()
		cs := []*redlock.Client{w.client(nodes, false)}
		w.establish(cs...)
		for range 3 {
			w.ping(nodes)
			cs = append(cs, w.client(nodes, false))
			w.lockAll(cs, 12, 4)
		}
	}},
	{"Client closed and made again on the same node clients", func(w *guardWatch) {
		nodes := w.nodes()
		w.ping(nodes)
		c := w.client(nodes, false)
		w.establish(c)
		for range 4 {
			w.lockAll([]*redlock.Client{c}, 8, 2)
			require.NoError(w.t, c.Close())
			w.ping(nodes)
			c = w.client(nodes, false)
		}
		w.lockAll([]*redlock.Client{c}, 8, 2)
	}},
	{"idle connections closed by the client (ConnMaxIdleTime)", func(w *guardWatch) {
		nodes := w.plain(func(a string) *redis.Options {
			o := redlock.NodeOptions(a)
			o.ConnMaxIdleTime = 20 * time.Millisecond
			return o
		})
		w.ping(nodes)
		cs := []*redlock.Client{w.client(nodes, true), w.client(nodes, false)}
		w.establish(cs...)
		for range 10 {
			time.Sleep(50 * time.Millisecond)
			w.lockAll(cs, 4, 2)
		}
	}},
	{"idle connections closed by the server (timeout 1)", func(w *guardWatch) {
		for _, d := range w.direct {
			require.NoError(w.t, d.ConfigSet(w.t.Context(), "timeout", "1").Err())
		}
		nodes := w.nodes()
		w.ping(nodes)
		c := w.client(nodes, false)
		w.establish(c)
		for range 2 {
			time.Sleep(2500 * time.Millisecond)
			w.lockAll([]*redlock.Client{c}, 10, 4)
		}
	}},
	{"CLIENT KILL on every node between locks", func(w *guardWatch) {
		nodes := w.nodes()
		w.ping(nodes)
		cs := w.clients(2, nodes, false)
		w.establish(cs...)
		for i := range 12 {
			w.killClients(i%3 == 2)
			w.lockAll(cs, 3, 2)
		}
	}},
	{"pool churn: pool of 1 or 2, connections live 30 ms, 8 lockers", func(w *guardWatch) {
		size := 0
		nodes := w.plain(func(a string) *redis.Options {
			o := redlock.NodeOptions(a)
			size++
			o.PoolSize, o.ConnMaxLifetime = 1+size%2, 30*time.Millisecond
			return o
		})
		w.ping(nodes)
		cs := []*redlock.Client{w.client(nodes, true), w.client(nodes, true), w.client(nodes, false)}
		w.establish(cs...)
		w.lockAll(cs, 60, 8)
	}},
	{"state of a deployment whose acquire recorded r as '?'", func(w *guardWatch) {
		nodes := w.nodes()
		w.ping(nodes)
		c := w.client(nodes, false)
		w.establish(c)
		for _, d := range w.direct {
			require.NoError(w.t, d.HSet(w.t.Context(), protocol.StateKey, "r", "?").Err())
		}
		w.killClients(false) // every connection is checked again
		later := w.nodes()
		w.ping(later)
		w.lockAll([]*redlock.Client{c, w.client(later, false)}, 20, 4)
	}},
	{"40 buyers over 4 Clients at once on a fresh deployment (redlock demo)", func(w *guardWatch) {
		var cs []*redlock.Client
		for range 4 {
			nodes := w.nodes() // one set per app server, pinged as dialNodes does
			w.ping(nodes)
			cs = append(cs, w.client(nodes, false))
		}
		w.lockAll(cs, 40, 40)
		w.establish()
		w.lockAll(cs, 40, 40)
	}},
}

// TestNoFalseGuard: on healthy nodes, whatever the order in which Clients
// are made and their node clients used (pings before New, several Clients
// per node client, connections dropped by the client or the server, pool
// churn, Clients closed and made again), no node enters its restart guard
// once the brand-new deployment is established, and every lock succeeds.
// The negative controls show that the same watch sees a real loss: a node
// restarted without persistence, and a node failed over to its replica,
// each enter the guard, and only they do.
func TestNoFalseGuard(t *testing.T) {
	leakcheck.Check(t)
	redisproc.Require(t)
	for _, sc := range guardScenarios {
		t.Run(sc.name, func(t *testing.T) {
			addrs, _ := five(t)
			w := watch(t, addrs)
			sc.run(w)
			w.requireHealthy()
		})
	}
	t.Run("negative control: a node restarted without persistence", func(t *testing.T) {
		s, err := redisproc.Start(t.Context(), 5)
		require.NoError(t, err)
		t.Cleanup(s.Stop)
		w := watch(t, s.Addrs)
		nodes := w.nodes()
		w.ping(nodes)
		c := w.client(nodes, false)
		w.establish(c)
		w.lockAll([]*redlock.Client{c}, 10, 2)
		require.NoError(t, s.Restart(t.Context(), 2))
		later := w.nodes()
		w.ping(later)
		w.lockAll([]*redlock.Client{c, w.client(later, false)}, 20, 4)
		assert.Equal(t, only(2), w.guardedNodes(), "the restarted node, and only it, is guarded")
		assert.NotEqual(t, "0", w.state(2)["g"])
	})
	t.Run("negative control: a node failed over to its replica", func(t *testing.T) {
		s, err := redisproc.Start(t.Context(), 4)
		require.NoError(t, err)
		t.Cleanup(s.Stop)
		g, err := redisproc.StartGroup(t.Context(), "g", false)
		require.NoError(t, err)
		t.Cleanup(g.Stop)
		moved := proxyTo(t, g.Master) // the node's address, which the failover moves
		w := watch(t, append(s.Addrs, moved.Addr()))
		nodes := w.nodes()
		w.ping(nodes)
		c := w.client(nodes, false)
		w.establish(c)
		w.lockAll([]*redlock.Client{c}, 10, 2)
		waitReplicated(t, g, protocol.StateKey)
		g.KillMaster()
		require.NoError(t, g.Promote())
		moved.SetTarget(g.Replica)
		moved.Cut()
		w.lockAll([]*redlock.Client{c}, 10, 2)
		assert.Equal(t, only(4), w.guardedNodes(), "the promoted replica, and only it, is guarded")
		assert.Regexp(t, `level=WARN msg="redlock: the node's server changed.*node=`+moved.Addr(), w.logs.String())
	})
}

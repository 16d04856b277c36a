package rig_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redquorum/redquorum/internal/testkit/leakcheck"
	"github.com/redquorum/redquorum/locktest/rig"
)

// childEnv marks the test binary re-executed by TestSecondProcess.
const childEnv = "RIG_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		os.Exit(child())
	}
	os.Exit(m.Run())
}

// child writes its PID to key "child" on every node named in the environment.
func child() int {
	addrs := rig.AddrsFromEnv()
	if len(addrs) == 0 {
		fmt.Fprintln(os.Stderr, "child: no addresses in", rig.AddrsEnv)
		return 1
	}
	for _, addr := range addrs {
		c := redis.NewClient(options(addr))
		err := c.Set(context.Background(), "child", os.Getpid(), 0).Err()
		c.Close()
		if err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			return 1
		}
	}
	return 0
}

// options are the go-redis options of a lock client's node connection: no
// retries, context deadlines enforced at the socket, nothing Redis 7.0 rejects.
func options(addr string) *redis.Options {
	return &redis.Options{
		Addr:                     addr,
		MaxRetries:               -1,
		ContextTimeoutEnabled:    true,
		DisableIdentity:          true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	}
}

func client(t *testing.T, addr string) *redis.Client {
	c := redis.NewClient(options(addr))
	t.Cleanup(func() { c.Close() })
	return c
}

// expectTimeout sends PING with a short deadline and fails t unless it times out.
func expectTimeout(t *testing.T, c *redis.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	err := c.Ping(ctx).Err()
	var ne net.Error
	if !errors.Is(err, context.DeadlineExceeded) && !(errors.As(err, &ne) && ne.Timeout()) {
		t.Fatalf("PING = %v, want a timeout", err)
	}
}

func expectPing(t *testing.T, c *redis.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING: %v", err)
	}
}

// raw is a plain TCP connection to a node on which PING was answered.
type raw struct{ net.Conn }

func rawConn(t *testing.T, addr string) raw {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 7)
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "+PONG\r\n" {
		t.Fatalf("PING = %q, %v", buf, err)
	}
	return raw{c}
}

// read waits up to d for a byte or an error.
func (r raw) read(d time.Duration) error {
	r.SetReadDeadline(time.Now().Add(d))
	_, err := r.Read(make([]byte, 1))
	return err
}

func TestCluster(t *testing.T) {
	leakcheck.Check(t) // first, so that it runs after the rig's cleanup
	start := time.Now()
	c := rig.Start(t, 3)
	t.Logf("3 nodes ready in %v: %v", time.Since(start).Round(time.Millisecond), c.Addrs())
	ctx := t.Context()
	clients := make([]*redis.Client, len(c.Nodes))
	for i, n := range c.Nodes {
		clients[i] = client(t, n.Addr())
	}

	t.Run("SetGet", func(t *testing.T) {
		for i, cl := range clients {
			v := fmt.Sprint("v", i)
			if err := cl.Set(ctx, "k", v, 0).Err(); err != nil {
				t.Fatalf("node %d: SET: %v", i, err)
			}
			if got, err := cl.Get(ctx, "k").Result(); err != nil || got != v {
				t.Fatalf("node %d: GET = %q, %v; want %q", i, got, err, v)
			}
		}
	})

	t.Run("KillStart", func(t *testing.T) {
		n, cl := c.Nodes[0], clients[0]
		if err := cl.Set(ctx, "k", "before", 0).Err(); err != nil {
			t.Fatal(err)
		}
		addr := n.Addr()
		raw := rawConn(t, addr)
		if err := n.Kill(ctx); err != nil {
			t.Fatal(err)
		}
		if err := raw.read(5 * time.Second); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("open connection after Kill: read = %v, want it closed", err)
		}
		if err := cl.Get(ctx, "k").Err(); err == nil {
			t.Fatal("GET on a killed node succeeded")
		} else {
			t.Logf("GET on a killed node: %v", err)
		}
		began := time.Now()
		if err := n.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Logf("Start took %v", time.Since(began).Round(time.Millisecond))
		if n.Addr() != addr {
			t.Fatalf("Addr changed from %s to %s", addr, n.Addr())
		}
		if err := cl.Get(ctx, "k").Err(); !errors.Is(err, redis.Nil) {
			t.Fatalf("GET after restart = %v, want redis.Nil (data lost)", err)
		}
		// Restart is Kill and Start in one.
		if err := cl.Set(ctx, "k", "again", 0).Err(); err != nil {
			t.Fatal(err)
		}
		if err := n.Restart(ctx); err != nil {
			t.Fatal(err)
		}
		if err := cl.Get(ctx, "k").Err(); !errors.Is(err, redis.Nil) {
			t.Fatalf("GET after Restart = %v, want redis.Nil", err)
		}
	})

	t.Run("KillInPartition", func(t *testing.T) {
		n := c.Nodes[0]
		raw := rawConn(t, n.Addr())
		n.Partition()
		if err := n.Kill(ctx); err != nil {
			t.Fatal(err)
		}
		if err := raw.read(300 * time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("read after Kill in a partition = %v, want a timeout: the crash is not visible", err)
		}
		n.Heal()
		if err := raw.read(5 * time.Second); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("read after Heal = %v, want the connection closed", err)
		}
		if err := n.Start(ctx); err != nil {
			t.Fatal(err)
		}
		expectPing(t, clients[0])
	})

	t.Run("PauseUnpause", func(t *testing.T) {
		n, cl := c.Nodes[1], clients[1]
		expectPing(t, cl)
		if err := n.Pause(); err != nil {
			t.Fatal(err)
		}
		expectTimeout(t, cl)
		if err := n.Unpause(); err != nil {
			t.Fatal(err)
		}
		expectPing(t, cl)
	})

	t.Run("PartitionHeal", func(t *testing.T) {
		n, cl := c.Nodes[2], clients[2]
		expectPing(t, cl) // leaves an open connection in the pool
		n.Partition()
		expectTimeout(t, cl) // on the open connection
		fresh := client(t, n.Addr())
		expectTimeout(t, fresh) // on a new one
		n.Heal()
		expectPing(t, cl)
		expectPing(t, fresh)
	})

	t.Run("Latency", func(t *testing.T) {
		const d = 50 * time.Millisecond
		n, cl := c.Nodes[2], clients[2]
		expectPing(t, cl)
		n.SetLatency(d)
		defer n.SetLatency(0)
		for range 3 {
			began := time.Now()
			expectPing(t, cl)
			if rtt := time.Since(began); rtt < 2*d {
				t.Fatalf("PING took %v with %v latency each way, want at least %v", rtt, d, 2*d)
			}
		}
	})

	t.Run("SecondProcess", func(t *testing.T) {
		cmd := exec.CommandContext(ctx, os.Args[0])
		cmd.Env = append(os.Environ(), c.Env(), childEnv+"=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("child: %v\n%s", err, out)
		}
		for i, cl := range clients {
			if got, err := cl.Get(ctx, "child").Int(); err != nil || got != cmd.Process.Pid {
				t.Fatalf("node %d: child = %d, %v; want %d", i, got, err, cmd.Process.Pid)
			}
		}
	})
}

func TestWithArgs(t *testing.T) {
	leakcheck.Check(t)
	c := rig.Start(t, 1, rig.WithArgs(
		"--user", "default", "off",
		"--user", "locker", "on", ">secret", "~lock:*", "+set", "+get", "+ping",
	))
	ctx := t.Context()
	anon := client(t, c.Nodes[0].Addr())
	if err := anon.Ping(ctx).Err(); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Fatalf("PING as default user = %v, want NOAUTH", err)
	}
	opt := options(c.Nodes[0].Addr())
	opt.Username, opt.Password = "locker", "secret"
	locker := redis.NewClient(opt)
	t.Cleanup(func() { locker.Close() })
	if err := locker.Set(ctx, "lock:a", "token", time.Second).Err(); err != nil {
		t.Fatalf("SET as locker: %v", err)
	}
	if err := locker.Set(ctx, "other", "x", 0).Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Fatalf("SET outside lock:* = %v, want NOPERM", err)
	}
	if err := locker.FlushAll(ctx).Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Fatalf("FLUSHALL as locker = %v, want NOPERM", err)
	}
}

// role returns the replication role ("master" or "slave") of the server that
// c reaches.
func role(t *testing.T, c *redis.Client) string {
	t.Helper()
	info, err := c.Info(t.Context(), "replication").Result()
	require.NoError(t, err)
	for line := range strings.Lines(info) {
		if r, ok := strings.CutPrefix(strings.TrimSpace(line), "role:"); ok {
			return r
		}
	}
	t.Fatalf("INFO replication has no role:\n%s", info)
	return ""
}

func TestReplicas(t *testing.T) {
	leakcheck.Check(t)
	c := rig.Start(t, 1, rig.WithReplicas())
	n, ctx, addr := c.Nodes[0], t.Context(), c.Nodes[0].Addr()
	cl := client(t, addr)
	require.Equal(t, "master", role(t, cl))
	require.NotEmpty(t, n.ReplicaAddr())
	require.Equal(t, "slave", role(t, client(t, n.ReplicaAddr())))

	// failover writes a key the replica gets, fails the node over while a
	// writer keeps writing, and checks what the new master has.
	failover := func(t *testing.T, round int) {
		kept := fmt.Sprint("kept", round)
		require.NoError(t, cl.Set(ctx, kept, round, 0).Err())
		require.NoError(t, n.WaitReplicated(ctx))
		replica := n.ReplicaAddr()

		w := client(t, addr)
		stop := make(chan struct{})
		var acked []string // keys whose SET the server confirmed
		done := make(chan struct{})
		go func() {
			defer close(done)
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				case <-time.After(2 * time.Millisecond):
				}
				k := fmt.Sprintf("lag%d:%d", round, i)
				if w.Set(ctx, k, i, 0).Err() == nil {
					acked = append(acked, k)
				}
			}
		}()
		began := time.Now()
		err := n.Failover(ctx, 300*time.Millisecond)
		close(stop)
		<-done
		require.NoError(t, err)
		t.Logf("failover %d took %v", round, time.Since(began).Round(time.Millisecond))

		require.Equal(t, addr, n.Addr())
		require.Equal(t, "master", role(t, cl))
		require.Equal(t, fmt.Sprint(round), cl.Get(ctx, kept).Val(), "written before the failover")
		var lost int
		for _, k := range acked {
			if err := cl.Get(ctx, k).Err(); errors.Is(err, redis.Nil) {
				lost++
			} else {
				require.NoError(t, err)
			}
		}
		t.Logf("failover %d lost %d of %d acknowledged writes", round, lost, len(acked))
		assert.Positive(t, lost, "acknowledged writes lost: those of the lag, which only the old master had")
		require.NotEqual(t, replica, n.ReplicaAddr(), "the replica is the old master's container")
		require.Equal(t, "slave", role(t, client(t, n.ReplicaAddr())))
		require.NoError(t, n.WaitReplicated(ctx))
		require.Equal(t, fmt.Sprint(round), client(t, n.ReplicaAddr()).Get(ctx, kept).Val(), "the new replica synced")
	}
	t.Run("Failover", func(t *testing.T) { failover(t, 1) })
	t.Run("SecondFailover", func(t *testing.T) { failover(t, 2) })

	t.Run("Restart", func(t *testing.T) {
		require.NoError(t, cl.Set(ctx, "x", 1, 0).Err())
		require.NoError(t, n.WaitReplicated(ctx))
		require.NoError(t, n.Restart(ctx))
		require.Equal(t, "master", role(t, cl))
		require.ErrorIs(t, cl.Get(ctx, "x").Err(), redis.Nil, "the master restarted empty")
		require.NoError(t, n.WaitReplicated(ctx))
		keys, err := client(t, n.ReplicaAddr()).Keys(ctx, "*").Result()
		require.NoError(t, err)
		require.Empty(t, keys, "the replica resynced from the empty master")
	})
	t.Run("FailoverAfterRestart", func(t *testing.T) { failover(t, 3) })

	t.Run("NoReplica", func(t *testing.T) {
		plain := rig.Start(t, 1)
		require.Empty(t, plain.Nodes[0].ReplicaAddr())
		require.Error(t, plain.Nodes[0].Failover(ctx, 0))
	})
}

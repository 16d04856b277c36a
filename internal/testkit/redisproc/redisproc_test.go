package redisproc

import (
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
)

// TestPortTaken: when another server takes the port a launch picked, the
// launch starts its server again on another port, and every address then
// answers with the server Start started there.
func TestPortTaken(t *testing.T) {
	other := StartT(t, 1)
	_, taken, _ := net.SplitHostPort(other.Addrs[0])
	var calls atomic.Int32 // Start launches its servers in parallel
	pickPort = func() (int, error) {
		if calls.Add(1) == 1 {
			return strconv.Atoi(taken)
		}
		return freePort()
	}
	t.Cleanup(func() { pickPort = freePort })
	s := StartT(t, 2)
	if n := calls.Load(); n != 3 {
		t.Errorf("%d ports picked for 2 servers with the first taken, want 3", n)
	}
	for i, a := range s.Addrs {
		if a == other.Addrs[0] {
			t.Errorf("server %d is on the taken address %s", i, a)
		}
		info, err := reply(a, "INFO", "server")
		if err != nil {
			t.Fatal(err)
		}
		if want := "process_id:" + strconv.Itoa(s.PIDs()[i]) + "\r"; !strings.Contains(info, want) {
			t.Errorf("server %d on %s: INFO lacks %q", i, a, want)
		}
	}
}

// TestRestart: a restarted server answers on the same address as a new
// process, without the old one's data and with a new replication ID.
func TestRestart(t *testing.T) {
	s := StartT(t, 2)
	if err := command(s.Addrs[1], "SET", "k", "v"); err != nil {
		t.Fatal(err)
	}
	replid := func() string {
		info, err := reply(s.Addrs[1], "INFO", "replication")
		if err != nil {
			t.Fatal(err)
		}
		_, id, _ := strings.Cut(info, "master_replid:")
		return id[:40]
	}
	pid, before := s.PIDs()[1], replid()
	if err := s.Restart(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	if s.PIDs()[1] == pid {
		t.Errorf("server 1 has the same process %d after Restart", pid)
	}
	if v, err := reply(s.Addrs[1], "EXISTS", "k"); err != nil || v != "0" {
		t.Errorf("EXISTS k after Restart = %q, %v; want 0", v, err)
	}
	if after := replid(); after == before {
		t.Errorf("replication ID %s kept across Restart", after)
	}
}

// TestRestartWithData: a server restarted with its data keeps its keys, and
// a killed server can be started again, empty.
func TestRestartWithData(t *testing.T) {
	s := StartT(t, 1)
	if err := command(s.Addrs[0], "SET", "k", "v"); err != nil {
		t.Fatal(err)
	}
	if err := s.RestartWithData(t.Context(), 0); err != nil {
		t.Fatal(err)
	}
	if v, err := reply(s.Addrs[0], "GET", "k"); err != nil || v != "v" {
		t.Errorf("GET k after RestartWithData = %q, %v; want v", v, err)
	}
	s.Kill(0)
	if err := s.RestartWithData(t.Context(), 0); err == nil {
		t.Error("RestartWithData of a killed server succeeded; it has no data to keep")
	}
	if err := s.Restart(t.Context(), 0); err != nil {
		t.Fatal(err)
	}
	if v, err := reply(s.Addrs[0], "EXISTS", "k"); err != nil || v != "0" {
		t.Errorf("EXISTS k after Kill and Restart = %q, %v; want 0", v, err)
	}
}

// TestRestartFrom: a server restarted from an older snapshot has the keys
// of the snapshot and not the later ones, and a configured server can
// rewrite its configuration file, also after the restart.
func TestRestartFrom(t *testing.T) {
	Require(t)
	s, err := StartWith(t.Context(), 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	a := s.Addrs[0]
	if err := command(a, "SET", "old", "v"); err != nil {
		t.Fatal(err)
	}
	snap, err := s.Snapshot(0)
	if err != nil {
		t.Fatal(err)
	}
	if err := command(a, "SET", "new", "v"); err != nil {
		t.Fatal(err)
	}
	if err := command(a, "CONFIG", "REWRITE"); err != nil {
		t.Fatal(err)
	}
	if err := s.RestartFrom(t.Context(), 0, snap); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{"old": "1", "new": "0"} {
		if v, err := reply(a, "EXISTS", k); err != nil || v != want {
			t.Errorf("EXISTS %s after RestartFrom = %q, %v; want %s", k, v, err, want)
		}
	}
	if err := command(a, "CONFIG", "REWRITE"); err != nil {
		t.Fatal(err)
	}
}

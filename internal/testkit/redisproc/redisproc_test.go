package redisproc

import (
	"net"
	"strconv"
	"strings"
	"testing"
)

// TestPortTaken: when another server takes the port a launch picked, the
// launch starts its server again on another port, and every address then
// answers with the server Start started there.
func TestPortTaken(t *testing.T) {
	other := StartT(t, 1)
	_, taken, _ := net.SplitHostPort(other.Addrs[0])
	calls := 0
	pickPort = func() (int, error) {
		calls++
		if calls == 1 {
			return strconv.Atoi(taken)
		}
		return freePort()
	}
	t.Cleanup(func() { pickPort = freePort })
	s := StartT(t, 2)
	if calls != 3 {
		t.Errorf("%d ports picked for 2 servers with the first taken, want 3", calls)
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

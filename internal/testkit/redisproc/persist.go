package redisproc

// What outlives a server's restart: its configuration file, its data, or
// an older snapshot of it.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// StartWith is [Start] with the arguments args after the defaults, such as
// "--enable-debug-command", "yes". Each server reads a configuration file
// of its own in its directory, empty at first, so that CONFIG REWRITE
// works; a restart without data empties it again.
func StartWith(ctx context.Context, n int, args ...string) (*Servers, error) {
	return start(ctx, n, args...)
}

// RestartWithData restarts server i with its data, as a clean restart with
// persistence would: the server writes a snapshot (SAVE) and the new one
// loads it. Keys whose TTL ran out while the server was down are gone, and
// the replication ID is new. On failure server i is left down.
func (s *Servers) RestartWithData(ctx context.Context, i int) error {
	if s.procs[i] == nil {
		return fmt.Errorf("redisproc: server %d is down: it has no data to keep", i)
	}
	if err := command(s.Addrs[i], "SAVE"); err != nil {
		return err
	}
	return s.restart(ctx, i, true)
}

// Snapshot makes server i write its data to disk (SAVE) and returns the
// path of a copy of that file, for [Servers.RestartFrom].
func (s *Servers) Snapshot(i int) (string, error) {
	if err := command(s.Addrs[i], "SAVE"); err != nil {
		return "", err
	}
	b, err := os.ReadFile(filepath.Join(s.dir, strconv.Itoa(i), "dump.rdb"))
	if err != nil {
		return "", err
	}
	s.saved++
	path := filepath.Join(s.dir, fmt.Sprintf("snapshot-%d-%d.rdb", i, s.saved))
	return path, os.WriteFile(path, b, 0o644)
}

// RestartFrom kills server i (SIGKILL), when it is up, and starts a new one
// on its address that loads the file snapshot (see [Servers.Snapshot]), as
// a restart from an older persisted file or a restored backup would. On
// failure server i is left down.
func (s *Servers) RestartFrom(ctx context.Context, i int, snapshot string) error {
	s.Kill(i)
	b, err := os.ReadFile(snapshot)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(s.dir, strconv.Itoa(i), "dump.rdb"), b, 0o644); err != nil {
		return err
	}
	return s.restart(ctx, i, true)
}

// touch makes an empty file at path unless one is there.
func touch(path string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	return f.Close()
}

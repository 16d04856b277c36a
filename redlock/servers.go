package redlock

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/redquorum/redquorum/internal/node"
)

// sameServerError is the error of a lock refused because two nodes reach
// one server, found by a connection check (same). It wraps
// [ErrSameServer].
type sameServerError struct {
	key   string
	i, j  int       // the nodes' indexes, i < j
	names [2]string // their names
	same  *node.SameServerError
}

// sameServer returns nil when no two nodes were found to reach one server,
// and otherwise the error of a lock on keys, which says which.
func (c *Client) sameServer(keys []string) error {
	err := c.servers.Err()
	if err == nil {
		return nil
	}
	e := &sameServerError{key: strings.Join(keys, ", ")}
	if !errors.As(err, &e.same) {
		return err
	}
	e.i, e.j = slices.Index(c.nodes, e.same.First), slices.Index(c.nodes, e.same.Second)
	if e.i > e.j {
		e.i, e.j = e.j, e.i
	}
	e.names = [2]string{c.nodes[e.i].Name(), c.nodes[e.j].Name()}
	return e
}

func (e *sameServerError) Error() string {
	return fmt.Sprintf("redlock: lock %q: nodes[%d] %s and nodes[%d] %s are one server (run_id %.8s): give each server once",
		shortKey(e.key), e.i, e.names[0], e.j, e.names[1], e.same.ID)
}

func (e *sameServerError) Unwrap() error { return ErrSameServer }

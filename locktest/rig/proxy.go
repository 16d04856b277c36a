package rig

import (
	"github.com/redquorum/redquorum/internal/testkit/faultproxy"
	"github.com/redquorum/redquorum/locktest"
)

// A Node is a target of locktest's fault schedule.
var _ locktest.Target = (*Node)(nil)

// Proxy is the in-process TCP fault proxy in front of each node: see
// [faultproxy.Proxy]. It lives in an internal package so that the redlock
// command can use it without Docker.
type Proxy = faultproxy.Proxy

// NewProxy listens on a free port of 127.0.0.1 and forwards to target
// (host:port): see [faultproxy.NewProxy].
func NewProxy(target string) (*Proxy, error) { return faultproxy.NewProxy(target) }

// Package testkit holds the tools that redquorum's tests use and the
// library itself never imports: native redis-server processes (redisproc),
// an in-process fault-injecting TCP proxy (faultproxy) and a goroutine leak
// check (leakcheck). The public test kit, locktest, is built on the first
// two.
package testkit

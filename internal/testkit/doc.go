// Package testkit holds the tools that redquorum's tests, benchmarks and CLI
// scenarios use and the library itself never imports: native redis-server
// processes (redisproc), an in-process fault-injecting TCP proxy
// (faultproxy), a goroutine leak check (leakcheck) and the load generator
// behind `redlock bench`, `redlock demo` and bench/ (loadtest).
package testkit

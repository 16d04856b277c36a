package redlock

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"unicode"

	"github.com/redis/go-redis/v9"
)

// Open returns a Client on the Redis masters at addrs, with one node client
// per address, made as by [NewNodes] and used as given. Unlike with [New],
// the Client owns these clients: [Client.Close] closes them after its own
// work. opts is as for New, and may be nil. Open connects to no node.
//
// An address is host:port or redis://[user:password@]host[:port][/db].
// rediss:// means TLS, with the server's certificate checked against the
// system's roots; for another CA, give New clients made with redis.ParseURL
// and a TLSConfig. [NodeOptions] settings apply on top of a URL's. Open
// refuses an empty or malformed address (no port, a space, a comma, an
// unknown scheme, a bad port) with an error naming it, password hidden.
func Open(addrs []string, opts *Options) (*Client, error) {
	if len(addrs) == 0 {
		return nil, errors.New("redlock: no addresses")
	}
	cfg, err := opts.config(len(addrs))
	if err != nil {
		return nil, err
	}
	return openConfig(addrs, cfg)
}

// openConfig is Open with cfg.
func openConfig(addrs []string, cfg config) (*Client, error) {
	cfg.asGiven = true // made for the purpose
	nodes, err := openNodes(addrs)
	if err != nil {
		return nil, err
	}
	c, err := newClient(nodes, cfg)
	if err != nil {
		_ = closeClients(nodes)
		return nil, err
	}
	c.owned = nodes
	return c, nil
}

// ParseNode returns the go-redis options with which [Open] and [NewNodes]
// make the node client for addr. addr is host:port, or a redis:// or
// rediss:// URL as Open describes it; [NodeOptions] settings go on top.
// The options' Addr is the node's host:port, which holds no password.
// ParseNode connects to nothing. On failure it returns nil and an error
// that names addr, password hidden, and says what is wrong, as Open does:
// redlock: address "localhost": missing port: ....
func ParseNode(addr string) (*redis.Options, error) {
	o, err := addrOptions(addr)
	if err != nil {
		return nil, fmt.Errorf("redlock: address %q: %w", redact(addr), err)
	}
	return o, nil
}

// addrOptions returns the go-redis options of a node client for addr, with
// the settings of [NodeOptions] on top of what addr says. For a bad addr it
// returns an error that says what is wrong. addr is host:port, or a
// redis:// or rediss:// (TLS) URL as redis.ParseURL reads it:
// redis://[user:password@]host[:port][/db][?option=value...]. A URL
// without a port means 6379, as in redis-cli; a plain address needs one.
// The URL's options may set timeouts and the pool, not what NodeOptions
// fixes (MaxRetries, the protocol).
func addrOptions(addr string) (*redis.Options, error) {
	switch {
	case addr == "":
		return nil, errors.New("empty address")
	case strings.ContainsFunc(addr, unicode.IsSpace):
		return nil, errors.New("contains a space")
	case strings.Contains(addr, ","):
		return nil, errors.New("contains a comma: give each node as an address of its own")
	}
	o := &redis.Options{Addr: addr}
	if scheme, _, ok := strings.Cut(addr, "://"); ok {
		if scheme != "redis" && scheme != "rediss" {
			return nil, fmt.Errorf("unknown scheme %q: want redis:// or rediss://", scheme)
		}
		u, err := url.Parse(addr)
		if err != nil {
			return nil, errors.Unwrap(err) // the url.Error would repeat addr, password included
		}
		if u.Hostname() == "" {
			return nil, errors.New("no host")
		}
		if o, err = redis.ParseURL(addr); err != nil {
			return nil, err
		}
	}
	host, port, err := net.SplitHostPort(o.Addr)
	switch {
	case err != nil && strings.Contains(err.Error(), "missing port"):
		return nil, errors.New("missing port: want host:port, or a redis:// or rediss:// URL")
	case err != nil:
		return nil, errors.New(err.(*net.AddrError).Err) // its text without addr
	case host == "":
		return nil, errors.New("no host")
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return nil, fmt.Errorf("port %q is not a number from 1 to 65535", port)
	}
	d := NodeOptions(o.Addr) // the timeouts that the URL leaves unset
	o.DialTimeout = cmp.Or(o.DialTimeout, d.DialTimeout)
	o.ReadTimeout = cmp.Or(o.ReadTimeout, d.ReadTimeout)
	o.WriteTimeout = cmp.Or(o.WriteTimeout, d.WriteTimeout)
	lockSettings(o)
	return o, nil
}

// openNodes returns the node clients of Open: one per address, made as by
// NewNodes, or an error naming the first malformed address.
func openNodes(addrs []string) ([]redis.UniversalClient, error) {
	opts := make([]*redis.Options, len(addrs))
	for i, a := range addrs {
		o, err := addrOptions(a)
		if err != nil {
			return nil, addrError(i, a, err)
		}
		opts[i] = o
	}
	nodes := make([]redis.UniversalClient, len(addrs))
	for i, o := range opts {
		nodes[i] = newNodesClient(o, nil)
	}
	return nodes, nil
}

// addrError is the error of a malformed address: addrs[i], with its
// password hidden, and what is wrong with it.
func addrError(i int, addr string, err error) error {
	return fmt.Errorf("redlock: addrs[%d] %q: %w", i, redact(addr), err)
}

// redact returns addr with the password of a URL replaced by "xxxxx", as
// url.URL.Redacted does, also when addr does not parse as a URL.
func redact(addr string) string {
	scheme, rest, ok := strings.Cut(addr, "://")
	at := strings.LastIndex(rest, "@")
	if !ok || at < 0 {
		return addr
	}
	user, _, hasPassword := strings.Cut(rest[:at], ":")
	if !hasPassword {
		return addr
	}
	return scheme + "://" + user + ":xxxxx" + rest[at:]
}

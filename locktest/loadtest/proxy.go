package loadtest

import (
	"errors"
	"net/url"
	"strings"

	"github.com/redquorum/redquorum/internal/testkit/faultproxy"
	"github.com/redquorum/redquorum/redlock"
)

// ProxyNode starts a proxy to the node at addr, and returns it with addr
// pointed at the proxy. addr is host:port or a redis:// or rediss:// URL.
// The URL's credentials, DB and options stay; only its host:port changes.
// With rediss://, the server's certificate is then checked against the
// proxy's address. On failure it returns an error and starts nothing.
func ProxyNode(addr string) (*faultproxy.Proxy, string, error) {
	o, err := redlock.ParseNode(addr)
	if err != nil {
		return nil, "", err
	}
	p, err := faultproxy.NewProxy(o.Addr)
	if err != nil {
		return nil, "", err
	}
	if !strings.Contains(addr, "://") {
		return p, p.Addr(), nil
	}
	u, err := url.Parse(addr) // ParseNode parsed it
	if err != nil {
		_ = p.Close()
		return nil, "", errors.Unwrap(err) // the url.Error would repeat the password
	}
	u.Host = p.Addr()
	return p, u.String(), nil
}

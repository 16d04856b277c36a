package redlock

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redquorum/redquorum/internal/testkit/redisproc"
)

// TestTLSNodes: on servers that speak only TLS, with a certificate from
// the test's own CA, Open with rediss:// URLs locks and unlocks, and checks
// the certificate against the system's roots (which refuse it unless the
// URL says skip_verify); New locks and unlocks through clients made with
// redis.ParseURL and the CA in their TLSConfig.
func TestTLSNodes(t *testing.T) {
	s := redisproc.StartT(t, 3)
	addrs, roots := tlsOnly(t, s)

	urls := func(query string) []string {
		u := make([]string, len(addrs))
		for i, a := range addrs {
			u[i] = "rediss://" + a + query
		}
		return u
	}
	t.Run("Open checks the certificate", func(t *testing.T) {
		c, err := Open(urls(""), tlsOptions())
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		_, err = c.TryLock(t.Context(), "k", time.Minute)
		require.ErrorIs(t, err, ErrNotObtained)
		assert.Contains(t, fmt.Sprintf("%+v", err), "certificate signed by unknown authority")
	})
	t.Run("Open", func(t *testing.T) {
		c, err := Open(urls("?skip_verify=true"), tlsOptions())
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		lockUnlockOn(t, c, c.owned)
	})
	t.Run("New with the CA", func(t *testing.T) {
		nodes := make([]redis.UniversalClient, len(addrs))
		for i, u := range urls("") {
			o, err := redis.ParseURL(u)
			require.NoError(t, err)
			o.TLSConfig.RootCAs = roots
			nodes[i] = redis.NewClient(o)
			t.Cleanup(func() { _ = nodes[i].Close() })
		}
		c, err := New(nodes, tlsOptions())
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		lockUnlockOn(t, c, nodes)
	})
}

// tlsOptions gives the TLS handshakes, which are slow under the race
// detector on a loaded machine, time to finish or fail within a call.
func tlsOptions() *Options { return &Options{NodeTimeout: 2 * time.Second} }

// lockUnlockOn locks and unlocks a key through c, and checks through nodes
// that the key was on every node while held, and is gone after.
func lockUnlockOn(t *testing.T, c *Client, nodes []redis.UniversalClient) {
	t.Helper()
	l, err := c.Lock(t.Context(), "k", time.Minute)
	require.NoError(t, err)
	settle(c) // a round returns at its quorum: the last node's answer lands later
	for i, n := range nodes {
		assert.Equal(t, int64(1), n.Exists(t.Context(), "k").Val(), "node %d: no lock", i)
	}
	require.NoError(t, l.Unlock(t.Context()))
	settle(c) // so does an unlock
	for i, n := range nodes {
		assert.Zero(t, n.Exists(t.Context(), "k").Val(), "node %d: the lock left after Unlock", i)
	}
}

// tlsOnly makes each of the servers speak TLS on a new port, with a
// certificate for 127.0.0.1 and localhost from a CA made for the test, and
// stop listening for plain TCP. It returns the TLS addresses, and the
// CA as roots to trust.
func tlsOnly(t *testing.T, s *redisproc.Servers) ([]string, *x509.CertPool) {
	t.Helper()
	dir := t.TempDir()
	roots := makeCerts(t, dir)
	addrs := make([]string, len(s.Addrs))
	for i, a := range s.Addrs {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		port := ln.Addr().(*net.TCPAddr).Port
		require.NoError(t, ln.Close())
		_, err = redisproc.Do(t.Context(), a, "CONFIG", "SET",
			"tls-cert-file", filepath.Join(dir, "server.pem"), "tls-key-file", filepath.Join(dir, "server.key"),
			"tls-ca-cert-file", filepath.Join(dir, "ca.pem"), "tls-auth-clients", "no", "tls-port", strconv.Itoa(port))
		require.NoError(t, err)
		_, err = redisproc.Do(t.Context(), a, "CONFIG", "SET", "port", "0")
		require.NoError(t, err)
		addrs[i] = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	}
	return addrs, roots
}

// makeCerts writes to dir a CA (ca.pem) and a server certificate for
// 127.0.0.1 and localhost that it signed (server.pem, server.key), and
// returns the CA as a pool.
func makeCerts(t *testing.T, dir string) *x509.CertPool {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	ca := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "redquorum test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	caCert, err := x509.ParseCertificate(caDER)
	require.NoError(t, err)

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	srv := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srv, caCert, &key.PublicKey, caKey)
	require.NoError(t, err)
	keyDER, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)

	for name, b := range map[string]*pem.Block{
		"ca.pem": {Type: "CERTIFICATE", Bytes: caDER}, "server.pem": {Type: "CERTIFICATE", Bytes: srvDER},
		"server.key": {Type: "EC PRIVATE KEY", Bytes: keyDER},
	} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(b), 0o600))
	}
	roots := x509.NewCertPool()
	roots.AddCert(caCert)
	return roots
}

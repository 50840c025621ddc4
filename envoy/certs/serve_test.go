//go:build linux

package certs_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/envoy-agent/envoy-agent/envoy/certs"
	"github.com/envoy-agent/envoy-agent/internal/envoykit"
)

// chainsBootstrap is a bootstrap of one listener with a TLS filter chain
// for each of n pairs written into dir (dir/N.pem, dir/N.key).
func chainsBootstrap(t *testing.T, dir string, n int) []byte {
	t.Helper()
	var b strings.Builder
	b.WriteString("static_resources:\n  listeners:\n  - name: l\n    address: {socket_address: {address: 127.0.0.1, port_value: 1}}\n    filter_chains:\n")
	for i := range n {
		p := newPair(t, farFuture)
		cert, key := filepath.Join(dir, fmt.Sprint(i, ".pem")), filepath.Join(dir, fmt.Sprint(i, ".key"))
		writeFile(t, cert, p.cert)
		writeFile(t, key, p.key)
		fmt.Fprintf(&b, `    - filter_chain_match: {server_names: [s%d.test]}
      transport_socket:
        name: tls
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext
          common_tls_context:
            tls_certificates: [{certificate_chain: {filename: %q}, private_key: {filename: %q}}]
`, i, cert, key)
	}
	return []byte(b.String())
}

// mismatchedPair writes a certificate and another one's key, and returns
// a bootstrap that names them and the key's path.
func mismatchedPair(t *testing.T) (boot []byte, key string) {
	t.Helper()
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem")
	writeFile(t, cert, newPair(t, farFuture).cert)
	writeFile(t, key, newPair(t, farFuture).key)
	return envoykit.TLSBootstrap(cert, key, 1, 2), key
}

// waitDone waits for l to end, failing the test after a minute.
func waitDone(t *testing.T, l *certs.Loading) {
	t.Helper()
	select {
	case <-l.Done():
	case <-time.After(time.Minute):
		t.Fatal("the certificates' read did not end")
	}
}

// TestBackgroundRead: armed, the rewrite returns before the pairs are
// read; the read then serves every one, and the certificates' listeners
// (OnChange) hear of the whole read once, not of each pair.
func TestBackgroundRead(t *testing.T) {
	const n = 40
	boot := chainsBootstrap(t, t.TempDir(), n)
	m, _, run := newManager(t, &logs{t: t})
	changes := make(chan int, 2*n)
	m.OnChange = func() { changes <- len(m.Certificates()) }
	l := m.LoadNextInBackground()
	if _, err := m.RewriteBootstrap(boot, "envoy.yaml", run); err != nil {
		t.Fatal(err)
	}
	if !l.Started() {
		t.Fatal("the rewrite did not leave the read to the background")
	}
	waitDone(t, l)
	if err := l.Err(); err != nil {
		t.Fatal(err)
	}
	if got := len(m.Certificates()); got != n {
		t.Fatalf("%d certificates served, want %d", got, n)
	}
	calls := 0
	for got := -1; got != n; calls++ {
		select {
		case got = <-changes:
		case <-time.After(time.Minute):
			t.Fatalf("OnChange never heard of the %d certificates", n)
		}
	}
	if calls > 2 {
		t.Errorf("OnChange called %d times for one read of %d pairs; want at most 2 (the bootstrap's secrets, then the read)", calls, n)
	}
}

// TestBackgroundReadOfABadPair: a pair that is not whole ends the read
// with the error the rewrite returns when it reads first, naming the file
// and quoting none of it.
func TestBackgroundReadOfABadPair(t *testing.T) {
	boot, key := mismatchedPair(t)
	m, _, run := newManager(t, &logs{t: t})
	l := m.LoadNextInBackground()
	if _, err := m.RewriteBootstrap(boot, "envoy.yaml", run); err != nil {
		t.Fatalf("the rewrite read the files itself: %v", err)
	}
	waitDone(t, l)
	if err := l.Err(); err == nil || !strings.Contains(err.Error(), key) || strings.Contains(err.Error(), "BEGIN") {
		t.Fatalf("error %v, want one naming k.pem", err)
	}
}

// TestDisarm: a read no Serve took ends, empty, once disarmed, and the
// next rewrite reads its pairs itself again; a bootstrap with no
// certificate ends an armed read at once.
func TestDisarm(t *testing.T) {
	boot, _ := mismatchedPair(t)
	m, _, run := newManager(t, &logs{t: t})
	l := m.LoadNextInBackground()
	m.Disarm(l)
	waitDone(t, l)
	if l.Started() || l.Err() != nil {
		t.Fatalf("disarmed: started %v, %v", l.Started(), l.Err())
	}
	if _, err := m.RewriteBootstrap(boot, "envoy.yaml", run); err == nil {
		t.Fatal("after Disarm, the rewrite did not read the pair itself")
	}
	l = m.LoadNextInBackground()
	if _, err := m.RewriteBootstrap([]byte("static_resources: {listeners: []}\n"), "envoy.yaml", run); err != nil {
		t.Fatal(err)
	}
	waitDone(t, l)
	if l.Started() || l.Err() != nil {
		t.Fatalf("no certificate: started %v, %v", l.Started(), l.Err())
	}
}

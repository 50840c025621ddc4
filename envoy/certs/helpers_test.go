//go:build linux

package certs_test

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/envoy-agent/envoy-agent/envoy/certs"
	"github.com/envoy-agent/envoy-agent/envoy/xds"
)

// pair is a certificate and its key, PEM.
type pair struct {
	cert, key []byte
	serial    string
}

var serials struct {
	sync.Mutex
	n int64
}

// newPair makes a self-signed certificate for localhost with a serial of
// its own.
func newPair(t testing.TB, notAfter time.Time) pair {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return pairOf(t, k, &k.PublicKey, notAfter)
}

// newSmallRSAPair is newPair with a 1,024-bit RSA key, which Go's
// crypto/tls takes and Envoy refuses ("only RSA certificates with 2048-bit
// or larger keys are supported").
func newSmallRSAPair(t testing.TB, notAfter time.Time) pair {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	return pairOf(t, k, &k.PublicKey, notAfter)
}

// pairOf is the certificate of the key k (public key pub) and k, PEM.
func pairOf(t testing.TB, k crypto.Signer, pub any, notAfter time.Time) pair {
	t.Helper()
	serials.Lock()
	serials.n++
	n := big.NewInt(time.Now().UnixNano() + serials.n)
	serials.Unlock()
	tmpl := &x509.Certificate{
		SerialNumber: n,
		Subject:      pkix.Name{CommonName: "localhost", Organization: []string{"envoy-agent test"}},
		DNSNames:     []string{"localhost"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, k)
	if err != nil {
		t.Fatal(err)
	}
	kd, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return pair{
		cert:   pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		key:    pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kd}),
		serial: n.Text(16),
	}
}

// newManager is a Manager that logs to l and serves its secrets on an ADS
// server of the test's, in a private folder (run: the copies' folder).
func newManager(t testing.TB, l *logs) (m *certs.Manager, srv *xds.Server, run string) {
	t.Helper()
	run = t.TempDir()
	if err := os.Chmod(run, 0o700); err != nil {
		t.Fatal(err)
	}
	srv, err := xds.Listen(run, l)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	return certs.NewManager(l, srv, xds.Convert), srv, run
}

// logs collects a Manager's log lines.
type logs struct {
	t  testing.TB
	mu sync.Mutex
	l  []string
}

func (l *logs) add(level, format string, args ...any) {
	line := level + " " + fmt.Sprintf(format, args...)
	l.mu.Lock()
	l.l = append(l.l, line)
	l.mu.Unlock()
	l.t.Log(line)
}

func (l *logs) Infof(format string, args ...any)  { l.add("info", format, args...) }
func (l *logs) Warnf(format string, args ...any)  { l.add("warn", format, args...) }
func (l *logs) Errorf(format string, args ...any) { l.add("error", format, args...) }

// count is how many lines hold all of subs.
func (l *logs) count(subs ...string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
next:
	for _, line := range l.l {
		for _, s := range subs {
			if !strings.Contains(line, s) {
				continue next
			}
		}
		n++
	}
	return n
}

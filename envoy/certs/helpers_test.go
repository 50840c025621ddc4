//go:build linux

package certs_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"strings"
	"sync"
	"testing"
	"time"
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
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
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

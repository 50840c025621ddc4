//go:build linux

package certs_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/envoy-agent/envoy-agent/envoy/certs"
	"github.com/envoy-agent/envoy-agent/internal/envoykit"
	"golang.org/x/sys/unix"
)

// What a local user who can write the folder of a certificate or key (the
// agent warns of it, and serves them) can make of the agent's watch.

// servedPair serves a good pair from dir/c.pem and dir/k.pem and returns
// the Manager and its log.
func servedPair(t *testing.T, dir string) (*certs.Manager, *logs, pair) {
	t.Helper()
	p := newPair(t, farFuture)
	writeFile(t, filepath.Join(dir, "c.pem"), p.cert)
	writeFile(t, filepath.Join(dir, "k.pem"), p.key)
	l := &logs{t: t}
	m, _, run := newManager(t, l)
	if _, err := m.RewriteBootstrap(envoykit.TLSBootstrap(filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem"), 1, 2), "envoy.yaml", run); err != nil {
		t.Fatal(err)
	}
	return m, l, p
}

// repoint makes dir/k.pem a link to target, as `ln -sf target k.n && mv -T
// k.n k.pem` does.
func repoint(t *testing.T, dir, target string) {
	t.Helper()
	symlink(t, target, filepath.Join(dir, "k.n"))
	if err := os.Rename(filepath.Join(dir, "k.n"), filepath.Join(dir, "k.pem")); err != nil {
		t.Fatal(err)
	}
}

// TestKernelFileAsKeyHoldsNothing: a key re-pointed at /proc/kmsg (or a
// sysfs file) is refused before it is opened, and no read holds the lock
// that status needs. The read of /proc/kmsg waited for the next kernel
// message for ever, holding the Manager's lock: `envoy-agent status` failed
// after 9 s, a reload hung, and a stop never ended.
func TestKernelFileAsKeyHoldsNothing(t *testing.T) {
	for _, tt := range []struct{ target, want string }{
		{"/proc/kmsg", "procfs"},
		{"/sys/kernel/uevent_seqnum", "sysfs"},
	} {
		t.Run(tt.target, func(t *testing.T) {
			if tt.target == "/proc/kmsg" && os.Geteuid() != 0 {
				t.Skip("needs root: only root reads /proc/kmsg")
			}
			if _, err := os.Stat(tt.target); err != nil {
				t.Skip(err)
			}
			dir := t.TempDir()
			m, l, p := servedPair(t, dir)
			repoint(t, dir, tt.target)
			checked := make(chan struct{})
			go func() {
				m.Check()
				close(checked)
			}()
			deadline := time.After(10 * time.Second)
			for done := false; !done; {
				listed := make(chan []certs.Certificate, 1)
				go func() { listed <- m.Certificates() }()
				select {
				case cs := <-listed:
					if len(cs) != 1 || cs[0].Serial != p.serial {
						t.Fatalf("Certificates = %+v, want the pair in use", cs)
					}
				case <-deadline:
					t.Fatal("Certificates has not answered for 10 s: a read holds its lock")
				}
				select {
				case <-checked:
					done = true
				case <-deadline:
					t.Fatal("Check has not returned after 10 s: it waits on the key's read")
				default:
				}
			}
			if cs := m.Certificates(); len(cs) != 1 || !strings.Contains(cs[0].Error, tt.want) {
				t.Fatalf("Certificates = %+v, want the refusal (%s) beside the pair in use", cs, tt.want)
			}
			if l.count("renewal not taken", tt.want) != 1 {
				t.Fatalf("the refusal naming %s was not logged once", tt.want)
			}
		})
	}
}

// TestWatchCostsTheSameWhateverTheDepth: a key behind a chain of 2,000
// folders is watched in as many folders as one beside its certificate.
// Every folder above a file was watched, and re-added after every check:
// 54-72 % of a core while a user touched a file at the chain's bottom.
func TestWatchCostsTheSameWhateverTheDepth(t *testing.T) {
	dir := t.TempDir()
	m, _, p := servedPair(t, dir)
	shallow := len(certs.WatchDirs(m))
	// Made one level at a time from the folder above (a path from dir
	// would be walked again at each level).
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	rel := "deep"
	for i, name := 0, "deep"; i < 2000; i, name = i+1, "d" {
		if err := unix.Mkdirat(fd, name, 0o700); err != nil {
			t.Fatal(err)
		}
		next, err := unix.Openat(fd, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		if err != nil {
			t.Fatal(err)
		}
		fd = next
		if i > 0 {
			rel += "/d"
		}
	}
	kfd, err := unix.Openat(fd, "k.pem", unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, 0o600)
	unix.Close(fd)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(kfd), "k.pem")
	if _, err := f.Write(p.key); err != nil {
		t.Fatal(err)
	}
	f.Close()
	repoint(t, dir, rel+"/k.pem")
	m.Check()
	deep := certs.WatchDirs(m)
	if len(deep) > shallow+1 {
		t.Fatalf("with the key 2,000 folders down, %d folders are watched (%d with the key beside its certificate)", len(deep), shallow)
	}
	t.Logf("folders watched: %d with the key beside its certificate, %d with it 2,000 folders down", shallow, len(deep))
}

// TestKeyFileContentIsNeverLogged: a key pointed at a file holding
// "-----BEGIN DBPASS=Tr0ub4dor&3-----" was logged, and shown by status, as
// crypto/tls's "skipping PEM blocks of the following types:
// [DBPASS=Tr0ub4dor&3]". Now the log and the status name the file and the
// kind of problem only.
func TestKeyFileContentIsNeverLogged(t *testing.T) {
	const secret = "Tr0ub4dor&3"
	dir := t.TempDir()
	other := filepath.Join(t.TempDir(), "dbpass")
	writeFile(t, other, []byte("-----BEGIN DBPASS="+secret+"-----\nAAAA\n-----END DBPASS="+secret+"-----\n"))
	m, l, _ := servedPair(t, dir)
	repoint(t, dir, other)
	m.Check()
	cs := m.Certificates()
	if len(cs) != 1 || cs[0].Error == "" {
		t.Fatalf("Certificates = %+v, want the refusal", cs)
	}
	if strings.Contains(cs[0].Error, secret) || l.count(secret) != 0 || l.count("k.pem", "no PEM private key") != 1 {
		t.Fatalf("the file's content reached the status (%q) or the log:\n%s", cs[0].Error, strings.Join(l.l, "\n"))
	}
	// A first start refused for it says as little.
	m, _, run := newManager(t, &logs{t: t})
	_, err := m.RewriteBootstrap(envoykit.TLSBootstrap(filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem"), 1, 2), "envoy.yaml", run)
	if err == nil || strings.Contains(err.Error(), secret) {
		t.Fatalf("first start: %v, want a refusal without the file's content", err)
	}
}

// TestCertificateNamesArePrintable: a certificate's subject and DNS names
// may carry terminal escapes (a third party's CA bundle too). status showed
// a forged window title and a forged line; validate's expiry warning was
// erased and replaced by a green "OK: all certificates valid". Now every
// control character reaches the output escaped.
func TestCertificateNamesArePrintable(t *testing.T) {
	dir := t.TempDir()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(42),
		Subject: pkix.Name{
			Organization: []string{"x\x1b]0;forged title\x07"},
			CommonName:   "\r\x1b[2K\x1b[32mOK: all certificates valid for 365 days\x1b[0m",
		},
		DNSNames:  []string{"a\n\x1b[1A\x1b[2K  forged line"},
		NotBefore: time.Now().Add(-time.Hour),
		NotAfter:  time.Now().Add(5 * 24 * time.Hour),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kd, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "c.pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	writeFile(t, filepath.Join(dir, "k.pem"), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kd}))
	cs, err := certs.Inspect(envoykit.TLSBootstrap(filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem"), 1, 2), "envoy.yaml")
	if err != nil || len(cs) != 1 {
		t.Fatalf("Inspect: %+v, %v", cs, err)
	}
	warnings := certs.ExpiryWarnings(cs, time.Now())
	shown := append([]string{cs[0].Subject}, cs[0].DNSNames...)
	shown = append(shown, warnings...)
	for _, s := range shown {
		if strings.ContainsAny(s, "\x1b\x07\r\n") {
			t.Fatalf("%q reaches the terminal with control characters", s)
		}
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], `\x1b]0\;forged title\x07`) {
		t.Fatalf("ExpiryWarnings = %q, want the subject escaped", warnings)
	}
}

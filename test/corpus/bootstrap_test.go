//go:build linux

package corpus

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"text/template"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/envoy-agent/envoy-agent/internal/envoykit"
)

// site is what one case's bootstrap names: its ports and its certificate
// files, chosen for the test (the examples use fixed ports and docker
// names; two tests on one host cannot).
type site struct {
	Listener, Admin      int
	UpstreamA, UpstreamB int // HTTP services; an edit of a cluster moves it from A to B
	UDPA, UDPB           int // UDP services, likewise
	Authz, Collector     int // the ext_authz service, the Zipkin collector
	CertA, KeyA          string
	CertB, KeyB          string
}

// revision is one version of a case's bootstrap: the first (v1), the
// valid edit (v2), and the invalid edit on top of it.
type revision struct {
	site
	Version string // the answers' x-corpus-version
	Invalid bool
}

// The revisions a case goes through.
func first(s site) revision   { return revision{site: s, Version: "v1"} }
func edited(s site) revision  { return revision{site: s, Version: "v2"} }
func invalid(s site) revision { return revision{site: s, Version: "v2", Invalid: true} }

// missingCluster is where the invalid edit sends a route.
const missingCluster = "no-such-cluster"

// Route is the cluster a route sends to: cluster, or in the invalid edit
// one that does not exist (Envoy refuses that in a bootstrap, and accepts
// it over RDS unless validate_clusters is set: a reload that validates
// less than the whole bootstrap must still refuse it).
func (r revision) Route(cluster string) string {
	if r.Invalid {
		return missingCluster
	}
	return cluster
}

// Timeout is a cluster's connect_timeout: negative, which Envoy refuses,
// in the invalid edit of a bootstrap with no route.
func (r revision) Timeout() string {
	if r.Invalid {
		return "-1s"
	}
	return "0.25s"
}

// Pick is a cluster's endpoint: first, and edited after the edit.
func (r revision) Pick(first, edited int) int {
	if r.Version == "v1" {
		return first
	}
	return edited
}

// render writes the case's bootstrap at that revision to path, with the
// edits by hand applied (nil: none), atomically as a deploy tool would.
func render(t *testing.T, name string, r revision, byHand func(*yaml.Node) error, path string) {
	t.Helper()
	tmpl, err := template.ParseFiles(filepath.Join("testdata", name+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := tmpl.Execute(&b, r); err != nil {
		t.Fatal(err)
	}
	out := b.Bytes()
	if byHand != nil {
		if out, err = editYAML(out, byHand); err != nil {
			t.Fatalf("%s: the edit by hand: %v", name, err)
		}
	}
	if err := envoykit.WriteFileAtomic(path, out); err != nil {
		t.Fatal(err)
	}
}

// editYAML applies edit to the bootstrap's top-level mapping.
func editYAML(text []byte, edit func(*yaml.Node) error) ([]byte, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(text, &doc); err != nil {
		return nil, err
	}
	if len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, fmt.Errorf("not a mapping")
	}
	if err := edit(doc.Content[0]); err != nil {
		return nil, err
	}
	return yaml.Marshal(&doc)
}

// mapValue is the value of key in the mapping m, or nil.
func mapValue(m *yaml.Node, key string) *yaml.Node {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// adminOnSocket is the edit by hand a bootstrap without an admin needs
// today: an admin on the agent's default socket, <run_dir>/admin.sock.
func adminOnSocket(sock string) func(*yaml.Node) error {
	return func(root *yaml.Node) error {
		var admin yaml.Node
		if err := yaml.Unmarshal(fmt.Appendf(nil, "address: {pipe: {path: %q, mode: 0600}}", sock), &admin); err != nil {
			return err
		}
		root.Content = append(root.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: "admin"}, admin.Content[0])
		return nil
	}
}

// adminOnLoopback is the edit by hand a bootstrap with its admin on every
// address needs today (with admin_port in the agent's file): the same
// port on 127.0.0.1, which keeps a cluster to the admin's address working.
func adminOnLoopback(root *yaml.Node) error {
	sa := mapValue(mapValue(mapValue(root, "admin"), "address"), "socket_address")
	addr := mapValue(sa, "address")
	if addr == nil {
		return fmt.Errorf("no admin.address.socket_address.address")
	}
	addr.Value = "127.0.0.1"
	return nil
}

// writePair writes a self-signed certificate for name and its key into
// dir, as an operator's certificate files.
func writePair(t *testing.T, dir, name string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kd, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kd}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

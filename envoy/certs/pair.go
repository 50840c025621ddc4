//go:build linux

package certs

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/envoy-agent/envoy-agent/envoy/xds/ads"
	"github.com/envoy-agent/envoy-agent/internal/bootyaml"
	"github.com/envoy-agent/envoy-agent/internal/printable"
	"github.com/envoy-agent/envoy-agent/internal/safefile"
)

// MaxFileSize bounds a certificate, key or CA file the agent reads.
const MaxFileSize = 1 << 20

// Certificate describes a certificate in use, for the status and the
// metrics. It holds no key material.
type Certificate struct {
	// File is the operator's certificate (or CA bundle) file.
	File string `json:"file"`
	// KeyFile is its private key's file ("" for a CA bundle).
	KeyFile string `json:"key_file,omitempty"`
	// Secret is the SDS secret's name.
	Secret string `json:"secret"`
	// CA is set for a trusted CA bundle (its first certificate).
	CA       bool      `json:"ca,omitempty"`
	Subject  string    `json:"subject"`
	DNSNames []string  `json:"dns_names,omitempty"`
	Serial   string    `json:"serial"`
	NotAfter time.Time `json:"not_after"`
	// Error is the renewal refused last, with the file it names, while the
	// pair in use goes on serving; "" when the files are what is served.
	Error string `json:"error,omitempty"`
}

// DaysLeft is how many whole days are left until NotAfter (negative once
// expired).
func (c Certificate) DaysLeft(now time.Time) int {
	d := c.NotAfter.Sub(now)
	days := int(d / (24 * time.Hour))
	if d < 0 && d%(24*time.Hour) != 0 {
		days--
	}
	return days
}

// material is what a secret's files held when read, checked, and the
// secret Envoy is served of them (converted once taken).
type material struct {
	sum    [32]byte // of the files' bytes, to tell a change
	cert   []byte
	key    []byte
	info   Certificate
	files  string       // which files were read (their identities), to tell a move
	served ads.Resource // the secret, converted
	// previous is the pair served before this one, served again should
	// Envoy reject this one.
	previous *material
}

// FileError is a file of a pair refused: unreadable, empty, unparsable, or a
// key that does not match its certificate. Its message names the file and
// never holds its content.
type FileError struct {
	File string
	Msg  string
}

func (e *FileError) Error() string { return printable.String(e.File + ": " + e.Msg) }

// load reads and checks s's files.
func load(s Secret) (*material, error) {
	cert, certID, err := readFile(s.CertFile)
	if err != nil {
		return nil, err
	}
	m := &material{cert: cert, files: fmt.Sprint(certID)}
	h := sha256.New()
	h.Write(cert)
	if s.Kind == KindTrustedCA {
		first, err := parseBundle(s.CertFile, cert)
		if err != nil {
			return nil, err
		}
		m.info = describe(first, s)
		m.info.CA = true
	} else {
		key, keyID, err := readFile(s.KeyFile)
		if err != nil {
			return nil, err
		}
		h.Write([]byte{0})
		h.Write(key)
		m.key = key
		m.files += fmt.Sprint(keyID)
		if _, err := parseBundle(s.CertFile, cert); err != nil {
			return nil, err
		}
		pair, err := tls.X509KeyPair(cert, key)
		if err != nil {
			return nil, &FileError{File: s.KeyFile, Msg: "does not go with " + s.CertFile + ": " + keyProblem(key)}
		}
		leaf := pair.Leaf // parsed by X509KeyPair (Go 1.23 on)
		if leaf == nil {
			if leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
				return nil, &FileError{File: s.CertFile, Msg: "cannot parse its certificate"}
			}
		}
		m.info = describe(leaf, s)
	}
	copy(m.sum[:], h.Sum(nil))
	return m, nil
}

// keyProblem says what is wrong with a key file that crypto/tls refused,
// in words of the agent's own: crypto/tls's errors quote the file (the
// types of its PEM blocks: "[DBPASS=...]"), and a key file may be pointed
// at any file. It names kinds and counts only.
func keyProblem(key []byte) string {
	blocks, keys := 0, 0
	for rest := key; ; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		blocks++
		if strings.HasSuffix(b.Type, "PRIVATE KEY") {
			keys++
		}
	}
	switch {
	case blocks == 0:
		return "it holds no PEM data"
	case keys == 0:
		return fmt.Sprintf("it holds no PEM private key (%d other PEM blocks)", blocks)
	}
	return "its private key cannot be parsed, or is not the key of that certificate"
}

func readFile(path string) ([]byte, safefile.Identity, error) {
	b, id, err := safefile.ReadIdentified(path, MaxFileSize)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			return nil, id, &FileError{File: path, Msg: pe.Err.Error()}
		}
		return nil, id, &FileError{File: path, Msg: fileReason(err, path)}
	}
	if len(b) == 0 {
		return nil, id, &FileError{File: path, Msg: "is empty"}
	}
	return b, id, nil
}

// fileReason is safefile's reason without the path it starts with.
func fileReason(err error, path string) string {
	return strings.TrimLeft(strings.TrimPrefix(err.Error(), path), ": ")
}

// parseBundle parses every certificate of a PEM bundle and returns the
// first.
func parseBundle(path string, data []byte) (*x509.Certificate, error) {
	var first *x509.Certificate
	rest := data
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, &FileError{File: path, Msg: "holds a certificate that cannot be parsed"}
		}
		if first == nil {
			first = c
		}
	}
	if first == nil {
		return nil, &FileError{File: path, Msg: "holds no PEM certificate"}
	}
	return first, nil
}

// describe is what status and the metrics show of c: its names with
// every control character escaped (printable), since a certificate's
// subject or DNS names (a third party's CA bundle's too) reach the
// operator's terminal.
func describe(c *x509.Certificate, s Secret) Certificate {
	return Certificate{
		File:     printable.String(s.CertFile),
		KeyFile:  printable.String(s.KeyFile),
		Secret:   printable.String(s.Name),
		Subject:  printable.String(c.Subject.String()),
		DNSNames: printable.Strings(c.DNSNames),
		Serial:   c.SerialNumber.Text(16),
		NotAfter: c.NotAfter,
	}
}

// secretNode is the secret Envoy is served of s, as YAML for the
// converter (ads.Convert): its PEM inline.
func secretNode(s Secret, m *material) *yaml.Node {
	inline := func(pem []byte) *yaml.Node { return bootyaml.Mapping("inline_string", bootyaml.Str(string(pem))) }
	if s.Kind == KindTrustedCA {
		return bootyaml.Mapping("name", bootyaml.Str(s.Name), "validation_context", bootyaml.Mapping("trusted_ca", inline(m.cert)))
	}
	return bootyaml.Mapping("name", bootyaml.Str(s.Name), "tls_certificate", bootyaml.Mapping(
		"certificate_chain", inline(m.cert), "private_key", inline(m.key)))
}

// ExpiryWarning is how close to its end a certificate in use is warned
// about (`envoy-agent validate`).
const ExpiryWarning = 14 * 24 * time.Hour

// Inspect reads the certificates and CA bundles that the bootstrap data
// (name is its file name) names by file, as a Manager would serve them,
// and writes nothing. It returns those it could read and, for the others,
// an error naming the file.
func Inspect(data []byte, name string) ([]Certificate, error) {
	res, err := Rewrite(data, name, os.TempDir()) // the folder only names the server's socket in the copy
	if err != nil {
		return nil, err
	}
	var out []Certificate
	var errs []error
	for _, s := range res.Secrets {
		m, err := load(s)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, m.info)
	}
	return out, errors.Join(errs...)
}

// ExpiryWarnings are the warnings `validate` gives for certificates that
// have expired or expire within ExpiryWarning of now.
func ExpiryWarnings(cs []Certificate, now time.Time) []string {
	var out []string
	for _, c := range cs {
		switch left := c.NotAfter.Sub(now); {
		case left <= 0:
			out = append(out, fmt.Sprintf("certificate %s (%s) expired on %s", c.File, c.Subject, c.NotAfter.UTC().Format(time.RFC3339)))
		case left < ExpiryWarning:
			out = append(out, fmt.Sprintf("certificate %s (%s) expires on %s, in %d days", c.File, c.Subject, c.NotAfter.UTC().Format(time.RFC3339), c.DaysLeft(now)))
		}
	}
	return out
}

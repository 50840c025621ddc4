package envoykit

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"strconv"
	"strings"
	"time"
)

// ServingPair is a fresh self-signed certificate for localhost, valid
// until notAfter, with its private key (both PEM) and its serial (hex).
func ServingPair(notAfter time.Time) (certPEM, keyPEM, serial string, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", "", err
	}
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 64))
	if err != nil {
		return "", "", "", err
	}
	tmpl := &x509.Certificate{SerialNumber: n, Subject: pkix.Name{CommonName: "localhost"}, DNSNames: []string{"localhost"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: notAfter}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return "", "", "", err
	}
	kd, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return "", "", "", err
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kd})), n.Text(16), nil
}

// TLSSerial is the serial (hex) of the certificate that a new TLS
// handshake with 127.0.0.1:port sees.
func TLSSerial(port int) (string, error) {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", "127.0.0.1:"+strconv.Itoa(port), &tls.Config{InsecureSkipVerify: true, ServerName: "localhost"})
	if err != nil {
		return "", err
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber.Text(16), nil
}

// SecretTLSBootstrap is TLSBootstrap with its certificate and key inline
// in a static secret ("srv") that the listener names.
func SecretTLSBootstrap(certPEM, keyPEM string, port, admin int) []byte {
	b := string(TLSBootstrap("CERT", "KEY", port, admin))
	b = strings.Replace(b, `            tls_certificates:
            - certificate_chain: {filename: "CERT"}
              private_key: {filename: "KEY"}
`, "            tls_certificate_sds_secret_configs: [{name: srv}]\n", 1)
	return []byte(strings.Replace(b, "static_resources:\n", fmt.Sprintf(`static_resources:
  secrets:
  - name: srv
    tls_certificate: {certificate_chain: {inline_string: %s}, private_key: {inline_string: %s}}
`, strconv.Quote(certPEM), strconv.Quote(keyPEM)), 1))
}

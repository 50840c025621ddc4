//go:build linux

package corpus

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// probe is one request to a case's listener, sent once on a connection of
// its own: no retry, so that the answer is what a client sees.
type probe struct {
	kind   string // "http", "ws" (an upgrade), "tcp" (HTTP/1.1 through a tcp_proxy), "udp", "twice" (two requests on one connection)
	path   string
	sni    string // over TLS with this server name, when set
	header string // one more request header, "Name: value"
}

func (p probe) String() string {
	s := p.kind + " " + p.path
	if p.sni != "" {
		s += " tls:" + p.sni
	}
	if p.header != "" {
		s += " +" + p.header
	}
	return s
}

// probeTimeout bounds one probe, from the dial to the last byte.
const probeTimeout = 5 * time.Second

// ignoredHeaders change from one answer to the next, or the body's text
// covers them.
var ignoredHeaders = []string{"date", "content-length", "x-envoy-upstream-service-time", "x-request-id"}

// largeBody is the size past which an answer's body is not compared:
// Envoy's /stats/prometheus, whose figures differ between any two Envoys.
const largeBody = 1 << 10

// ask sends the probe to port and returns the answer as the test compares
// it: the status, the headers and the body, or what went wrong.
func (p probe) ask(port int) string {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	if p.kind == "udp" {
		return askUDP(addr)
	}
	conn, err := net.DialTimeout("tcp", addr, probeTimeout)
	if err != nil {
		return "error: " + errClass(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(probeTimeout))
	cert := ""
	if p.sni != "" {
		tc := tls.Client(conn, &tls.Config{ServerName: p.sni, InsecureSkipVerify: true}) //nolint:gosec // the probe names the certificate it got; it trusts nothing
		if err := tc.Handshake(); err != nil {
			return "error: TLS handshake: " + errClass(err)
		}
		cert = "certificate " + tc.ConnectionState().PeerCertificates[0].Subject.CommonName + "; "
		conn = tc
	}
	br := bufio.NewReader(conn)
	n := 1
	if p.kind == "twice" {
		n = 2
	}
	var answers []string
	for range n {
		req := "GET " + p.path + " HTTP/1.1\r\nHost: corpus.example\r\n"
		if p.header != "" {
			req += p.header + "\r\n"
		}
		if p.kind == "ws" {
			req += "Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
		}
		if _, err := io.WriteString(conn, req+"\r\n"); err != nil {
			return cert + "error: " + errClass(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return cert + strings.Join(append(answers, "error: "+errClass(err)), " | ")
		}
		answers = append(answers, describe(resp))
	}
	return cert + strings.Join(answers, " | ")
}

// describe is an answer's status, headers (sorted, without ignoredHeaders)
// and body.
func describe(resp *http.Response) string {
	defer resp.Body.Close()
	var hs []string
	for k, vs := range resp.Header {
		k = strings.ToLower(k)
		if !slices.Contains(ignoredHeaders, k) {
			hs = append(hs, k+": "+strings.Join(vs, ","))
		}
	}
	slices.Sort(hs)
	body := ""
	if resp.StatusCode != http.StatusSwitchingProtocols {
		b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		switch {
		case err != nil:
			body = "error: " + errClass(err)
		case len(b) > largeBody:
			body = "a large body"
		default:
			body = strings.TrimSpace(string(b))
		}
	}
	return fmt.Sprintf("%d {%s} %q", resp.StatusCode, strings.Join(hs, "; "), body)
}

func askUDP(addr string) string {
	conn, err := net.Dial("udp", addr)
	if err != nil {
		return "error: " + errClass(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(probeTimeout))
	if _, err := conn.Write([]byte("corpus")); err != nil {
		return "error: " + errClass(err)
	}
	buf := make([]byte, 2048)
	n, err := conn.Read(buf)
	if err != nil {
		return "no answer: " + errClass(err)
	}
	return "udp " + string(buf[:n])
}

// errClass names an error without the addresses in it.
func errClass(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return "closed" // which of them a client sees of a close is a race
	}
	s := err.Error()
	if i := strings.LastIndex(s, ": "); i >= 0 {
		s = s[i+2:]
	}
	return s
}

// askAll sends every probe once, in order.
func askAll(probes []probe, port int) []string {
	out := make([]string, len(probes))
	for i, p := range probes {
		out[i] = p.ask(port)
	}
	return out
}

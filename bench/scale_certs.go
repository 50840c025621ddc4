package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/envoy-agent/envoy-agent/internal/envoykit"
)

// The certificates part's bounds.
const (
	// renewalWait is how long a renewal is given to reach new handshakes:
	// the target (2 s) and more, to tell "late" from "never".
	renewalWait = 5 * time.Second
	// renewalTarget is the target for a renewal.
	renewalTarget = 2 * time.Second
	// servedWait bounds the wait for every name to be served after a start.
	servedWait = 60 * time.Second
	// handshakers is how many handshakes check the names at once.
	handshakers = 8
)

// scaleCertsSite is the certificates part's bootstrap: one TLS listener
// with n filter chains, chain K matching the server name certName(K) and
// serving the certificate of the files host-K.crt and host-K.key (named by
// file), each a tcp_proxy to the upstream. (A connection manager in each
// chain makes the bootstrap more than the agent parses: it refuses more
// than 240,000 YAML tokens, about 300 for each of 1,000 such chains.)
type scaleCertsSite struct {
	*site
	serials []string // each name's certificate serial (hex)
}

func certName(k int) string { return "host-" + strconv.Itoa(k) + ".example.com" }

func (s *scaleCertsSite) certFiles(k int) (cert, key string) {
	base := filepath.Join(s.dir, "certs", "host-"+strconv.Itoa(k))
	return base + ".crt", base + ".key"
}

// newScaleCertsSite writes n certificates and the bootstrap.
func (b *bench) newScaleCertsSite(name string, n, upstream int) (*scaleCertsSite, error) {
	dir, err := b.dir(name)
	if err != nil {
		return nil, err
	}
	ports, err := envoykit.FreePorts(3)
	if err != nil {
		return nil, err
	}
	s := &scaleCertsSite{site: &site{dir: dir, admin: ports[0], listeners: ports[1:2], spare: ports[2:], bootPath: filepath.Join(dir, "envoy.yaml")},
		serials: make([]string, n)}
	if err := os.MkdirAll(filepath.Join(dir, "certs"), 0o755); err != nil {
		return nil, err
	}
	var boot strings.Builder
	fmt.Fprintf(&boot, `admin: {address: {socket_address: {address: 127.0.0.1, port_value: %d}}}
static_resources:
  listeners:
  - name: tls
    address: {socket_address: {address: 127.0.0.1, port_value: %d}}
    listener_filters:
    - name: envoy.filters.listener.tls_inspector
      typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.listener.tls_inspector.v3.TlsInspector}
    filter_chains:
`, s.admin, s.listener())
	for k := range n {
		if err := s.renew(k); err != nil {
			return nil, err
		}
		cert, key := s.certFiles(k)
		fmt.Fprintf(&boot, `    - filter_chain_match: {server_names: [%q]}
      transport_socket:
        name: envoy.transport_sockets.tls
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext
          common_tls_context:
            tls_certificates: [{certificate_chain: {filename: %q}, private_key: {filename: %q}}]
      filters: [{name: tcp, typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy, stat_prefix: host_%d, cluster: upstream}}]
`, certName(k), cert, key, k)
	}
	fmt.Fprintf(&boot, `  clusters:
  - name: upstream
    type: STATIC
    load_assignment:
      cluster_name: upstream
      endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: %d}}}}]}]
`, upstream)
	return s, envoykit.WriteFileAtomic(s.bootPath, []byte(boot.String()))
}

// renew writes a new pair for name k: each file beside its place, then
// renamed over it, the key first (as certbot's and lego's renewals leave a
// whole pair).
func (s *scaleCertsSite) renew(k int) error {
	certPEM, keyPEM, serial, err := envoykit.ServingPair(time.Now().Add(90 * 24 * time.Hour))
	if err != nil {
		return err
	}
	cert, key := s.certFiles(k)
	if err := envoykit.WriteFileAtomic(key, []byte(keyPEM)); err != nil {
		return err
	}
	if err := envoykit.WriteFileAtomic(cert, []byte(certPEM)); err != nil {
		return err
	}
	s.serials[k] = serial
	return nil
}

// serialOf is the serial of the certificate a new handshake for name k
// gets.
func (s *scaleCertsSite) serialOf(k int) (string, error) {
	d := &net.Dialer{Timeout: time.Second}
	c, err := tls.DialWithDialer(d, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(s.listener())),
		&tls.Config{ServerName: certName(k), InsecureSkipVerify: true}) //nolint:gosec // the serial is what is checked
	if err != nil {
		return "", err
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber.Text(16), nil
}

// waitAllServed makes handshakes for every name until each got its own
// certificate, or servedWait passes, or abort closes (the process exited).
func (s *scaleCertsSite) waitAllServed(ctx context.Context, abort <-chan struct{}) error {
	todo := make(chan int, len(s.serials))
	for k := range s.serials {
		todo <- k
	}
	close(todo)
	deadline := time.Now().Add(servedWait)
	errs := make(chan error, handshakers)
	var wg sync.WaitGroup
	for range handshakers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range todo {
				if err := s.waitServed(ctx, k, deadline, abort); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs // the first, or nil
}

// waitServed makes handshakes for name k, 5 ms apart, until one gets its
// certificate.
func (s *scaleCertsSite) waitServed(ctx context.Context, k int, deadline time.Time, abort <-chan struct{}) error {
	for {
		got, err := s.serialOf(k)
		if err == nil && got == s.serials[k] {
			return nil
		}
		select {
		case <-abort:
			return fmt.Errorf("the process exited before %s was served", certName(k))
		default:
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s: serial %q (%v) after %s, want %s", certName(k), got, err, servedWait, s.serials[k])
		}
		sleep(ctx, 5*time.Millisecond)
	}
}

// scaleCerts is the certificates part: the agent and a bare Envoy started
// on n certificates, taking turns, each time until every name is served;
// then, on the last start of each, a renewal of the middle name.
func (b *bench) scaleCerts(ctx context.Context, n, starts int) (ScaleCerts, error) {
	r := ScaleCerts{N: n, Starts: starts}
	agentSite, err := b.newScaleCertsSite("scale-certs-agent", n, b.up.Port)
	if err != nil {
		return r, err
	}
	bareSite, err := b.newScaleCertsSite("scale-certs-bare", n, b.up.Port)
	if err != nil {
		return r, err
	}
	drain := quickDrain
	drain.LogLevel, drain.ReloadMethod = "info", "auto"
	run, err := b.scaleAgent(agentSite.site, drain)
	if err != nil {
		return r, err
	}
	defer run.close(ctx)
	var agentReady, agentServed, bareReady, bareServed []time.Duration
	for i := range starts {
		last := i == starts-1
		// The agent.
		if ctx.Err() == nil {
			ready, served, renewal, err := b.certsAgentOnce(ctx, run, agentSite, last)
			if err != nil {
				if r.Agent.Failure == "" {
					r.Agent.Failure = fmt.Sprintf("start %d: %v", i+1, err)
				}
				b.logf("scale: certificates, agent start %d: %v", i+1, err)
			} else {
				r.Agent.StartsOK++
				agentReady, agentServed = append(agentReady, ready), append(agentServed, served)
			}
			if renewal != nil {
				r.Agent.Renewal = renewal
			}
		}
		// The bare Envoy.
		if ctx.Err() == nil {
			ready, served, renewal, err := b.certsBareOnce(ctx, bareSite, last)
			if err != nil {
				if r.Bare.Failure == "" {
					r.Bare.Failure = fmt.Sprintf("start %d: %v", i+1, err)
				}
			} else {
				r.Bare.StartsOK++
				bareReady, bareServed = append(bareReady, ready), append(bareServed, served)
			}
			if renewal != nil {
				r.Bare.Renewal = renewal
			}
		}
	}
	r.Agent.ReadyMs, r.Agent.ServedMs = dist(agentReady), dist(agentServed)
	r.Bare.ReadyMs, r.Bare.ServedMs = dist(bareReady), dist(bareServed)
	b.logf("scale: %d certificates: agent %d/%d starts (ready median %.0f ms), bare %d/%d (ready median %.0f ms)",
		n, r.Agent.StartsOK, starts, r.Agent.ReadyMs.Median, r.Bare.StartsOK, starts, r.Bare.ReadyMs.Median)
	if ctx.Err() != nil {
		return r, ctx.Err()
	}
	return r, nil
}

// certsAgentOnce starts the agent, waits for READY=1 and every name
// served, renews the middle name when renew is set, and quits the agent.
func (b *bench) certsAgentOnce(ctx context.Context, run *agentRun, s *scaleCertsSite, renew bool) (ready, served time.Duration, renewal *Renewal, err error) {
	mark, logMark := run.ns.Mark(), fileSize(b.logPath("scale-certs-agent"))
	p, err := b.startAgentRun(run, "scale-certs-agent")
	if err != nil {
		return 0, 0, nil, err
	}
	defer func() { _ = quitAgent(context.WithoutCancel(ctx), p, run.controlSocket()) }()
	at, err := waitNotify(ctx, run.ns, p, "READY=1", mark, startTimeout+servedWait)
	if err != nil {
		return 0, 0, nil, whyExited(p, logMark, err)
	}
	ready = at.Sub(p.Started())
	if err := s.waitAllServed(ctx, p.Done()); err != nil {
		return ready, 0, nil, whyExited(p, logMark, err)
	}
	served = time.Since(p.Started())
	if renew {
		pid := servingPid(p.pid())
		logMark := fileSize(p.logPath)
		renewal = s.renewal(ctx, len(s.serials)/2)
		renewal.SamePid = pid > 0 && servingPid(p.pid()) == pid
		renewal.Reloads = strings.Count(readFrom(p.logPath, logMark), "event=reload ")
	}
	return ready, served, renewal, nil
}

// certsBareOnce is certsAgentOnce for a bare Envoy.
func (b *bench) certsBareOnce(ctx context.Context, s *scaleCertsSite, renew bool) (ready, served time.Duration, renewal *Renewal, err error) {
	p, err := b.startEnvoy("scale-certs-bare", s.bootPath)
	if err != nil {
		return 0, 0, nil, err
	}
	defer func() { _ = p.stop(context.WithoutCancel(ctx), 10*time.Second) }()
	at, err := pollReady(ctx, p, s.admin, time.Millisecond, startTimeout+servedWait)
	if err != nil {
		return 0, 0, nil, err
	}
	ready = at.Sub(p.Started())
	if err := s.waitAllServed(ctx, p.Done()); err != nil {
		return ready, 0, nil, p.failure(err)
	}
	served = time.Since(p.Started())
	if renew {
		renewal = s.renewal(ctx, len(s.serials)/2)
		renewal.SamePid = p.Running()
		if !renewal.Served {
			renewal.Note = "a bare Envoy reads a certificate named by file once, at start: a renewal needs a restart"
		}
	}
	return ready, served, renewal, nil
}

// renewal renews name k and waits, handshake after handshake (5 ms apart),
// until one gets the new certificate, at most renewalWait.
func (s *scaleCertsSite) renewal(ctx context.Context, k int) *Renewal {
	r := &Renewal{Name: certName(k), WaitMs: ms(renewalWait)}
	if err := s.renew(k); err != nil {
		r.Note = err.Error()
		return r
	}
	t := time.Now()
	for time.Since(t) < renewalWait && ctx.Err() == nil {
		if got, err := s.serialOf(k); err == nil && got == s.serials[k] {
			r.Served, r.ServedMs = true, ms(time.Since(t))
			return r
		}
		sleep(ctx, 5*time.Millisecond)
	}
	return r
}

// readFrom is a file's text from byte offset on.
func readFrom(path string, offset int64) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return string(b[min(offset, int64(len(b))):])
}

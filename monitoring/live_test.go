//go:build linux

package monitoring

// The live check: a real Prometheus, started here on loopback with short
// intervals, scrapes a real agent running a real Envoy, and evaluates the
// shipped rules (their `for:` shortened to seconds). Run inside nsrun, as
// every test that starts Envoy.

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"text/template"
	"time"

	"github.com/envoy-agent/envoy-agent/internal/envoykit"
	"github.com/envoy-agent/envoy-agent/service/claims"
)

// livePoll bounds each wait for Prometheus to see something.
const livePoll = 60 * time.Second

func TestLivePrometheusAlerts(t *testing.T) {
	prom, err := exec.LookPath("prometheus")
	if err != nil {
		t.Skip("prometheus is not installed (make promtool installs Debian's prometheus package)")
	}
	dir := shortTempDir(t)
	a := startLiveAgent(t, dir)
	p := startPrometheus(t, prom, dir, a.promPort)

	// Traffic (the health checks Envoy sends on their own).
	for _, path := range []string{"/", "/"} {
		if _, err := envoykit.Get(envoykit.URL(a.ports.Listener, path), 5*time.Second); err != nil {
			t.Fatalf("GET %s through Envoy: %v", path, err)
		}
	}

	t.Run("healthy agent fires nothing", func(t *testing.T) {
		// Ten evaluations after the first scrape: every rule evaluated without error, no alert.
		if !envoykit.Eventually(livePoll, func() bool {
			v, ok := p.scalar(`count_over_time(up{job="envoy-agent"}[1m])`)
			return ok && v >= 10
		}) {
			t.Fatalf("Prometheus did not scrape the agent 10 times; targets: %s", p.get("/api/v1/targets"))
		}
		if up, _ := p.scalar(`min_over_time(up{job="envoy-agent"}[1m])`); up != 1 {
			t.Fatalf("up was not 1 on every scrape: %s", p.get("/api/v1/targets"))
		}
		for _, r := range p.rules(t) {
			if r.Health != "ok" {
				t.Errorf("rule %s: health %q: %s", r.Name, r.Health, r.LastError)
			}
		}
		// The TLS listener's certificate expires in 3 days on purpose: its
		// alert is the near-expiry check's, below.
		alerts := slices.DeleteFunc(p.alerts(t), func(a alert) bool { return a.Labels["alertname"] == "EnvoyAgentCertificateExpiringSoon" })
		if len(alerts) != 0 {
			t.Errorf("a healthy agent has alerts: %+v", alerts)
		}
	})

	t.Run("dashboard metrics exist in a real scrape", func(t *testing.T) {
		r, err := envoykit.Get(envoykit.URL(a.promPort, "/stats/prometheus"), 5*time.Second)
		if err != nil || r.Code != 200 {
			t.Fatalf("scrape: %v %v", r.Code, err)
		}
		scraped := scrapedNames(r.Body)
		records := loadRules(t).records()
		names := dashboardMetrics(t)
		if len(names) < 15 {
			t.Fatalf("only %d metric names found in the dashboard: %v", len(names), names)
		}
		for _, name := range names {
			switch {
			case scraped[name]:
			case records[name] != "":
				// A recording rule: its own metrics must be scraped.
				for _, m := range exprMetrics(records[name]) {
					if !scraped[m] {
						t.Errorf("dashboard: recording rule %s uses %s, not in a real scrape", name, m)
					}
				}
			default:
				t.Errorf("dashboard: %s is not in a real scrape of the agent", name)
			}
		}
		// The in-place reloads' outcomes are there from the start (at 0),
		// so the rejected-change alert sees its first increase.
		if !strings.Contains(r.Body, `envoy_agent_reloads_in_place_total{outcome="failed"}`) {
			t.Errorf("envoy_agent_reloads_in_place_total{outcome=\"failed\"} is not in a real scrape")
		}
	})

	t.Run("near-expiry certificate", func(t *testing.T) {
		r, err := envoykit.Get(envoykit.URL(a.promPort, "/stats/prometheus"), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if !scrapedNames(r.Body)["envoy_agent_certificate_expiry_timestamp_seconds"] {
			t.Fatalf("no envoy_agent_certificate_expiry_timestamp_seconds in a real scrape")
		}
		// The bootstrap's TLS listener serves a certificate that expires in 3 days.
		p.waitFiring(t, "EnvoyAgentCertificateExpiringSoon")
	})

	t.Run("upstream 5xx and failing health checks", func(t *testing.T) {
		// Requests the upstream answers 503 until the alert fires, and its health checks fail.
		a.failHealth.Store(true)
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			tick := time.NewTicker(50 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
					_, _ = envoykit.Get(envoykit.URL(a.ports.Listener, "/fail"), 2*time.Second)
				}
			}
		}()
		p.waitFiring(t, "EnvoyUpstream5xxRateHigh")
		p.waitFiring(t, "EnvoyUpstreamHealthCheckFailing")
		close(stop)
		<-done
		a.failHealth.Store(false)
	})

	t.Run("bad reload", func(t *testing.T) {
		if err := os.WriteFile(a.bootstrap, []byte("static_resources: {listeners: [{name: x, address: 7}]}\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(a.bin, "reload", "--config", a.config).CombinedOutput()
		if err == nil {
			t.Fatalf("a reload into a broken bootstrap succeeded:\n%s", out)
		}
		p.waitFiring(t, "EnvoyAgentReloadFailed")
		// The refused bootstrap stays on disk, unlike what Envoy serves.
		p.waitFiring(t, "EnvoyAgentConfigDrift")
		if r, err := envoykit.Get(envoykit.URL(a.ports.Listener, "/"), 5*time.Second); err != nil || r.Code != 200 {
			t.Errorf("Envoy no longer serves after the bad reload: %v %v", r.Code, err)
		}
	})

	t.Run("in-place change rejected", func(t *testing.T) {
		// After the bad reload (so that its alert fired on its own): a
		// listener added on a port another process holds: --mode validate
		// does not bind, so only the serving Envoy, applying it in place,
		// refuses it; the agent puts the previous resources back.
		held, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer held.Close()
		good := a.good // the bad reload's file is still in place
		taken := fmt.Sprintf("  listeners:\n  - name: taken\n    address: { socket_address: { address: 127.0.0.1, port_value: %d } }\n    filter_chains:\n    - filters: [%s]\n",
			held.Addr().(*net.TCPAddr).Port, hcm)
		if err := os.WriteFile(a.bootstrap, []byte(strings.Replace(string(good), "  listeners:\n", taken, 1)), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(a.bin, "reload", "--config", a.config).CombinedOutput()
		if err == nil {
			t.Fatalf("a reload adding a listener on a taken port succeeded:\n%s", out)
		}
		p.waitFiring(t, "EnvoyAgentInPlaceChangeRejected")
		if r, err := envoykit.Get(envoykit.URL(a.ports.Listener, "/"), 5*time.Second); err != nil || r.Code != 200 {
			t.Errorf("Envoy no longer serves after the rejected change: %v %v", r.Code, err)
		}
		if err := os.WriteFile(a.bootstrap, good, 0o644); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("reload rolled back", func(t *testing.T) {
		// After the rejected change (whose files it put back): / routed to a
		// cluster whose endpoint refuses connections, under a load; the
		// reload guard (reload_guard "3s") rolls the reload back.
		l := envoykit.StartLoadUntilCleanup(t, envoykit.LoadOptions{URL: envoykit.URL(a.ports.Listener, "/"), Client: envoykit.RawHTTP1,
			Workers: []envoykit.Workers{{N: 1, Path: "/"}}})
		defer l.Stop()
		envoykit.WaitAnswers(t, l, 1500) // a baseline of good answers beside the earlier subtests' 503s
		dead := fmt.Sprintf("  clusters:\n  - name: dead\n    type: STATIC\n    connect_timeout: 1s\n    load_assignment: {cluster_name: dead, endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: %d}}}}]}]}\n",
			envoykit.FreePort(t))
		bad := strings.Replace(strings.ReplaceAll(string(a.good), "route: {cluster: upstream}", "route: {cluster: dead}"), "  clusters:\n", dead, 1)
		if err := os.WriteFile(a.bootstrap, []byte(bad), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(a.bin, "reload", "--wait", "--config", a.config).CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 5 || !strings.Contains(string(out), "rolled the reload back") {
			t.Fatalf("reload --wait of a route to a refusing cluster: %v:\n%s", err, out)
		}
		p.waitFiring(t, "EnvoyAgentReloadRolledBack")
		if r, err := envoykit.Get(envoykit.URL(a.ports.Listener, "/"), 5*time.Second); err != nil || r.Code != 200 {
			t.Errorf("Envoy does not serve the configuration from before after the rollback: %v %v", r.Code, err)
		}
		if err := os.WriteFile(a.bootstrap, a.good, 0o644); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("stopped Envoy", func(t *testing.T) {
		if err := syscall.Kill(a.envoyPid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = syscall.Kill(a.envoyPid, syscall.SIGCONT) }()
		p.waitFiring(t, "EnvoyAgentEnvoyNotLive")
		// The agent's own metrics still came through: it is Envoy, not the scrape, that is down.
		if v, ok := p.scalar(`up{job="envoy-agent"}`); !ok || v != 1 {
			t.Errorf("up = %v (%v) while Envoy is stopped; want the agent still scraped", v, ok)
		}
	})

	t.Run("agent gone", func(t *testing.T) {
		// Envoy dies; the agent exits with it (systemd would restart it); the scrape fails.
		_ = syscall.Kill(a.envoyPid, syscall.SIGKILL)
		_ = syscall.Kill(a.envoyPid, syscall.SIGCONT)
		select {
		case <-a.proc.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("the agent outlived its Envoy")
		}
		p.waitFiring(t, "EnvoyAgentMetricsDown")
	})
}

// shortTempDir is a temporary folder with a short name (Envoy's hot-restart
// socket names under it are limited to 107 bytes).
func shortTempDir(t *testing.T) string {
	dir, err := os.MkdirTemp("", "mon-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// agentBinary builds envoy-agent into dir, or takes $ENVOY_AGENT_BIN when
// set (as cmd/envoy-agent's tests do).
func agentBinary(t *testing.T, dir string) string {
	t.Helper()
	if bin := os.Getenv("ENVOY_AGENT_BIN"); bin != "" {
		return bin
	}
	bin := filepath.Join(dir, "envoy-agent")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/envoy-agent").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

type liveAgent struct {
	bin, config, bootstrap string
	good                   []byte // the bootstrap as it started
	ports                  envoykit.Ports
	promPort               int
	proc                   *envoykit.Process
	envoyPid               int
	failHealth             atomic.Bool // the upstream fails Envoy's health checks
}

// liveBootstrap is the kit's listener and upstream, plus what the alerts
// and the dashboard read: active health checks of the upstream, and a TLS
// listener whose certificate expires in 3 days.
var liveBootstrap = template.Must(template.New("b").Parse(`node: { id: monitoring, cluster: monitoring }
admin:
  address: { socket_address: { address: 127.0.0.1, port_value: {{.Admin}} } }
static_resources:
  listeners:
  - name: ingress
    address: { socket_address: { address: 127.0.0.1, port_value: {{.Listener}} } }
    filter_chains:
    - filters: [{{.HCM}}]
  - name: ingress_tls
    address: { socket_address: { address: 127.0.0.1, port_value: {{.TLS}} } }
    filter_chains:
    - transport_socket:
        name: envoy.transport_sockets.tls
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext
          common_tls_context:
            tls_certificates:
            - certificate_chain: { filename: "{{.Cert}}" }
              private_key: { filename: "{{.Key}}" }
      filters: [{{.HCM}}]
  clusters:
  - name: upstream
    type: STATIC
    connect_timeout: 1s
    health_checks:
    - timeout: 1s
      interval: 1s
      unhealthy_threshold: 3
      healthy_threshold: 1
      http_health_check: { path: /healthz }
    load_assignment:
      cluster_name: upstream
      endpoints:
      - lb_endpoints:
        - endpoint: { address: { socket_address: { address: 127.0.0.1, port_value: {{.Upstream}} } } }
`))

const hcm = `{name: envoy.filters.network.http_connection_manager, typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager, stat_prefix: ingress, route_config: {virtual_hosts: [{name: all, domains: ["*"], routes: [{match: {prefix: "/"}, route: {cluster: upstream}}]}]}, http_filters: [{name: envoy.filters.http.router, typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}}]}}`

func startLiveAgent(t *testing.T, dir string) *liveAgent {
	t.Helper()
	envoyBin := envoykit.Binary(t) // first: it skips in make test-unit, which builds no agent
	a := &liveAgent{bin: agentBinary(t, dir), bootstrap: filepath.Join(dir, "envoy.yaml"), config: filepath.Join(dir, "config.toml")}
	// The upstream: / answers 200, /fail 503, /healthz 200 unless failHealth (Envoy's health checks).
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/fail", func(w http.ResponseWriter, r *http.Request) { http.Error(w, "failing", http.StatusServiceUnavailable) })
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		if a.failHealth.Load() {
			http.Error(w, "unhealthy", http.StatusServiceUnavailable)
		}
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })

	ports := envoykit.NewPorts(t)
	ports.Upstream = ln.Addr().(*net.TCPAddr).Port
	cert, key := writeCertificate(t, dir, 72*time.Hour)
	var b bytes.Buffer
	if err := liveBootstrap.Execute(&b, map[string]any{
		"Admin": ports.Admin, "Listener": ports.Listener, "TLS": envoykit.FreePort(t), "Upstream": ports.Upstream,
		"Cert": cert, "Key": key, "HCM": hcm,
	}); err != nil {
		t.Fatal(err)
	}
	a.ports, a.promPort, a.good = ports, ports.Prometheus, b.Bytes()
	if err := os.WriteFile(a.bootstrap, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	baseID := envoykit.BaseID()
	config := fmt.Sprintf(`[envoy]
binary_path = %q
config_path = %q
admin_port = %d
base_id = %d
concurrency = 1
log_level = "warning"

[agent]
status_port = %d
prometheus_port = %d
run_dir = %q
termination_drain_duration = "2s"
min_drain_duration = "0s"
reload_method = "auto"
reload_guard = "3s"
`, envoyBin, a.bootstrap, ports.Admin, baseID, ports.Status, ports.Prometheus, filepath.Join(dir, "run"))
	if err := os.WriteFile(a.config, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	claimsDir := filepath.Join(dir, "claims")
	if err := os.Mkdir(claimsDir, 0o700); err != nil {
		t.Fatal(err)
	}
	ns := envoykit.NewNotifySocket(t)
	var stderr envoykit.SyncBuffer
	proc, err := envoykit.Start(a.bin, []string{"run", "--config", a.config}, &stderr,
		"NOTIFY_SOCKET="+ns.Path, claims.EnvDir+"="+claimsDir)
	if err != nil {
		t.Fatal(err)
	}
	a.proc = proc
	t.Cleanup(func() {
		proc.Kill()
		envoykit.RemoveSharedMemory(baseID)
		if t.Failed() {
			t.Logf("agent stderr:\n%s", stderr.String())
		}
	})
	m := ns.WaitFor(t, "READY=1", 30*time.Second)
	sm := regexp.MustCompile(`Envoy pid (\d+)`).FindStringSubmatch(m.Text)
	if sm == nil {
		t.Fatalf("READY names no Envoy pid: %q", m.Text)
	}
	a.envoyPid, _ = strconv.Atoi(sm[1])
	t.Cleanup(func() { _ = syscall.Kill(a.envoyPid, syscall.SIGCONT) })
	return a
}

// writeCertificate writes a self-signed certificate for 127.0.0.1 that
// expires after valid, and its key.
func writeCertificate(t *testing.T, dir string, valid time.Duration) (certPath, keyPath string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(valid),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPath, keyPath = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if err := os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certPath, keyPath
}

type prometheus struct {
	base string
}

// liveForRE matches the rules' `for:` durations, which the live copy
// shortens to 3s: long enough to show an alert pending before it fires.
var liveForRE = regexp.MustCompile(`(?m)^(\s+for:) \S+$`)

func startPrometheus(t *testing.T, bin, dir string, target int) *prometheus {
	t.Helper()
	rules, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(liveForRE.FindAll(rules, -1)); n == 0 {
		t.Fatal("no `for:` in the rules to shorten")
	}
	rules = liveForRE.ReplaceAll(rules, []byte("$1 3s"))
	if err := os.WriteFile(filepath.Join(dir, "rules.yml"), rules, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files: [rules.yml]
scrape_configs:
  - job_name: envoy-agent
    metrics_path: /stats/prometheus
    static_configs:
      - targets: ["127.0.0.1:%d"]
`, target)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	port := envoykit.FreePort(t)
	var out envoykit.SyncBuffer
	proc, err := envoykit.Start(bin, []string{
		"--config.file=" + filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path=" + filepath.Join(dir, "tsdb"),
		"--web.listen-address=127.0.0.1:" + strconv.Itoa(port),
	}, &out)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		proc.Kill()
		if t.Failed() {
			t.Logf("prometheus output (tail):\n%s", tailOf(out.String(), 4000))
		}
	})
	p := &prometheus{base: "http://127.0.0.1:" + strconv.Itoa(port)}
	if !envoykit.Eventually(livePoll, func() bool {
		r, err := envoykit.Get(p.base+"/-/ready", time.Second)
		return err == nil && r.Code == 200
	}) {
		t.Fatalf("prometheus not ready:\n%s", tailOf(out.String(), 4000))
	}
	return p
}

func tailOf(s string, n int) string { return s[max(0, len(s)-n):] }

func (p *prometheus) get(path string) string {
	r, err := envoykit.Get(p.base+path, 5*time.Second)
	if err != nil {
		return err.Error()
	}
	return r.Body
}

// scalar is the value of a query with one result.
func (p *prometheus) scalar(q string) (float64, bool) {
	var resp struct {
		Data struct {
			Result []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if json.Unmarshal([]byte(p.get("/api/v1/query?query="+url.QueryEscape(q))), &resp) != nil || len(resp.Data.Result) != 1 {
		return 0, false
	}
	s, _ := resp.Data.Result[0].Value[1].(string)
	v, err := strconv.ParseFloat(s, 64)
	return v, err == nil
}

type ruleState struct {
	Name      string `json:"name"`
	Health    string `json:"health"`
	LastError string `json:"lastError"`
}

func (p *prometheus) rules(t *testing.T) []ruleState {
	var resp struct {
		Data struct {
			Groups []struct {
				Rules []ruleState `json:"rules"`
			} `json:"groups"`
		} `json:"data"`
	}
	if err := json.Unmarshal([]byte(p.get("/api/v1/rules")), &resp); err != nil {
		t.Fatal(err)
	}
	var out []ruleState
	for _, g := range resp.Data.Groups {
		out = append(out, g.Rules...)
	}
	if len(out) == 0 {
		t.Fatal("Prometheus has no rules loaded")
	}
	return out
}

type alert struct {
	Labels map[string]string `json:"labels"`
	State  string            `json:"state"`
}

func (p *prometheus) alerts(t *testing.T) []alert {
	var resp struct {
		Data struct {
			Alerts []alert `json:"alerts"`
		} `json:"data"`
	}
	if err := json.Unmarshal([]byte(p.get("/api/v1/alerts")), &resp); err != nil {
		t.Fatal(err)
	}
	return resp.Data.Alerts
}

// waitFiring polls Prometheus' /api/v1/alerts until name fires.
func (p *prometheus) waitFiring(t *testing.T, name string) {
	t.Helper()
	if !envoykit.Eventually(livePoll, func() bool {
		return slices.ContainsFunc(p.alerts(t), func(a alert) bool { return a.Labels["alertname"] == name && a.State == "firing" })
	}) {
		t.Fatalf("%s did not fire within %s; alerts: %s", name, livePoll, p.get("/api/v1/alerts"))
	}
	t.Logf("%s fires", name)
}

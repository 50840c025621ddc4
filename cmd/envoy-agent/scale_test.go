//go:build linux

package main

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/envoy-agent/envoy-agent/internal/envoykit"
	"github.com/envoy-agent/envoy-agent/internal/hostfiles"
)

// At any count, with fs.inotify.max_user_instances at its default (128 on
// this host): the certificates, routes and secrets reach Envoy over the
// agent's ADS server, and Envoy watches no file for them (it watches two:
// its listener and cluster files). Before, 150 certificates named by file
// made the agent's Envoy abort at its start, and only the first 32
// connection managers' routes changed in place.

// scaleCount is the resources of the scale tests: the thousand.
const scaleCount = 1000

// sniBootstrap is one TLS listener on port with a filter chain for each of
// n names s<i>.test, each serving the certificate and key dir/<i>.pem and
// dir/<i>.key by file, and answering s<i>.
func sniBootstrap(dir string, n, port, admin int) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "admin: { address: { socket_address: { address: 127.0.0.1, port_value: %d } } }\n", admin)
	fmt.Fprintf(&b, `static_resources:
  listeners:
  - name: tls
    address: { socket_address: { address: 127.0.0.1, port_value: %d } }
    listener_filters: [{ name: tls, typed_config: { "@type": type.googleapis.com/envoy.extensions.filters.listener.tls_inspector.v3.TlsInspector } }]
    filter_chains:
`, port)
	for i := range n {
		fmt.Fprintf(&b, `    - filter_chain_match: { server_names: [s%[1]d.test] }
      transport_socket: { name: tls, typed_config: { "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext, common_tls_context: { tls_certificates: [{ certificate_chain: { filename: %[2]s/%[1]d.pem }, private_key: { filename: %[2]s/%[1]d.key } }] } } }
      filters: [{ name: d, typed_config: { "@type": type.googleapis.com/envoy.extensions.filters.network.direct_response.v3.Config, response: { inline_string: s%[1]d } } }]
`, i, dir)
	}
	return []byte(b.String())
}

// sniSerial is the serial of the certificate a new handshake to port with
// the server name gets.
func sniSerial(port int, name string) (string, error) {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", "127.0.0.1:"+strconv.Itoa(port), &tls.Config{InsecureSkipVerify: true, ServerName: name})
	if err != nil {
		return "", err
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber.Text(16), nil
}

// inotifyInstances counts the process's inotify instances.
func inotifyInstances(pid int) int {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, _ := os.ReadDir(dir)
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil && l == "anon_inode:inotify" {
			n++
		}
	}
	return n
}

// rssKB is the process's resident set, in KB.
func rssKB(pid int) int {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for l := range strings.Lines(string(b)) {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			n, _ := strconv.Atoi(f[1])
			return n
		}
	}
	return 0
}

// liveAfterRE finds the start-to-LIVE time the agent logged.
var liveAfterRE = regexp.MustCompile(`envoy is LIVE after ([0-9.]+m?s)`)

// TestThousandCertificates: the agent with a thousand certificates named
// by file, one a filter chain (SNI), starts READY and serves every name;
// a renewal of one reaches new handshakes within 2 s, with the same Envoy
// and no reload. Envoy holds two inotify instances (its listener and
// cluster files). The start is logged beside a bare Envoy's on the same
// bootstrap.
func TestThousandCertificates(t *testing.T) {
	t.Parallel()
	certDir := t.TempDir()
	serials := make([]string, scaleCount)
	for i := range scaleCount {
		c, k, serial := servingPair(t, time.Now().Add(90*24*time.Hour))
		writeFile(t, filepath.Join(certDir, fmt.Sprintf("%d.pem", i)), c)
		writeFile(t, filepath.Join(certDir, fmt.Sprintf("%d.key", i)), k)
		serials[i] = serial
	}

	// A bare Envoy on the same bootstrap (its own ports), for the log.
	bare := filepath.Join(t.TempDir(), "bare.yaml")
	barePort, bareAdmin := envoykit.FreePort(t), envoykit.FreePort(t)
	if err := os.WriteFile(bare, sniBootstrap(certDir, scaleCount, barePort, bareAdmin), 0o600); err != nil {
		t.Fatal(err)
	}
	bareStart := time.Now()
	bareOut := &envoykit.SyncBuffer{}
	bp, err := envoykit.Start(envoykit.Binary(t), append(envoykit.BareArgs(bare, 0), "--disable-hot-restart"), bareOut)
	if err != nil {
		t.Fatal(err)
	}
	if err := bp.WaitReady(bareAdmin, 120*time.Second); err != nil {
		bp.Kill()
		t.Fatalf("a bare Envoy: %v\n%s", err, bareOut)
	}
	bareTook := time.Since(bareStart)
	bareRSS := rssKB(bp.Pid())
	bp.Kill()
	<-bp.Done()

	bootstrap := filepath.Join(t.TempDir(), "envoy.yaml")
	p := startAgentWith(t, procOptions{bootstrapFile: bootstrap, agent: map[string]string{"reload_method": `"auto"`, "start_timeout": `"120s"`}}, func(ports envoykit.Ports) {
		writeFile(t, bootstrap, string(sniBootstrap(certDir, scaleCount, ports.Listener, ports.Admin)))
	})
	pid := p.envoyPid
	live := "?"
	if m := liveAfterRE.FindStringSubmatch(p.stderr.String()); m != nil {
		live = m[1]
	}
	t.Logf("start to LIVE: the agent %s (READY after %s), a bare Envoy on the same bootstrap %s", live, time.Since(p.started).Round(time.Millisecond), bareTook.Round(time.Millisecond))
	t.Logf("RSS: Envoy %d KB (a bare Envoy's %d KB), the agent %d KB", rssKB(pid), bareRSS, rssKB(p.proc.Pid()))
	if n := inotifyInstances(pid); n > 2 {
		t.Errorf("Envoy holds %d inotify instances, want at most 2 (its listener and cluster files)", n)
	}
	for i := range scaleCount {
		if got, err := sniSerial(p.ports.Listener, fmt.Sprintf("s%d.test", i)); err != nil || got != serials[i] {
			t.Fatalf("s%d.test: serial %s, %v; want %s", i, got, err, serials[i])
		}
	}

	// A renewal of one, by rename: new handshakes within 2 s.
	const renewed = scaleCount / 2
	c, k, serial := servingPair(t, time.Now().Add(90*24*time.Hour))
	start := time.Now()
	replaceFile(t, filepath.Join(certDir, fmt.Sprintf("%d.key", renewed)), []byte(k), 0o600)
	replaceFile(t, filepath.Join(certDir, fmt.Sprintf("%d.pem", renewed)), []byte(c), 0o600)
	name := fmt.Sprintf("s%d.test", renewed)
	var got string
	if !envoykit.Eventually(2*time.Second, func() bool { got, err = sniSerial(p.ports.Listener, name); return got == serial }) {
		t.Fatalf("2 s after the renewal %s gets serial %s, %v; want %s", name, got, err, serial)
	}
	t.Logf("renewal to the first new handshake with the new certificate: %s", time.Since(start).Round(time.Millisecond))
	if p.servingPid() != pid || !envoykit.Alive(pid) {
		t.Fatalf("Envoy pid %d no longer serves after the renewal", pid)
	}
	if got, err := sniSerial(p.ports.Listener, "s0.test"); err != nil || got != serials[0] {
		t.Errorf("s0.test after the renewal: %s, %v; want %s", got, err, serials[0])
	}
	if n := p.reloads(); n != 0 {
		t.Errorf("%d reloads ran", n)
	}
}

// TestBadPairAmongCertificatesFailsTheStart: the start reads the
// certificates while Envoy starts (envoy/certs: LoadNextInBackground); a
// key that does not go with its certificate, among a hundred pairs, still
// fails the start as a bare Envoy's would fail: exit 1 with one error
// naming the key file, no READY=1, and no Envoy left running.
func TestBadPairAmongCertificatesFailsTheStart(t *testing.T) {
	t.Parallel()
	const n, bad = 100, 60
	certDir := t.TempDir()
	for i := range n {
		c, k, _ := servingPair(t, time.Now().Add(90*24*time.Hour))
		writeFile(t, filepath.Join(certDir, fmt.Sprintf("%d.pem", i)), c)
		if i == bad {
			_, k, _ = servingPair(t, time.Now().Add(90*24*time.Hour)) // another certificate's key
		}
		writeFile(t, filepath.Join(certDir, fmt.Sprintf("%d.key", i)), k)
	}
	bootstrap := filepath.Join(t.TempDir(), "envoy.yaml")
	p := startAgentWith(t, procOptions{bootstrapFile: bootstrap, noWaitReady: true, agent: map[string]string{"reload_method": `"auto"`}}, func(ports envoykit.Ports) {
		writeFile(t, bootstrap, string(sniBootstrap(certDir, n, ports.Listener, ports.Admin)))
	})
	code, _ := p.wait(p.started, 60*time.Second)
	key := filepath.Join(certDir, fmt.Sprintf("%d.key", bad))
	if code != 1 || !strings.Contains(p.stderr.String(), key+": does not go with") {
		t.Fatalf("exit %d, want 1 naming %s:\n%s", code, key, p.stderr)
	}
	if n := p.ns.Count("READY=1", p.started, time.Now()); n != 0 {
		t.Errorf("READY=1 was sent %d times", n)
	}
	t.Logf("run: exit %d: %s (%s)", code, lastLine(p.stderr.String(), "envoy-agent: "), lastLine(p.stderr.String(), "started envoy epoch 0"))
	assertNoEnvoyFor(t, p.dir)
}

// reloads is how many reloads the agent ran, as status says.
func (p *agentProc) reloads() int {
	p.t.Helper()
	code, stdout, stderr := runAgent(p.t, "status", "--config", p.config, "--json")
	var st struct {
		Reloads struct{ OK, Failed int } `json:"reloads"`
	}
	if err := json.Unmarshal([]byte(stdout), &st); code != 0 || err != nil {
		p.t.Fatalf("status --json: exit %d, %v: %s", code, err, stderr)
	}
	return st.Reloads.OK + st.Reloads.Failed
}

// stepsRE finds a reload's steps in the agent's log line.
var stepsRE = regexp.MustCompile(`(load|copy|validate|versions|plan|in_place)_ms=[0-9.]+`)

// lastStepsLogged is the steps of the last reload the agent logged.
func lastStepsLogged(log string) string {
	lines := strings.Split(log, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if m := stepsRE.FindAllString(lines[i], -1); len(m) > 0 {
			return strings.Join(m, " ")
		}
	}
	return "no steps logged"
}

// withVersion is the kit's bootstrap text with listener edit's
// x-config-version v2 (the kit writes v1 for every listener).
func withVersion(text string, edit int) string {
	i := 0
	for range edit + 1 {
		i += strings.Index(text[i:], `value: "v1"`) + 1
	}
	i--
	return text[:i] + `value: "v2"` + text[i+len(`value: "v1"`):]
}

// TestThousandListenersRouteEditsInPlace: a route edit of the first, a
// middle and the last of a thousand HTTP listeners is applied in place
// (before, only the first 32 connection managers had their routes apart
// from their listener: the last one's edit hot-restarted Envoy), with the
// same Envoy and no request failed for a client that does not retry.
func TestThousandListenersRouteEditsInPlace(t *testing.T) {
	t.Parallel()
	ports, err := envoykit.FreePorts(scaleCount - 1)
	if err != nil {
		t.Fatal(err)
	}
	bo := envoykit.BootstrapOptions{ExtraListeners: ports, ResponseHeader: "v1"}
	p := startAgent(t, procOptions{bootstrap: bo, envoy: quickDrain, agent: map[string]string{"reload_method": `"auto"`, "start_timeout": `"120s"`}})
	bo.Ports = p.ports
	kit, err := envoykit.RenderBootstrap(bo)
	if err != nil {
		t.Fatal(err)
	}
	all := append([]int{p.ports.Listener}, ports...)
	pid := p.envoyPid
	t.Logf("RSS: Envoy %d KB, the agent %d KB; Envoy's inotify instances: %d", rssKB(pid), rssKB(p.proc.Pid()), inotifyInstances(pid))
	for _, edit := range []int{0, scaleCount / 2, scaleCount - 1} {
		name := "ingress"
		if edit > 0 {
			name += "_" + strconv.Itoa(edit)
		}
		l := envoykit.StartLoadUntilCleanup(t, envoykit.LoadOptions{URL: envoykit.URL(all[edit], "/"), Client: envoykit.RawHTTP1,
			Workers: []envoykit.Workers{{N: 4, Path: "/"}}})
		envoykit.WaitAnswers(t, l, 20)
		p.writeBootstrapText(withVersion(string(kit), edit))
		code, out := p.reload()
		if want := fmt.Sprintf("reloaded in place: routes updated %s/0/0; epoch 0 keeps serving", name); code != 0 || !strings.Contains(out, want) {
			t.Fatalf("reload of listener %s's route: exit %d: %s; want %q", name, code, out, want)
		}
		t.Logf("route edit of listener %s: reloaded in place in %s (%s)", name, reloadTook(out), lastStepsLogged(p.stderr.String()))
		if !envoykit.Eventually(5*time.Second, func() bool { return l.Latest() == "v2" }) {
			t.Fatalf("listener %s answers %q after the reload, want v2", name, l.Latest())
		}
		envoykit.WaitAnswers(t, l, l.OK()+20)
		l.Stop()
		if l.Failed() != 0 {
			t.Fatalf("listener %s: %d of %d requests failed across the reload (%s)", name, l.Failed(), l.OK()+l.Failed(), l.LastErr())
		}
		if p.servingPid() != pid {
			t.Fatalf("Envoy pid %d no longer serves after the edit of listener %s", pid, name)
		}
		// Back to v1 for the next edit.
		p.writeBootstrapText(string(kit))
		if code, out := p.reload(); code != 0 || !strings.Contains(out, "reloaded in place") {
			t.Fatalf("reload back: exit %d: %s", code, out)
		}
	}
}

// sdsFileBootstrap is one TLS listener with a filter chain for each of n
// names, each reading its certificate from an SDS file of the operator's
// own (path_config_source, one watched file each), in dir.
func sdsFileBootstrap(t *testing.T, dir string, n, port, admin int) []byte {
	t.Helper()
	c, k, _ := servingPair(t, time.Now().Add(90*24*time.Hour))
	var b strings.Builder
	fmt.Fprintf(&b, "admin: { address: { socket_address: { address: 127.0.0.1, port_value: %d } } }\n", admin)
	fmt.Fprintf(&b, `node: { id: node1, cluster: c1 }
static_resources:
  listeners:
  - name: tls
    address: { socket_address: { address: 127.0.0.1, port_value: %d } }
    listener_filters: [{ name: tls, typed_config: { "@type": type.googleapis.com/envoy.extensions.filters.listener.tls_inspector.v3.TlsInspector } }]
    filter_chains:
`, port)
	for i := range n {
		file := filepath.Join(dir, fmt.Sprintf("sds-%d.yaml", i))
		writeFile(t, file, fmt.Sprintf(`{"resources": [{"@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret", "name": "s%d", "tls_certificate": {"certificate_chain": {"inline_string": %q}, "private_key": {"inline_string": %q}}}]}`, i, c, k))
		fmt.Fprintf(&b, `    - filter_chain_match: { server_names: [s%[1]d.test] }
      transport_socket: { name: tls, typed_config: { "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext, common_tls_context: { tls_certificate_sds_secret_configs: [{ name: s%[1]d, sds_config: { path_config_source: { path: %[2]s }, resource_api_version: V3 } }] } } }
      filters: [{ name: d, typed_config: { "@type": type.googleapis.com/envoy.extensions.filters.network.direct_response.v3.Config, response: { inline_string: s%[1]d } } }]
`, i, file)
	}
	return []byte(b.String())
}

// TestInotifyLimitNamedBeforeEnvoyStarts: where a limit remains (the
// files the operator's bootstrap has Envoy watch itself), validate and
// run name it before Envoy starts: over fs.inotify.max_user_instances, exit
// 3 with the limit, the count and the fix, and no Envoy started; within
// it, validate says OK (with a warning when close).
func TestInotifyLimitNamedBeforeEnvoyStarts(t *testing.T) {
	// What this user has left, as the agent's probe finds it, up to the
	// most the cases below need.
	room, err := hostfiles.ProbeInotify(2*(70+2)+1, nil)
	if err != nil {
		t.Skipf("no inotify figures: %v", err)
	}
	for _, tt := range []struct {
		name  string
		files int // path_config_sources in the bootstrap
	}{{"many", 70}, {"few", 5}} {
		t.Run(tt.name, func(t *testing.T) {
			dir := shortTempDir(t)
			ports := envoykit.NewPorts(t)
			bootstrap := filepath.Join(dir, "envoy.yaml")
			writeFile(t, bootstrap, string(sdsFileBootstrap(t, dir, tt.files, ports.Listener, ports.Admin)))
			cfg := filepath.Join(dir, "config.toml")
			writeFile(t, cfg, fmt.Sprintf("[envoy]\nbinary_path = %q\nconfig_path = %q\nadmin_port = %d\nbase_id = %d\n[agent]\nstatus_port = %d\nprometheus_port = 0\nrun_dir = \"run\"\n",
				envoykit.Binary(t), bootstrap, ports.Admin, envoykit.BaseID(), ports.Status))
			// Each epoch watches the bootstrap's files and its listener and
			// cluster files; twice during a hot restart; and the agent one.
			need := 2*(tt.files+2) + 1
			over := need > room.Instances
			for _, cmd := range []string{"validate", "run"} {
				if cmd == "run" && !over {
					continue
				}
				code, stdout, stderr := runAgent(t, cmd, "--config", cfg)
				t.Logf("%s: exit %d: %s%s", cmd, code, stdout, stderr)
				if !over {
					if code != 0 || !strings.Contains(stdout, "OK: ") {
						t.Fatalf("validate of %d watched files (%d instances, %d of %d left): exit %d", tt.files, need, room.Instances, room.MaxInstances, code)
					}
					continue
				}
				for _, want := range []string{"envoy.yaml: ", fmt.Sprintf("need %d inotify instances", need), fmt.Sprintf("fs.inotify.max_user_instances is %d", room.MaxInstances), "/etc/sysctl.d/", "sysctl --system"} {
					if code != 3 || !strings.Contains(stderr, want) {
						t.Fatalf("%s: exit %d, want 3 with %q:\n%s%s", cmd, code, want, stdout, stderr)
					}
				}
			}
			assertNoEnvoyFor(t, dir)
		})
	}
}

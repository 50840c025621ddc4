//go:build linux

package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/envoy-agent/envoy-agent/internal/envoykit"
	"github.com/envoy-agent/envoy-agent/internal/testenvoy"
)

// TestEnvoyTraceAndDebugAreRefusedSoSecretsStayOut: at trace, the real
// Envoy repeats the bootstrap's bearer token in its output (listener
// configuration and header dumps), which the agent relays to the journal.
// The agent refuses trace and debug, for the base level and any component,
// in validate, run and a reload; the serving Envoy keeps serving at its
// level, and the token appears 0 times in everything the agent printed.
func TestEnvoyTraceAndDebugAreRefusedSoSecretsStayOut(t *testing.T) {
	certPEM, keyPEM := newKeyPair(t)
	secrets := secretCluster(certPEM, keyPEM)

	// 1. A bare Envoy at trace on the same kind of bootstrap: the token is
	// in its output, so the count below can fail.
	up := testenvoy.NewUpstream(t)
	ports := testenvoy.NewPorts(t)
	ports.Upstream = up.Port
	dir := t.TempDir()
	// The token is in a listener's route too (a header it adds), as
	// the bootstrap had it.
	bootstrap := testenvoy.WriteBootstrap(t, dir, "envoy.yaml", testenvoy.BootstrapOptions{Ports: ports, ResponseHeader: secretToken})
	writeFile(t, bootstrap, readFileT(t, bootstrap)+secrets)
	baseID := testenvoy.BaseID()
	var bare syncBuffer
	args := envoykit.BareArgs(bootstrap, baseID)
	for i := range args {
		if args[i] == "-l" {
			args[i+1] = "trace"
		}
	}
	proc, err := envoykit.Start(testenvoy.Binary(t), args, &bare)
	if err != nil {
		t.Fatal(err)
	}
	defer envoykit.RemoveSharedMemory(baseID)
	defer proc.Kill()
	if err := proc.WaitReady(ports.Admin, 30*time.Second); err != nil {
		t.Fatalf("bare Envoy at trace: %v\n%s", err, bare.String())
	}
	if r, err := testenvoy.Get(testenvoy.URL(ports.Listener, "/"), 5*time.Second); err != nil || r.Code != 200 {
		t.Fatalf("a request through the bare Envoy: %+v, %v", r, err)
	}
	if !testenvoy.Eventually(20*time.Second, func() bool { return strings.Contains(bare.String(), "s3cr3t-t0ken") }) {
		t.Fatalf("a bare Envoy at trace never printed the token: the check below would prove nothing")
	}
	leaks := strings.Count(bare.String(), "s3cr3t-t0ken")
	proc.Kill()
	t.Logf("a bare Envoy at trace printed the bootstrap's token %d times", leaks)

	// 2. The agent, at info, on a bootstrap with the same secrets.
	p := startAgent(t, procOptions{envoy: map[string]string{"log_level": `"info"`}})
	p.rewriteBootstrap(testenvoy.BootstrapOptions{ResponseHeader: secretToken})
	writeFile(t, filepath.Join(p.dir, "envoy.yaml"), readFileT(t, filepath.Join(p.dir, "envoy.yaml"))+secrets)
	if code, out := p.reload(); code != 0 {
		t.Fatalf("reload of the bootstrap with secrets: exit %d: %s", code, out)
	}
	base := readFileT(t, p.config)
	levels := []struct{ name, from, to, key string }{
		{"trace", `log_level = "info"`, `log_level = "trace"`, "envoy.log_level"},
		{"debug", `log_level = "info"`, `log_level = "debug"`, "envoy.log_level"},
		{"a component at debug", `log_level = "info"`, `log_level = "info,upstream:debug"`, "envoy.log_level"},
		{"component_log_level trace", `log_level = "info"`, "log_level = \"info\"\ncomponent_log_level = \"http:trace\"", "envoy.component_log_level"},
	}
	var printed strings.Builder
	for _, l := range levels {
		t.Run(l.name, func(t *testing.T) {
			text := strings.Replace(base, l.from, l.to, 1)
			if text == base {
				t.Fatalf("%q is not in the configuration", l.from)
			}
			writeFile(t, p.config, text)
			code, stdout, stderr := runAgent(t, "validate", "--config", p.config)
			printed.WriteString(stdout + stderr)
			if code != 3 || !strings.Contains(stderr, l.key) || !strings.Contains(stderr, "is refused: at debug and trace Envoy logs its configuration") {
				t.Errorf("validate: exit %d, want 3 naming %s and why:\n%s%s", code, l.key, stdout, stderr)
			}
			code, out := p.reload()
			printed.WriteString(out)
			if code != 3 || !strings.Contains(out, l.key) {
				t.Errorf("reload: exit %d, want 3 naming %s: %s", code, l.key, out)
			}
			if r, err := testenvoy.Get(testenvoy.URL(p.ports.Listener, "/"), 5*time.Second); err != nil || r.Code != 200 {
				t.Errorf("traffic after the refused reload: %+v, %v", r, err)
			}
		})
	}
	writeFile(t, p.config, base)
	if r, err := testenvoy.Get(testenvoy.URL(p.ports.Listener, "/"), 5*time.Second); err != nil || r.Code != 200 {
		t.Fatalf("a request through the agent's Envoy: %+v, %v", r, err)
	}
	printed.WriteString(p.stderr.String())
	if n := strings.Count(printed.String(), "s3cr3t-t0ken"); n != 0 {
		t.Errorf("the agent's output holds the token %d times", n)
	}
	assertNoSecret(t, "the agent's output", printed.String(), keyPEM)
}

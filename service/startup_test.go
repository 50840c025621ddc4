//go:build linux

package service

import (
	"fmt"
	"os"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/envoy-agent/envoy-agent/service/claims"
	"github.com/envoy-agent/envoy-agent/service/config"
)

// TestMain gives this package's tests a claims directory of their own: the
// host's (/run/envoy-agent-claims for root) holds the claims of every agent
// running on it, and a start hint asks who holds a base id there (an agent
// of base_id 0 running beside make test turned "used by another Envoy"
// into "used by the Envoy of the envoy-agent running with ...").
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "service-claims-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Setenv(claims.EnvDir, dir)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// The lines are Envoy 1.40's own, provoked with the real Envoy (README,
// "Running several Envoys on one host").
func TestStartHints(t *testing.T) {
	cfg := &config.Config{File: "/etc/envoy-agent/edge.toml"}
	cfg.Envoy.AdminPort = 15001
	cfg.Envoy.ConfigPath = "/etc/envoy-agent/edge.yaml"
	tests := []struct {
		name  string
		lines []string
		want  []string // per line: a substring of its hint, or "" for none
	}{
		{"base id taken", []string{
			"[2026-12-03 09:06:34.932][17558][debug][init] [source/common/init/watcher_impl.cc:31] init manager Server destroyed",
			"unable to bind domain socket with base_id=0, id=0, errno=98 (see --base-id option)",
		}, []string{"", "base_id 0 is used by another Envoy on this host: set envoy.base_id in /etc/envoy-agent/edge.toml"}},
		{"listener port taken", []string{
			"[2026-12-03 09:07:43.594][19650][error][config] [source/common/listener_manager/listener_manager_impl.cc:1405] listener 'l' failed to bind or apply socket options: cannot bind '127.0.0.1:19080': Address already in use",
			"[2026-12-03 09:07:43.597][19650][critical][main] [source/server/server.cc:449] error `cannot bind '127.0.0.1:19080': Address already in use` initializing config 'goo.gle/debugproto  ",
			"cannot bind '127.0.0.1:19080': Address already in use",
		}, []string{"", "", `127.0.0.1:19080 listener "l" is in use by another process: change that listener's port in /etc/envoy-agent/edge.yaml`}},
		{"admin port taken", []string{
			"[2026-12-03 09:07:43.729][19656][critical][main] [source/server/server.cc:449] error `cannot bind '127.0.0.1:15001': Address already in use` initializing config 'goo.gle/debugproto  ",
			"cannot bind '127.0.0.1:15001': Address already in use",
		}, []string{"", "change envoy.admin_port in /etc/envoy-agent/edge.toml and the admin address in /etc/envoy-agent/edge.yaml"}},
		{"unreadable file", []string{
			"[2026-12-03 09:07:43.955][19667][critical][main] [source/server/server.cc:449] error `unable to read file: /etc/envoy/cert.pem` initializing config 'goo.gle/debugonly   ",
			"unable to read file: /etc/envoy/cert.pem",
		}, []string{"", "cannot open /etc/envoy/cert.pem, named in /etc/envoy-agent/edge.yaml"}},
		{"log file", []string{
			"unable to open file '/proc/nope/access.log': No such file or directory",
		}, []string{"cannot open /proc/nope/access.log"}},
		{"shared memory made by another process", []string{
			"[2026-12-03 20:22:26.305][2610][critical][assert] [source/server/hot_restart_impl.cc:44] panic: cannot open shared memory region /envoy_shared_memory_98760 check user permissions. Error: File exists",
		}, []string{"Envoy's hot-restart shared memory for base_id 9876 was made by another process before this Envoy started"}},
		{"nothing to say", []string{"[critical][main] error initializing configuration: route: unknown cluster 'x'"}, []string{""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hints := startHints(cfg, tt.lines)
			for i, want := range tt.want {
				if (want == "") != (hints[i] == "") || !strings.Contains(hints[i], want) {
					t.Errorf("line %d: hint %q, want one with %q", i, hints[i], want)
				}
			}
		})
	}
}

// TestStartGC: a start has the collector run a quarter as often, and puts
// the setting back after; an operator's GOGC above that, or off, is kept.
func TestStartGC(t *testing.T) {
	before := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(before) })
	for _, tt := range []struct{ set, during int }{{100, 400}, {50, 400}, {800, 800}, {-1, -1}} {
		debug.SetGCPercent(tt.set)
		restore := startGC()
		if got := debug.SetGCPercent(tt.during); got != tt.during {
			t.Errorf("GOGC %d: %d during the start, want %d", tt.set, got, tt.during)
		}
		restore()
		if got := debug.SetGCPercent(tt.set); got != tt.set {
			t.Errorf("GOGC %d: %d after the start, want it back", tt.set, got)
		}
	}
}

//go:build linux

package config

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/envoy-agent/envoy-agent/service/guard"
)

func TestGuardKeys(t *testing.T) {
	dir, bin := configDir(t)
	head := "[envoy]\nbinary_path = \"" + bin + "\"\nconfig_path = \"envoy.yaml\"\nadmin_port = 15000\n[agent]\n"
	cfg, err := LoadConfig(writeConfig(t, dir, head+`reload_guard = "10s"
reload_guard_url = "http://127.0.0.1:10000/healthz"
reload_guard_error_rise = 0.25
reload_guard_min_requests = 200
reload_guard_healthy_share = 1
`))
	if err != nil {
		t.Fatal(err)
	}
	want := guard.Thresholds{ErrorRise: 0.25, MinRequests: 200, HealthyShare: 1}
	if a := cfg.Agent; a.ReloadGuard.D() != 10*time.Second || a.ReloadGuardURL != "http://127.0.0.1:10000/healthz" || a.GuardThresholds() != want {
		t.Errorf("agent = %+v, thresholds %+v, want 10s, the URL and %+v", a, a.GuardThresholds(), want)
	}
	def, err := LoadConfig(writeConfig(t, dir, head))
	if err != nil {
		t.Fatal(err)
	}
	if def.Agent.ReloadGuard != 0 || def.Agent.GuardThresholds() != guard.DefaultThresholds() {
		t.Errorf("an empty [agent]: guard %s, thresholds %+v, want off and the defaults", def.Agent.ReloadGuard.D(), def.Agent.GuardThresholds())
	}
	url, err := LoadConfig(writeConfig(t, dir, head+"reload_guard_url = \"http://127.0.0.1:10000/healthz\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if w := strings.Join(url.Warnings(), "\n"); !strings.Contains(w, "agent.reload_guard_url: has no effect while agent.reload_guard is \"0s\"") {
		t.Errorf("a URL with the guard off: warnings %q", w)
	}

	for _, tt := range []struct {
		name, text, key, msg string
	}{
		{"guard too short", `reload_guard = "2s"`, "agent.reload_guard", "too short to judge anything: at least 3s"},
		{"guard too long", `reload_guard = "2h"`, "agent.reload_guard", "more than the 1h0m0s"},
		{"guard as a number", `reload_guard = 10`, "agent.reload_guard", "wrong type: want a duration string"},
		{"not a URL", `reload_guard_url = "127.0.0.1:10000/healthz"`, "agent.reload_guard_url", "is not a URL: want one such as"},
		{"URL of another scheme", `reload_guard_url = "ftp://127.0.0.1/healthz"`, "agent.reload_guard_url", "want an http:// or https:// URL"},
		{"URL with a password", `reload_guard_url = "http://u:secret@127.0.0.1/healthz"`, "agent.reload_guard_url", "must not hold a user or password"},
		{"URL without host", `reload_guard_url = "http:///healthz"`, "agent.reload_guard_url", "has no host"},
		{"rise of 0", `reload_guard_error_rise = 0`, "agent.reload_guard_error_rise", "must be more than 0"},
		{"rise above 1", `reload_guard_error_rise = 1.5`, "agent.reload_guard_error_rise", "is not a share"},
		{"rise as a string", `reload_guard_error_rise = "10%"`, "agent.reload_guard_error_rise", "wrong type: want a number from 0 to 1"},
		{"no minimum", `reload_guard_min_requests = 0`, "agent.reload_guard_min_requests", "must be from 1"},
		{"negative share", `reload_guard_healthy_share = -0.5`, "agent.reload_guard_healthy_share", "is not a share"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path := writeConfig(t, dir, head+tt.text+"\n")
			_, err := LoadConfig(path)
			var ce *ConfigError
			if !errors.As(err, &ce) || len(ce.Problems) != 1 {
				t.Fatalf("LoadConfig = %v, want one problem", err)
			}
			if p := ce.Problems[0]; p.Line != 6 || p.Key != tt.key || !strings.Contains(p.Msg, tt.msg) {
				t.Errorf("problem %+v, want line 6, key %s, a message with %q", p, tt.key, tt.msg)
			}
			if strings.Contains(ce.Error(), "secret") {
				t.Errorf("the error repeats the URL's password: %v", ce)
			}
		})
	}
}

// TestGuardKeysInTheHandover: a live upgrade's state holds reload_guard and
// its URL only when set (an agent that predates them still adopts), and
// never the thresholds (a reload judges with the file it read).
func TestGuardKeysInTheHandover(t *testing.T) {
	c := DefaultConfig()
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "ReloadGuard") {
		t.Errorf("the defaults put the guard's keys in the JSON: %s", b)
	}
	c.Agent.ReloadGuard = Duration(10 * time.Second)
	c.Agent.ReloadGuardURL = "http://127.0.0.1/healthz"
	if b, err = json.Marshal(c); err != nil {
		t.Fatal(err)
	}
	if s := string(b); !strings.Contains(s, `"ReloadGuard":10000000000`) || !strings.Contains(s, `"ReloadGuardURL"`) || strings.Contains(s, "ReloadGuardMin") {
		t.Errorf("set: %s", b)
	}
}

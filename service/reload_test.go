//go:build linux

package service

import (
	"context"
	"testing"

	"github.com/envoy-agent/envoy-agent/envoy"
	"github.com/envoy-agent/envoy-agent/service/control"
)

// A reload's answer names its path with the envoy package's names for it:
// the wire's values and the plan's must not drift apart.
func TestReloadPathNames(t *testing.T) {
	for _, tc := range []struct {
		path envoy.ReloadPath
		want string
	}{{envoy.InPlace, control.PathInPlace}, {envoy.HotRestart, control.PathHotRestart}, {envoy.DrainRestart, control.PathDrainRestart}} {
		if got := tc.path.String(); got != tc.want {
			t.Errorf("%d.String() = %q, want %q", tc.path, got, tc.want)
		}
	}
}

// A plan in place without its InPlacePlan is refused, not run as a hot
// restart.
func TestReloadInPlaceNeedsItsPlan(t *testing.T) {
	e := envoy.NewEnvoy(envoy.ProxyConfig{})
	if _, err := e.Reload(context.Background(), envoy.ReloadPlan{Path: envoy.InPlace}); err == nil {
		t.Error("Reload in place with no plan: no error")
	}
}

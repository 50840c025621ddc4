//go:build linux

package service

import (
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

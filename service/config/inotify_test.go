//go:build linux

package config

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/envoy-agent/envoy-agent/internal/hostfiles"
)

// What Envoy watches is counted from the bootstrap: every
// path_config_source, watched_directory and runtime disk layer, in either
// spelling.
func TestWatchedSources(t *testing.T) {
	var doc yaml.Node
	text := `dynamic_resources: { lds_config: { path_config_source: { path: /l.yaml, watched_directory: { path: /w } } } }
static_resources:
  secrets: [{ name: s, sds_config: { pathConfigSource: { path: /s.yaml } } }]
  listeners: [{ name: l, route: { path: "path_config_source" } }]
layered_runtime: { layers: [{ name: d, disk_layer: { symlink_root: /srv/runtime } }] }
`
	if err := yaml.Unmarshal([]byte(text), &doc); err != nil {
		t.Fatal(err)
	}
	if n := watchedSources(&doc); n != 4 {
		t.Errorf("watchedSources = %d, want 4 (a value named so is no source)", n)
	}
}

// The verdict: over what the user has left, a configuration error naming
// the limit, the count and the fix; close to it a warning; short of
// watches for the certificates' folders, a warning. The room is what the
// probe could take: when it took fewer than it asked, exactly what is left.
func TestInotifyVerdict(t *testing.T) {
	folders := make([]string, 1000)
	for _, tt := range []struct {
		name     string
		need     InotifyNeed
		room     hostfiles.InotifyRoom
		refused  bool
		warnings []string
	}{
		{"room", InotifyNeed{Files: 2, Instances: 5}, hostfiles.InotifyRoom{MaxInstances: 128, Instances: 7, MaxWatches: 8192}, false, nil},
		{"over", InotifyNeed{Files: 72, Instances: 145}, hostfiles.InotifyRoom{MaxInstances: 128, Instances: 125, MaxWatches: 8192}, true, nil},
		{"over with what the user holds", InotifyNeed{Files: 40, Instances: 81}, hostfiles.InotifyRoom{MaxInstances: 128, Instances: 68, MaxWatches: 8192}, true, nil},
		{"near", InotifyNeed{Files: 50, Instances: 101}, hostfiles.InotifyRoom{MaxInstances: 128, Instances: 125, MaxWatches: 8192}, false, []string{"close to the limit"}},
		{"watches", InotifyNeed{Files: 2, Instances: 5, Folders: folders}, hostfiles.InotifyRoom{MaxInstances: 128, Instances: 7, MaxWatches: 1000, Watches: 990}, false, []string{"fs.inotify.max_user_watches leaves 990", "10 of 1000 held", "read every 30s"}},
		{"watches enough", InotifyNeed{Files: 2, Instances: 5, Folders: folders}, hostfiles.InotifyRoom{MaxInstances: 128, Instances: 7, MaxWatches: 8192, Watches: 1000}, false, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ws, err := inotifyVerdict("/etc/envoy.yaml", tt.need, tt.room)
			var ce *ConfigError
			if refused := errors.As(err, &ce); refused != tt.refused {
				t.Fatalf("verdict %v; want refused %v", err, tt.refused)
			}
			if tt.refused {
				msg := err.Error()
				held := fmt.Sprintf("with %d held", 128-tt.room.Instances)
				for _, want := range []string{"/etc/envoy.yaml", "fs.inotify.max_user_instances is 128", fmt.Sprintf("need %d inotify instances", tt.need.Instances), held, "/etc/sysctl.d/", "sysctl --system"} {
					if !strings.Contains(msg, want) {
						t.Errorf("the refusal lacks %q: %s", want, msg)
					}
				}
			}
			if len(ws) != min(len(tt.warnings), 1) {
				t.Fatalf("warnings %q, want one saying %q", ws, tt.warnings)
			}
			for _, want := range tt.warnings {
				if !strings.Contains(ws[0], want) {
					t.Errorf("warning %q lacks %q", ws[0], want)
				}
			}
		})
	}
}

package envoykit

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// The pinned release the kit falls back to is the one `make envoy`
// downloads.
func TestPinnedEnvoyVersionIsTheMakefiles(t *testing.T) {
	root := RepoRoot(t)
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^ENVOY_VERSION\s*\?=\s*(\S+)$`).FindSubmatch(mk)
	if m == nil || string(m[1]) != PinnedEnvoyVersion {
		t.Fatalf("Makefile's ENVOY_VERSION %q, PinnedEnvoyVersion %q; want them equal", m, PinnedEnvoyVersion)
	}
}

// FindEnvoy's precedence is the Makefile's: ENVOY_BIN, then PATH, then the
// pinned download (never another release or architecture in the cache).
func TestFindEnvoyPrecedence(t *testing.T) {
	dir := t.TempDir()
	onPath := filepath.Join(dir, "envoy")
	if err := os.WriteFile(onPath, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	fromEnv := filepath.Join(t.TempDir(), "envoy-from-env")
	if err := os.WriteFile(fromEnv, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	root := RepoRoot(t)
	pinned := PinnedEnvoyPath(root)
	tests := []struct {
		name, envoyBin, path, want string
	}{
		{"ENVOY_BIN first", fromEnv, dir, fromEnv},
		{"then PATH", "", dir, onPath},
		{"then the pinned download", "", t.TempDir(), pinned},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("ENVOY_BIN", tt.envoyBin)
			t.Setenv("PATH", tt.path)
			got, err := FindEnvoy("")
			if tt.want == pinned {
				if _, serr := os.Stat(pinned); serr != nil {
					if err == nil {
						t.Fatalf("FindEnvoy = %s without a pinned download; want an error", got)
					}
					return
				}
			}
			if err != nil || got != tt.want {
				t.Fatalf("FindEnvoy = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

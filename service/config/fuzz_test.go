//go:build linux

package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzLoadConfig: any file gives a configuration or a *ConfigError whose
// every problem names the file, never a panic.
func FuzzLoadConfig(f *testing.F) {
	f.Add([]byte("[envoy]\nadmin_port = 15000\ndrain_duration = \"45s\"\n[agent]\nstatus_port = 15020\n"))
	f.Add([]byte("[envoy]\nadmin_port = \"x\"\n"))
	f.Add([]byte("[agnet]\nx = 1\n"))
	f.Add([]byte("[envoy]\nlog_level = \"info,upstream:debug\"\nnode_ips = [\"::1\", 3]\n"))
	f.Add([]byte("[[envoy]]\n"))
	f.Add([]byte{0xff, 0xfe, 0, 1})
	if seeds, err := filepath.Glob(filepath.Join("..", "config.example.toml")); err == nil {
		for _, s := range seeds {
			if b, err := os.ReadFile(s); err == nil {
				f.Add(b)
			}
		}
	}
	dir := f.TempDir()
	path := filepath.Join(dir, "config.toml")
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := LoadConfig(path)
		if err == nil {
			return
		}
		var ce *ConfigError
		if !errors.As(err, &ce) || len(ce.Problems) == 0 {
			t.Fatalf("error %v is not a *ConfigError with problems", err)
		}
		for _, p := range ce.Problems {
			if p.File != path || p.Msg == "" || !strings.HasPrefix(p.String(), path) {
				t.Fatalf("problem %+v does not name the file or say what is wrong", p)
			}
		}
	})
}

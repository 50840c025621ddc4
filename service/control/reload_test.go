//go:build linux

package control

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestRequestReloadRefusesImpostors: `envoy-agent reload` believes only an
// answer from the agent that runs its configuration. The servers here are
// stand-ins for processes that took the socket's place; a real agent's
// answer is tested end to end in cmd/envoy-agent.
func TestRequestReloadRefusesImpostors(t *testing.T) {
	okBody := `{"ok":true,"epoch":7,"took_ms":1}`
	tests := []struct {
		name    string
		headers func(config string) map[string]string
		want    string // in the error; "" for success
	}{
		{"no identity", func(string) map[string]string { return nil }, "is not an envoy-agent"},
		{"claims another pid", func(config string) map[string]string {
			return map[string]string{controlPidHeader: "1", controlConfigHeader: config}
		}, "claims pid 1"},
		{"runs another configuration", func(string) map[string]string {
			return map[string]string{controlPidHeader: strconv.Itoa(os.Getpid()), controlConfigHeader: "/etc/other/config.toml"}
		}, `runs "/etc/other/config.toml"`},
		{"the agent itself", func(config string) map[string]string {
			return map[string]string{controlPidHeader: strconv.Itoa(os.Getpid()), controlConfigHeader: config}
		}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			config := filepath.Join(dir, "config.toml")
			if err := os.WriteFile(config, []byte("[agent]\nrun_dir = \"run\"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			sock := filepath.Join(dir, "run", "control.sock")
			if err := os.Mkdir(filepath.Dir(sock), 0o750); err != nil {
				t.Fatal(err)
			}
			ln, err := net.Listen("unix", sock)
			if err != nil {
				t.Fatal(err)
			}
			srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				for k, v := range tt.headers(config) {
					w.Header().Set(k, v)
				}
				fmt.Fprint(w, okBody)
			})}
			go func() { _ = srv.Serve(ln) }()
			t.Cleanup(func() { srv.Close() })
			var out strings.Builder
			err = RequestReload(context.Background(), config, ReloadOptions{}, &out)
			if tt.want == "" {
				if err != nil || out.String() != "reloaded: epoch 7 is serving (1 ms)\n" {
					t.Fatalf("reload = %v, %q", err, out.String())
				}
				return
			}
			var re *ReloadError
			if err == nil || errors.As(err, &re) || !strings.Contains(err.Error(), tt.want) || out.Len() != 0 {
				t.Fatalf("reload = %v, printed %q; want an error with %q", err, out.String(), tt.want)
			}
		})
	}
}

//go:build linux

package handover

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseVersionText(t *testing.T) {
	for _, tc := range []struct {
		name, text, version string
		versions            []int
		wantErr             string
	}{
		{name: "ours", text: VersionText("1.2.3"), version: "1.2.3", versions: formatVersions},
		{name: "several", text: "envoy-agent 2.0.0\nhandover 1 2\n", version: "2.0.0", versions: []int{1, 2}},
		{name: "no handover line", text: "envoy-agent 0.9.0\n", wantErr: "unexpected answer"},
		{name: "garbage", text: "Segmentation fault\n", wantErr: "unexpected answer"},
		{name: "bad number", text: "envoy-agent 2.0.0\nhandover one\n", wantErr: `bad handover version "one"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, vs, err := parseVersionText(tc.text)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || v != tc.version || len(vs) != len(tc.versions) {
				t.Fatalf("got %q %v %v, want %q %v", v, vs, err, tc.version, tc.versions)
			}
		})
	}
}

func TestTake(t *testing.T) {
	dir := t.TempDir()
	good := `{"version":1,"from_agent_version":"a","config":{"envoy":{},"agent":{}},"status_fd":3,"prometheus_fd":-1,"envoy":{"run_dir":"/x","epochs":[{"epoch":0,"pid":1,"serving":true}]}}`
	for _, tc := range []struct {
		name, text, wantErr string
	}{
		{name: "good", text: good},
		{name: "unknown version", text: `{"version":99}`, wantErr: "version 99, this agent reads [1 2 3]"},
		{name: "unknown field", text: strings.Replace(good, `"from_agent_version"`, `"from_agent_versoin"`, 1), wantErr: "unknown field"},
		{name: "no envoy", text: `{"version":1,"config":{"envoy":{},"agent":{}}}`, wantErr: "no Envoy"},
		{name: "not json", text: `{`, wantErr: "handover state"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, tc.name+".json")
			if err := os.WriteFile(path, []byte(tc.text), 0o600); err != nil {
				t.Fatal(err)
			}
			t.Setenv(stateEnv, path)
			st, err := Take()
			if _, serr := os.Stat(path); serr == nil {
				t.Errorf("the state file was not removed")
			}
			if os.Getenv(stateEnv) != "" {
				t.Errorf("%s still set", stateEnv)
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || st.FromAgentVersion != "a" || st.Envoy.Epochs[0].Pid != 1 {
				t.Fatalf("got %+v, %v", st, err)
			}
		})
	}
	t.Setenv(stateEnv, "")
	if st, err := Take(); st != nil || err != nil {
		t.Fatalf("without the variable: %v, %v", st, err)
	}
}

func TestWriteIsPrivate(t *testing.T) {
	dir := t.TempDir()
	path, err := Write(dir, &State{Version: formatVersion})
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("state file %s: %v, mode %v; want 0600", path, err, fi.Mode().Perm())
	}
}

func TestExecEnv(t *testing.T) {
	environ := []string{"PATH=/bin", stateEnv + "=/old.json", "INVOCATION_ID=x", execFDEnv + "=9"}
	got := strings.Join(execEnv(environ, 7, "/run/handover-1.json"), " ")
	want := stateEnv + "=/run/handover-1.json PATH=/bin INVOCATION_ID=x " + execFDEnv + "=7"
	if got != want {
		t.Fatalf("execEnv = %q, want %q", got, want)
	}
}

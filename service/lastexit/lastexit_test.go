//go:build linux

package lastexit

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPath(t *testing.T) {
	for _, tc := range []struct{ env, instance, want string }{
		{"", "", ""},
		{"/var/lib/envoy-agent", "", "/var/lib/envoy-agent/last-exit.json"},
		{"/var/lib/envoy-agent:/var/lib/other", "edge", "/var/lib/envoy-agent/last-exit@edge.json"},
	} {
		t.Setenv(EnvStateDirectory, tc.env)
		if got := Path(tc.instance); got != tc.want {
			t.Errorf("STATE_DIRECTORY=%q instance %q: %q, want %q", tc.env, tc.instance, got, tc.want)
		}
	}
}

func TestWriteRead(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "last-exit.json")
	if r, err := Read(path); r != nil || err != nil {
		t.Fatalf("no record yet: %+v %v", r, err)
	}
	long := strings.Repeat("x", 3*maxReason)
	for _, tc := range []struct {
		err  error
		want string
	}{
		{nil, "stopped"},
		{errors.New("envoy (pid 7, epoch 0) exited by itself after 1s: signal: segmentation fault (SIGSEGV; core dumped); its last log lines:\n  last line"), "envoy (pid 7, epoch 0) exited by itself after 1s: signal: segmentation fault (SIGSEGV; core dumped)"},
		{errors.New(long), long[:maxReason]},
	} {
		if err := Write(path, tc.err); err != nil {
			t.Fatal(err)
		}
		r, err := Read(path)
		if err != nil || r == nil {
			t.Fatalf("read: %+v %v", r, err)
		}
		if r.Reason != tc.want || r.Pid != os.Getpid() || r.At == "" {
			t.Errorf("record %+v, want reason %q and this pid", r, tc.want)
		}
		if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("record file: %v %v, want mode 0600", fi.Mode(), err)
		}
	}
	if err := Write("", errors.New("x")); err != nil {
		t.Errorf("no path: %v", err)
	}
	if r, err := Read(""); r != nil || err != nil {
		t.Errorf("no path: %+v %v", r, err)
	}
	if err := os.WriteFile(path, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(path); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("a broken record: %v, want an error naming %s", err, path)
	}
}

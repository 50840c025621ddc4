// Package envoykit runs a real Envoy for the tests and the benchmark: it
// finds the binary, picks ports below the kernel's ephemeral range, writes
// bootstraps, serves an upstream, listens as systemd's NOTIFY_SOCKET, and
// puts a fixed-rate load through Envoy that counts failures as a client that
// does not retry sees them.
//
// It takes no testing.TB, so the benchmark (a plain program) uses it as is;
// internal/testenvoy wraps it for tests, failing the test on an error.
package envoykit

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// FindEnvoy returns the real Envoy to run: explicit when it is set, else
// $ENVOY_BIN, else an envoy on PATH, else the newest one `make envoy` cached
// under the repository's .cache folder.
func FindEnvoy(explicit string) (string, error) {
	for _, p := range []string{explicit, os.Getenv("ENVOY_BIN")} {
		if p == "" {
			continue
		}
		abs, err := filepath.Abs(p)
		if err != nil {
			return "", err
		}
		if _, err := os.Stat(abs); err != nil {
			return "", errors.Join(errors.New("envoy binary (run `make envoy`)"), err)
		}
		return abs, nil
	}
	if p, err := exec.LookPath("envoy"); err == nil {
		return p, nil
	}
	if root, err := RepoRoot(); err == nil {
		// .cache/envoy/<version>/envoy is x86_64, <version>-aarch64 is aarch64
		// (make envoy-arm64): only this architecture's can run natively.
		m, _ := filepath.Glob(filepath.Join(root, ".cache", "envoy", "*", "envoy"))
		for i := len(m) - 1; i >= 0; i-- {
			aarch64 := strings.HasSuffix(filepath.Base(filepath.Dir(m[i])), "-aarch64")
			if aarch64 == (runtime.GOARCH == "arm64") {
				return m[i], nil
			}
		}
	}
	return "", errors.New("no Envoy binary: set ENVOY_BIN, put envoy on PATH, or run `make envoy`")
}

// RepoRoot is the module's root folder, found from this source file.
func RepoRoot() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("cannot find the source folder")
	}
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..")), nil
}

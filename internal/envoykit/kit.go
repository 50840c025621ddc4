// Package envoykit runs a real Envoy for the tests and the benchmark: it
// finds the binary, picks ports below the kernel's ephemeral range, writes
// bootstraps, serves an upstream, listens as systemd's NOTIFY_SOCKET, and
// puts the one load of the tests and the benchmark through Envoy (Load):
// Go's client at a fixed rate, raw HTTP/1.1 workers or h2c workers, each
// counting failures as a client that does not retry sees them.
//
// The tests and the benchmark share it. Its functions that take a
// testing.TB are the tests' forms: they fail the test on an error and close
// what they started when the test ends (Binary, FreePort, NewPorts,
// WriteBootstrap, NewUpstream, NewNotifySocket, StartLoadUntilCleanup); the
// benchmark (a plain program) calls the forms that return an error
// (FindEnvoy, FreePorts, RenderBootstrap, StartUpstream, ListenNotify,
// StartLoad). For tests only there are also the tests' one Eventually, an
// HTTP Get, an idle HTTP/2 connection watched frame by frame (IdleH2) and
// a child test under a memory limit (UnderMemoryLimit).
package envoykit

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// PinnedEnvoyVersion is the Envoy release `make envoy` downloads into
// .cache/envoy/<version>/envoy: the Makefile's ENVOY_VERSION (a test keeps
// the two equal).
const PinnedEnvoyVersion = "1.40.0"

// EnvTestTier, set to "unit" (make test-unit), makes every test that runs
// the real Envoy skip, leaving the fast tier: parsers, caches, limits,
// checks and the agent's logic with fakes.
const EnvTestTier = "ENVOY_AGENT_TEST_TIER"

// UnitTier reports whether only the fast tier runs (EnvTestTier=unit).
func UnitTier() bool { return os.Getenv(EnvTestTier) == "unit" }

// FindEnvoy returns the real Envoy to run, with the Makefile's precedence:
// explicit when it is set (a flag), else $ENVOY_BIN, else an envoy on PATH,
// else the pinned download (PinnedEnvoyPath). The
// cache also holds other releases and other architectures, so it is never
// searched: a test runs the one release `make test` would.
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
	root, err := repoRoot()
	if err != nil {
		return "", err
	}
	pinned := PinnedEnvoyPath(root)
	if _, err := os.Stat(pinned); err != nil {
		return "", fmt.Errorf("no Envoy binary: set ENVOY_BIN, put envoy on PATH, or run `make envoy` (%w)", err)
	}
	return pinned, nil
}

// PinnedEnvoyPath is where `make envoy` puts the pinned release under the
// repository root: .cache/envoy/<version>/envoy is x86_64,
// .cache/envoy/<version>-aarch64/envoy aarch64 (make envoy-arm64); this
// architecture's is the one that runs natively.
func PinnedEnvoyPath(root string) string {
	dir := PinnedEnvoyVersion
	if runtime.GOARCH == "arm64" {
		dir += "-aarch64"
	}
	return filepath.Join(root, ".cache", "envoy", dir, "envoy")
}

// Binary returns the real Envoy the tests run (FindEnvoy). It fails the
// test when there is none: these tests are not to be skipped, except by
// make test-unit, the fast tier (UnitTier), which leaves them to make test.
func Binary(t testing.TB) string {
	t.Helper()
	if UnitTier() {
		t.Skip("runs the real Envoy: make test (this is make test-unit)")
	}
	p, err := FindEnvoy("")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// RepoRoot is the module's root folder (repoRoot); it fails the test when
// it cannot be found.
func RepoRoot(t testing.TB) string {
	t.Helper()
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// repoRoot is the module's root folder, found from this source file.
func repoRoot() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("cannot find the source folder")
	}
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..")), nil
}

//go:build linux

package repo

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestTestKeyIsWarnedOfOnEveryRun: a repository signed with the test key
// (no passphrase, in the build's cache) says so on every run that signs
// with it. Only the run that made the key said anything ("made a test
// signing key"), and no run warned that it must not be published.
func TestTestKeyIsWarnedOfOnEveryRun(t *testing.T) {
	for _, tool := range []string{"apt-ftparchive", "createrepo_c", "rpmsign", "rpmkeys", "gpg", "gpgv"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is missing (make repo-tools installs it)", tool)
		}
	}
	gnupg := filepath.Join(t.TempDir(), "gnupg")
	t.Cleanup(func() {
		kill := exec.Command("gpgconf", "--kill", "gpg-agent")
		kill.Env = append(os.Environ(), "GNUPGHOME="+gnupg)
		_ = kill.Run()
	})
	for run := 1; run <= 2; run++ {
		cmd := exec.Command("bash", "mkrepo.sh", filepath.Join(t.TempDir(), "repo"))
		cmd.Env = append(os.Environ(), "GNUPGHOME="+gnupg, "REPO_KEY=", "REPO_TEST_KEY=1")
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("run %d: %v\n%s%s", run, err, out, stderr.String())
		}
		if !strings.Contains(stderr.String(), "warning: signing with the TEST key") {
			t.Fatalf("run %d says nothing of the test key:\n%s%s", run, out, stderr.String())
		}
	}
	// A real key is not warned of.
	cmd := exec.Command("bash", "mkrepo.sh", filepath.Join(t.TempDir(), "repo"))
	cmd.Env = append(os.Environ(), "GNUPGHOME="+gnupg, "REPO_KEY=envoy-agent test repository")
	if out, err := cmd.CombinedOutput(); err != nil || strings.Contains(string(out), "TEST key") {
		t.Fatalf("with REPO_KEY set: %v\n%s", err, out)
	}
}

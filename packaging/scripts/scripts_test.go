//go:build linux

package scripts

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// serviceUID is the service's user in these tests: an unprivileged uid
// whose process the scripts find as the unit's MainPID.
const serviceUID = 1001

// TestMain makes the test binary, copied into the service user's directory
// and run from there, play the service user's agent: "hold" waits (its
// cmdline names a configuration of the user's choosing), and any other run
// of the copy (root executing /proc/MAINPID/exe) leaves a mark saying who
// ran it.
func TestMain(m *testing.M) {
	switch os.Getenv("SCRIPTS_HELPER") {
	case "hold":
		if child := os.Getenv("SCRIPTS_CHILD"); child != "" {
			// Its "Envoy": a child executing the file at child, holding
			// the same stdin.
			c := exec.Command(child)
			c.Env = append(os.Environ(), "SCRIPTS_CHILD=")
			c.Stdin = os.Stdin
			_ = c.Start()
		}
		var b [1]byte
		_, _ = os.Stdin.Read(b[:])
		os.Exit(0)
	}
	if filepath.Base(os.Args[0]) == "agent" || strings.HasPrefix(filepath.Base(os.Args[0]), "exe") {
		self, _ := os.Executable()
		_ = os.WriteFile(filepath.Join(filepath.Dir(self), "ran"), fmt.Appendf(nil, "uid %d ran %q\n", os.Geteuid(), os.Args), 0o644)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// stub writes an executable shell script.
func stub(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
}

// TestLiveUpgradeTrustsOnlyRoot runs the deb postinst (configure after an
// upgrade) and the rpm %posttrans as root, the unit's MainPID being a
// process of uid 1001 that executes a file of its own and names a
// configuration of its own in its cmdline. The scripts must take the
// configuration from the unit's ExecStart= (or the instance name) and run
// only binaries root installed: the new /usr/bin/envoy-agent, or, when that
// does not run, root's copy of the one installed before. They once ran
// /proc/MAINPID/exe as root and passed it the --config of its cmdline.
func TestLiveUpgradeTrustsOnlyRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the scripts run as root, in a private mount namespace with its own /usr/bin and /run")
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("needs unshare(1)")
	}
	tests := []struct {
		name, script string
		args         []string
		unit         string
		execStart    string // the unit's ExecStart= argv, as systemctl show prints it
		newRuns      bool   // the new /usr/bin/envoy-agent answers `version`
		wantConfig   string
		// envoyChild: the agent's child (its Envoy) runs a file of the
		// user's, named with terminal escapes, replaced since: the script
		// prints that path, which must reach root's terminal escaped.
		envoyChild bool
	}{
		{"deb, new binary runs", "deb/postinst", []string{"configure", "0.9.0"}, "envoy-agent.service",
			"/usr/bin/envoy-agent run --config /etc/envoy-agent/config.toml", true, "/etc/envoy-agent/config.toml", false},
		{"deb, new binary broken", "deb/postinst", []string{"configure", "0.9.0"}, "envoy-agent.service",
			"/usr/bin/envoy-agent run --config /etc/envoy-agent/config.toml", false, "/etc/envoy-agent/config.toml", false},
		{"deb, instance", "deb/postinst", []string{"configure", "0.9.0"}, "envoy-agent@edge.service",
			"/usr/bin/envoy-agent run --config /etc/envoy-agent/%i.toml", false, "/etc/envoy-agent/edge.toml", false},
		{"deb, the running Envoy's file replaced, its name forged", "deb/postinst", []string{"configure", "0.9.0"}, "envoy-agent.service",
			"/usr/bin/envoy-agent run --config /etc/envoy-agent/config.toml", true, "/etc/envoy-agent/config.toml", true},
		{"rpm, new binary runs", "rpm/posttrans.sh", []string{"0"}, "envoy-agent.service",
			"/usr/bin/envoy-agent run --config=/etc/envoy-agent/config.toml", true, "/etc/envoy-agent/config.toml", false},
		{"rpm, new binary broken", "rpm/posttrans.sh", []string{"0"}, "envoy-agent@edge.service",
			"/usr/bin/envoy-agent run --config /etc/envoy-agent/edge.toml", false, "/etc/envoy-agent/edge.toml", false},
	}
	script, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The service user's directory, and its "agent": a copy of this
			// binary, running as uid 1001 with a --config of its choosing.
			userDir, err := os.MkdirTemp("", "service-user-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(userDir) })
			agent := filepath.Join(userDir, "agent")
			data, err := os.ReadFile(self)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(agent, data, 0o755); err != nil {
				t.Fatal(err)
			}
			for _, p := range []string{userDir, agent} {
				if err := os.Chown(p, serviceUID, serviceUID); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.Chmod(userDir, 0o755); err != nil {
				t.Fatal(err)
			}
			evilConfig := filepath.Join(userDir, "evil.toml")
			hold := exec.Command(agent, "run", "--config", evilConfig)
			hold.Env = append(os.Environ(), "SCRIPTS_HELPER=hold")
			forged := filepath.Join(userDir, "envoy\x1b]0;forged title\x07\r\x1b[2K")
			if tt.envoyChild {
				if err := os.WriteFile(forged, data, 0o755); err != nil {
					t.Fatal(err)
				}
				hold.Env = append(hold.Env, "SCRIPTS_CHILD="+forged)
			}
			hold.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: serviceUID, Gid: serviceUID}}
			stdin, err := hold.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := hold.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { stdin.Close(); _ = hold.Wait() })
			if tt.envoyChild {
				// Once the child runs the file (it has executed it, not
				// only been forked: a child listed before its execve ran
				// the replacement instead), its file is replaced:
				// /proc/PID/exe then reads "PATH (deleted)", and PATH is
				// there again.
				children := fmt.Sprintf("/proc/%d/task/%d/children", hold.Process.Pid, hold.Process.Pid)
				runs := func() bool {
					b, _ := os.ReadFile(children)
					for _, pid := range strings.Fields(string(b)) {
						if exe, _ := os.Readlink("/proc/" + pid + "/exe"); exe == forged {
							return true
						}
					}
					return false
				}
				for deadline := time.Now().Add(10 * time.Second); !runs(); time.Sleep(10 * time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatal("the service user's agent has no child running its Envoy after 10 s")
					}
				}
				if err := os.Remove(forged); err != nil {
					t.Fatal(err)
				}
				stub(t, forged, "exit 0\n")
			}

			// Root's side: systemd's tools played by stand-ins, the new
			// binary and root's kept copy of the old one recording how
			// they were run.
			dir := t.TempDir()
			stubs := filepath.Join(dir, "stubs")
			if err := os.Mkdir(stubs, 0o755); err != nil {
				t.Fatal(err)
			}
			log := filepath.Join(dir, "log")
			stub(t, filepath.Join(stubs, "systemctl"), fmt.Sprintf(`case "$*" in
*list-units*) echo "%s loaded active running x" ;;
*MainPID*) echo %d ;;
*ExecStart*) echo "{ path=/usr/bin/envoy-agent ; argv[]=%s ; ignore_errors=no ; start_time=[n/a] ; stop_time=[n/a] ; pid=0 ; code=(null) ; status=0/0 }" ;;
esac
exit 0
`, tt.unit, hold.Process.Pid, tt.execStart))
			for _, name := range []string{"deb-systemd-helper", "logger"} {
				stub(t, filepath.Join(stubs, name), "exit 0\n")
			}
			stub(t, filepath.Join(stubs, "deb-systemd-invoke"), fmt.Sprintf("echo \"invoke $*\" >>%s\n", log))
			newBin, kept := filepath.Join(dir, "new"), filepath.Join(dir, "kept")
			if tt.newRuns {
				stub(t, newBin, fmt.Sprintf("[ \"$1\" = version ] && exit 0\necho \"new $*\" >>%s\nexit 0\n", log))
			} else {
				stub(t, newBin, "echo broken >&2\nexit 1\n")
			}
			stub(t, kept, fmt.Sprintf("[ \"$1\" = version ] && exit 0\necho \"kept $*\" >>%s\nexit 1\n", log))
			mark := ""
			if strings.HasPrefix(tt.script, "rpm/") {
				mark = "mount -t tmpfs none /var/lib && mkdir -p /var/lib/rpm-state/envoy-agent && : >/var/lib/rpm-state/envoy-agent/upgrade && "
			}
			sh := fmt.Sprintf(`set -e
mount --make-rprivate /
mount -t tmpfs none /run
mkdir -p /run/systemd/system /run/envoy-agent-package
cp %[1]s/kept /run/envoy-agent-package/envoy-agent
mkdir %[1]s/orig
mount --bind /usr/bin %[1]s/orig
mount -t tmpfs none /usr/bin
%[1]s/orig/cp -as %[1]s/orig/. /usr/bin/
%[1]s/orig/rm -f /usr/bin/envoy-agent
%[1]s/orig/cp %[1]s/new /usr/bin/envoy-agent
%[2]s
PATH=%[3]s:$PATH sh %[4]s "$@"
`, dir, mark, stubs, filepath.Join(script, tt.script))
			cmd := exec.Command("unshare", append([]string{"-m", "sh", "-c", sh, "script"}, tt.args...)...)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%s %v: %v\n%s", tt.script, tt.args, err, out)
			}
			t.Logf("%s %s:\n%s", tt.script, strings.Join(tt.args, " "), out)
			if strings.ContainsAny(string(out), "\x1b\x07\r") {
				t.Fatalf("the script printed control characters: %q", out)
			}
			if tt.envoyChild && !strings.Contains(string(out), "envoy?]0;forged title???[2K changed: reloading") {
				t.Fatalf("the script did not name the replaced binary (escaped): %q", out)
			}
			if ran, err := os.ReadFile(filepath.Join(userDir, "ran")); err == nil {
				t.Fatalf("root ran the service user's binary (/proc/%d/exe): %s", hold.Process.Pid, ran)
			}
			all, _ := os.ReadFile(log)
			var got string // what ran envoy-agent (a stopped plain unit's restart aside)
			for _, l := range strings.SplitAfter(string(all), "\n") {
				if !strings.HasPrefix(l, "invoke ") {
					got += l
				}
			}
			want := "new upgrade --config " + tt.wantConfig + "\n"
			if !tt.newRuns {
				want = "kept upgrade --config " + tt.wantConfig + "\n"
			}
			if got != want {
				t.Fatalf("the scripts ran:\n%s\nwant %q (never %s, the --config of the service user's cmdline)", got, want, evilConfig)
			}
		})
	}
}

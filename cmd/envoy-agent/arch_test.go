//go:build linux

package main

// Which architecture the agent and Envoy really run as. Natively that is the
// build host's; under make test-arm64 the test binary, the agent and Envoy
// are arm64 (aarch64) programs that qemu-user runs through binfmt_misc, and
// this test is what shows it.

import (
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/envoy-agent/envoy-agent/internal/envoykit"
)

// elfMachines maps a GOARCH to the ELF machine of its programs.
var elfMachines = map[string]elf.Machine{
	"amd64": elf.EM_X86_64,
	"arm64": elf.EM_AARCH64,
}

// elfMachine is the machine an ELF file is built for.
func elfMachine(t *testing.T, path string) elf.Machine {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	defer f.Close()
	return f.Machine
}

// mapsFile reports whether process pid has path mapped (its program, when
// path is an executable): an emulated process's /proc/PID/exe is the
// emulator, but the program it runs is mapped from its own file.
func mapsFile(t *testing.T, pid int, path string) bool {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Fatalf("maps of pid %d: %v", pid, err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasSuffix(line, " "+path) {
			return true
		}
	}
	return false
}

func TestAgentAndEnvoyRunAsTheTestsArchitecture(t *testing.T) {
	t.Parallel()
	want, ok := elfMachines[runtime.GOARCH]
	if !ok {
		t.Skipf("no ELF machine known for GOARCH %s", runtime.GOARCH)
	}
	p := startAgent(t, procOptions{})
	envoyBin, err := filepath.EvalSymlinks(envoykit.Binary(t))
	if err != nil {
		t.Fatal(err)
	}
	agent, err := filepath.EvalSymlinks(agentBin(t))
	if err != nil {
		t.Fatal(err)
	}
	procs := []struct {
		what string
		pid  int
		file string
	}{
		{"agent", p.proc.Pid(), agent},
		{"envoy", p.envoyPid, envoyBin},
	}
	for _, pr := range procs {
		if got := elfMachine(t, pr.file); got != want {
			t.Errorf("the %s binary %s is built for %s; want %s (GOARCH %s)", pr.what, pr.file, got, want, runtime.GOARCH)
		}
		if !mapsFile(t, pr.pid, pr.file) {
			t.Errorf("the %s (pid %d) does not run %s", pr.what, pr.pid, pr.file)
		}
		exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pr.pid))
		if err != nil {
			t.Errorf("the %s's /proc/%d/exe: %v", pr.what, pr.pid, err)
		}
		t.Logf("GOARCH %s: the %s, pid %d, runs %s (%s); its /proc/%d/exe is %s", runtime.GOARCH, pr.what, pr.pid, pr.file, want, pr.pid, exe)
	}
}

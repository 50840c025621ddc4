package envoykit

import (
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// memLimitEnv marks the child process of UnderMemoryLimit and carries its
// limit in bytes.
const memLimitEnv = "ENVOY_AGENT_TEST_MEMLIMIT"

// ChildUsage is what the child of UnderMemoryLimit used.
type ChildUsage struct {
	MaxRSS int64         // peak resident set, bytes
	CPU    time.Duration // user and system time
}

// UnderMemoryLimit runs the calling test again in a child process (the
// test binary, -test.run naming only this test) whose data segment is at
// most limit bytes, for tests that feed a parser hostile input: on a
// machine with no swap, one such input once reached 23 GB. In the child it
// sets the limit and returns true: the test goes on there. In the parent it
// waits for the child, fails t with the child's output when the child
// failed (an allocation past the limit kills it), and returns false and
// what the child used. The limit is RLIMIT_DATA, which bounds Go's heap as
// RLIMIT_AS does but leaves out the race detector's shadow memory (a race
// build does not start under an RLIMIT_AS of a few GB).
func UnderMemoryLimit(t *testing.T, limit uint64) (child bool, used ChildUsage) {
	t.Helper()
	if os.Getenv(memLimitEnv) != "" {
		lim := &unix.Rlimit{Cur: limit, Max: limit}
		if err := unix.Setrlimit(unix.RLIMIT_DATA, lim); err != nil {
			t.Fatalf("set RLIMIT_DATA: %v", err)
		}
		return true, ChildUsage{}
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), memLimitEnv+"="+strconv.FormatUint(limit, 10))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the test under a %d MiB data limit failed (%v):\n%s", limit>>20, err, out)
	}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		used = ChildUsage{MaxRSS: ru.Maxrss << 10, CPU: time.Duration(ru.Utime.Nano() + ru.Stime.Nano())}
	}
	t.Logf("child: peak RSS %d MiB, CPU %s", used.MaxRSS>>20, used.CPU.Round(time.Millisecond))
	return false, used
}

package envoykit

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/envoy-agent/envoy-agent/internal/childenv"
	"github.com/envoy-agent/envoy-agent/internal/hostfiles"
)

// ReadyPoll is how often WaitReady asks Envoy's /ready: the finest a poller
// can reasonably measure a start with.
const ReadyPoll = time.Millisecond

// BareArgs is a bare Envoy's command line, as a plain unit would run it: one
// worker, log level warning, and a base id of its own (hot restart is on by
// default in Envoy, and another Envoy on the host may hold base id 0).
func BareArgs(bootstrap string, baseID uint32) []string {
	return []string{"-c", bootstrap, "--concurrency", "1", "-l", "warning",
		"--base-id", strconv.FormatUint(uint64(baseID), 10)}
}

// Process is an Envoy (or agent) the kit started, in its own process group,
// with a parent-death signal of SIGKILL: the one process harness of the
// tests and the benchmark.
type Process struct {
	Args    []string
	cmd     *exec.Cmd
	started time.Time // just before the fork
	done    chan struct{}
	exited  time.Time // set before done closes
	err     error     // set before done closes
}

// forkRequest asks the forking thread to start cmd.
type forkRequest struct {
	cmd  *exec.Cmd
	done chan error
}

// forker starts every child from one goroutine locked to an OS thread that
// never exits. Linux sends a child's parent-death signal when the thread
// that forked it exits, not the process (golang/go#27505), so a child forked
// from any other thread could be SIGKILLed while the tests or the benchmark
// still run; this way children die only with their parent process.
var forker = sync.OnceValue(func() chan<- forkRequest {
	reqs := make(chan forkRequest)
	go func() {
		runtime.LockOSThread() // never unlocked: this thread must outlive every child
		for r := range reqs {
			r.done <- r.cmd.Start()
		}
	}()
	return reqs
})

// Start runs bin with args, the environment cleaned of systemd's
// service-only variables plus env, and output to out (nil: discarded).
func Start(bin string, args []string, out io.Writer, env ...string) (*Process, error) {
	return start(bin, args, out, nil, nil, env...)
}

// StartAs is Start with the process run as cred's user and group (nil: as
// the caller), for the tests that run the agent as an unprivileged user.
func StartAs(cred *syscall.Credential, bin string, args []string, out io.Writer, env ...string) (*Process, error) {
	return start(bin, args, out, nil, cred, env...)
}

// start is Start with a function run once the process has been reaped,
// before Done closes (so that whoever waits for Done sees it done).
func start(bin string, args []string, out io.Writer, onExit func(), cred *syscall.Credential, env ...string) (*Process, error) {
	cmd := exec.Command(bin, args...)
	cmd.Env = childenv.Clean(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: cred}
	p := &Process{Args: args, cmd: cmd, done: make(chan struct{})}
	r := forkRequest{cmd: cmd, done: make(chan error, 1)}
	p.started = time.Now()
	forker() <- r
	if err := <-r.done; err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	go func() {
		p.err = cmd.Wait()
		p.exited = time.Now()
		if onExit != nil {
			onExit()
		}
		close(p.done)
	}()
	return p, nil
}

// StartEnvoy runs a bare Envoy on bootstrap (BareArgs). Once it has exited,
// and before Done closes, its hot-restart shared memory is removed: Envoy
// leaves /dev/shm/envoy_shared_memory_<base id × 10> behind, and runs of
// the tests and the benchmark would pile them up.
func StartEnvoy(bin, bootstrap string, baseID uint32, out io.Writer) (*Process, error) {
	return start(bin, BareArgs(bootstrap, baseID), out, func() { RemoveSharedMemory(baseID) }, nil)
}

// RemoveSharedMemory removes the hot-restart shared memory an Envoy with
// this base id leaves behind once every epoch is gone.
func RemoveSharedMemory(baseID uint32) {
	_ = os.Remove(hostfiles.SharedMemoryPath(baseID))
}

// Pid is the process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Done is closed once the process has exited and been reaped.
func (p *Process) Done() <-chan struct{} { return p.done }

// Err is how the process ended; it waits for the exit.
func (p *Process) Err() error { <-p.done; return p.err }

// ExitCode is the process's exit status, -1 when a signal ended it; it
// waits for the exit.
func (p *Process) ExitCode() int { <-p.done; return p.cmd.ProcessState.ExitCode() }

// State describes how the process ended; it waits for the exit.
func (p *Process) State() *os.ProcessState { <-p.done; return p.cmd.ProcessState }

// Started is when the process was forked (just before).
func (p *Process) Started() time.Time { return p.started }

// Exited is when the process was reaped; it waits for the exit.
func (p *Process) Exited() time.Time { <-p.done; return p.exited }

// Running reports whether the process has not exited yet.
func (p *Process) Running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Wait waits up to timeout for the process to exit; it fails when ctx
// ends first or the timeout passes.
func (p *Process) Wait(ctx context.Context, timeout time.Duration) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-p.done:
		return nil
	case <-t.C:
		return fmt.Errorf("pid %d still running after %s", p.Pid(), timeout)
	case <-ctx.Done():
		return fmt.Errorf("pid %d: %w", p.Pid(), ctx.Err())
	}
}

// Signal sends sig to the process group.
func (p *Process) Signal(sig syscall.Signal) {
	select {
	case <-p.done:
	default:
		_ = syscall.Kill(-p.Pid(), sig)
	}
}

// Kill ends the process group and waits for the process.
func (p *Process) Kill() {
	p.Signal(syscall.SIGKILL)
	<-p.done
}

// WaitReady polls Envoy's admin GET /ready every ReadyPoll until it answers
// 200, and returns when it did; it fails when the process exits or timeout
// passes.
func (p *Process) WaitReady(adminPort int, timeout time.Duration) error {
	_, err := WaitReady(context.Background(), adminPort, timeout, p.done)
	return err
}

// WaitReady polls GET /ready on the admin port every ReadyPoll until it
// answers 200 and returns the time it did; it fails when abort closes
// (nil: never), ctx ends or timeout passes.
func WaitReady(ctx context.Context, adminPort int, timeout time.Duration, abort <-chan struct{}) (time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	client := &http.Client{Timeout: time.Second, Transport: &http.Transport{Proxy: nil}}
	url := "http://127.0.0.1:" + strconv.Itoa(adminPort) + "/ready"
	tick := time.NewTicker(ReadyPoll)
	defer tick.Stop()
	for {
		if resp, err := client.Get(url); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return time.Now(), nil
			}
		}
		select {
		case <-abort:
			return time.Time{}, fmt.Errorf("envoy exited before its /ready answered 200")
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("envoy's /ready did not answer 200 within %s: %w", timeout, ctx.Err())
		case <-tick.C:
		}
	}
}

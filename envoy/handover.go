//go:build linux

package envoy

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/envoy-agent/envoy-agent/envoy/output"
)

// HandoverState is what a new agent needs to adopt the running Envoys when
// the old agent re-executes into it (a live upgrade of the agent): every
// epoch not yet reaped, and the run folder's bookkeeping. The agent that
// hands over serializes it; this package only makes and reads it.
type HandoverState struct {
	RunDir    string `json:"run_dir"`
	OwnRunDir bool   `json:"own_run_dir"` // the run folder is a temporary one the proxy made
	Snapshots uint64 `json:"snapshots"`   // the bootstrap copies' sequence, so new names never collide
	// HotRestartSocket is the epochs' --socket-path; "" when they use
	// Envoy's abstract sockets (an agent that wrote handover version 1
	// ran them so): the next epoch must find its parent where it is.
	HotRestartSocket string       `json:"hot_restart_socket"`
	Epochs           []EpochState `json:"epochs"`
}

// EpochState is one running Envoy epoch in a HandoverState.
type EpochState struct {
	Epoch            int           `json:"epoch"`
	Pid              int           `json:"pid"`
	Serving          bool          `json:"serving"`
	StartedUnixNano  int64         `json:"started_unix_nano"`
	AdminAddressPath string        `json:"admin_address_path"`
	Snapshot         string        `json:"snapshot"`
	Outputs          []OutputState `json:"outputs"`
}

// OutputState is the read end of a pipe an Envoy writes its output to,
// kept open across the exec.
type OutputState struct {
	Stream string `json:"stream"` // "stdout" or "stderr"
	FD     int    `json:"fd"`
}

// Inheritable clears (on) or sets (off) close-on-exec on a file or socket,
// without changing its blocking mode (File.Fd would), and returns its fd.
func Inheritable(f syscall.Conn, on bool) (int, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return -1, err
	}
	fd := -1
	var ferr error
	err = rc.Control(func(u uintptr) {
		fd = int(u)
		flag := unix.FD_CLOEXEC
		if on {
			flag = 0
		}
		_, ferr = unix.FcntlInt(u, unix.F_SETFD, flag)
	})
	return fd, errors.Join(err, ferr)
}

// Handover lets the caller re-execute the agent with the running Envoys
// kept: it blocks hot restarts, makes the pipes of Envoy's output
// inheritable, and calls execute with the state to hand over. execute
// returns only when the exec failed; the pipes are then made close-on-exec
// again and Envoy goes on as before.
func (e *Envoy) Handover(execute func(HandoverState) error) error {
	e.restartMu.Lock()
	defer e.restartMu.Unlock()
	e.mu.Lock()
	if e.closed || e.cur == nil {
		e.mu.Unlock()
		return errors.New("envoy is not running (starting or stopping): nothing to hand over")
	}
	st := HandoverState{RunDir: e.runDir, OwnRunDir: e.ownRunDir, Snapshots: e.snapshots.Load(), HotRestartSocket: e.hotRestartSocket}
	var procs []*process
	for p := range e.procs {
		if !p.exited() {
			procs = append(procs, p)
		}
	}
	cur := e.cur
	e.mu.Unlock()
	var pipes []*outputPipe
	defer func() {
		for _, o := range pipes {
			_, _ = Inheritable(o.r, false)
		}
	}()
	for _, p := range procs {
		es := EpochState{Epoch: p.epoch, Pid: p.pid, Serving: p == cur, StartedUnixNano: p.started.UnixNano(),
			AdminAddressPath: p.adminAddressPath, Snapshot: p.snapshot}
		for _, o := range p.outputs {
			fd, err := Inheritable(o.r, true)
			if err != nil {
				return fmt.Errorf("keep envoy pid %d's %s open across the exec: %w", p.pid, o.stream, err)
			}
			pipes = append(pipes, o)
			es.Outputs = append(es.Outputs, OutputState{Stream: o.stream, FD: fd})
		}
		st.Epochs = append(st.Epochs, es)
	}
	return execute(st)
}

// ExecOnForkerThread replaces the agent with binary (execve), from the
// thread that forked every Envoy, so that their parent-death signal does
// not fire: that thread becomes the new program's main thread. It returns
// only when the exec failed.
func ExecOnForkerThread(binary string, argv, env []string) error {
	var err error
	onForkerThread(func() { err = syscall.Exec(binary, argv, env) })
	return fmt.Errorf("exec %s: %w", binary, err)
}

// AdoptEnvoy returns an Envoy for cfg that supervises the epochs in st,
// which a previous agent in this same process (before its exec) started:
// they are this process's children. Its Run starts no epoch; it waits on
// the serving one as if it had started it.
func AdoptEnvoy(cfg ProxyConfig, st HandoverState) (*Envoy, error) {
	e := NewEnvoy(cfg)
	e.runDirOnce.Do(func() {
		e.runDir, e.ownRunDir, e.hotRestartSocket = st.RunDir, st.OwnRunDir, st.HotRestartSocket
	})
	e.snapshots.Store(st.Snapshots)
	stdout, stderr := cfg.outputs()
	for _, es := range st.Epochs {
		p := &process{
			epoch: es.Epoch, pid: es.Pid, started: time.Unix(0, es.StartedUnixNano),
			adminAddressPath: es.AdminAddressPath, snapshot: es.Snapshot,
			relay: output.NewRelay(stdout, stderr), done: make(chan struct{}),
		}
		for _, o := range es.Outputs {
			f := os.NewFile(uintptr(o.FD), "envoy-"+o.Stream)
			if f == nil {
				return nil, fmt.Errorf("adopt envoy pid %d: bad %s fd %d", es.Pid, o.Stream, o.FD)
			}
			if _, err := Inheritable(f, false); err != nil {
				return nil, fmt.Errorf("adopt envoy pid %d's %s: %w", es.Pid, o.Stream, err)
			}
			op := &outputPipe{stream: o.Stream, r: f, copied: make(chan struct{})}
			if o.Stream == "stdout" {
				op.copyTo(p.relay.Stdout())
			} else {
				op.copyTo(p.relay.Stderr())
			}
			p.outputs = append(p.outputs, op)
		}
		proc, err := os.FindProcess(es.Pid)
		if err != nil {
			return nil, fmt.Errorf("adopt envoy pid %d: %w", es.Pid, err)
		}
		p.proc = proc
		if fi, err := os.Lstat(resourceDir(p.snapshot)); err == nil && fi.IsDir() {
			p.resources = resourceDir(p.snapshot) // it ran with ProxyConfig.ResourceFiles
		}
		go p.reap()
		e.track(p)
		if es.Serving {
			e.cur = p
		}
	}
	if e.cur == nil {
		return nil, errors.New("adopt envoy: the handed-over state names no serving epoch")
	}
	e.log.Infof("adopted envoy epoch %d, pid %d (%d epochs in all)", e.cur.epoch, e.cur.pid, len(st.Epochs))
	return e, nil
}

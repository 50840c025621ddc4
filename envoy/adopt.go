//go:build linux

package envoy

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/envoy-agent/envoy-agent/envoy/epochfiles"
	"github.com/envoy-agent/envoy-agent/envoy/output"
	"github.com/envoy-agent/envoy-agent/envoy/reexec"
)

// The Envoy side of a live upgrade of the agent (package reexec): what of
// the running epochs goes into the handed-over state, and how the new
// agent takes them back.

// Handover lets the caller re-execute the agent with the running Envoys
// kept: it blocks hot restarts, makes the pipes of Envoy's output
// inheritable, and calls execute with the state to hand over. execute
// returns only when the exec failed; the pipes are then made close-on-exec
// again and Envoy goes on as before.
func (e *Envoy) Handover(execute func(reexec.HandoverState) error) error {
	e.restartMu.Lock()
	defer e.restartMu.Unlock()
	e.mu.Lock()
	if e.closed || e.cur == nil {
		e.mu.Unlock()
		return errors.New("envoy is not running (starting or stopping): nothing to hand over")
	}
	st := reexec.HandoverState{RunDir: e.runDir, OwnRunDir: e.ownRunDir, Snapshots: e.copies.Count(), HotRestartSocket: e.hotRestartSocket}
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
			_, _ = reexec.Inheritable(o.r, false)
		}
	}()
	for _, p := range procs {
		es := reexec.EpochState{Epoch: p.epoch, Pid: p.pid, Serving: p == cur, StartedUnixNano: p.started.UnixNano(),
			AdminAddressPath: p.adminAddressPath, Snapshot: p.files.Copy}
		for _, o := range p.outputs {
			fd, err := reexec.Inheritable(o.r, true)
			if err != nil {
				return fmt.Errorf("keep envoy pid %d's %s open across the exec: %w", p.pid, o.stream, err)
			}
			pipes = append(pipes, o)
			es.Outputs = append(es.Outputs, reexec.OutputState{Stream: o.stream, FD: fd})
		}
		st.Epochs = append(st.Epochs, es)
	}
	return execute(st)
}

// AdoptEnvoy returns an Envoy for cfg that supervises the epochs in st,
// which a previous agent in this same process (before its exec) started:
// they are this process's children. Its Run starts no epoch; it waits on
// the serving one as if it had started it.
func AdoptEnvoy(cfg ProxyConfig, st reexec.HandoverState) (*Envoy, error) {
	e := NewEnvoy(cfg)
	e.runDirOnce.Do(func() {
		e.runDir, e.ownRunDir, e.hotRestartSocket = st.RunDir, st.OwnRunDir, st.HotRestartSocket
	})
	e.copies.Resume(st.Snapshots)
	stdout, stderr := cfg.outputs()
	for _, es := range st.Epochs {
		files, err := epochfiles.Adopted(es.Snapshot, cfg.ConfigPath, cfg.XDS)
		switch {
		case err != nil:
			// Envoy holds what it had; a reload hot-restarts it.
			e.log.Warnf("adopt envoy epoch %d, pid %d: its routes and secrets are not served again: %v", es.Epoch, es.Pid, err)
		case es.Serving && files.ReadsSecretFiles():
			e.log.Warnf("envoy epoch %d, pid %d, reads its certificates from files in %s that the agent before this one wrote; this agent serves them over ADS and no longer writes those files: a renewal reaches Envoy at the next reload (envoy-agent reload), whose new epoch reads them over ADS", es.Epoch, es.Pid, st.RunDir)
		}
		p := &process{
			epoch: es.Epoch, pid: es.Pid, started: time.Unix(0, es.StartedUnixNano),
			adminAddressPath: es.AdminAddressPath, files: files,
			relay: output.NewRelay(stdout, stderr), done: make(chan struct{}),
		}
		for _, o := range es.Outputs {
			f := os.NewFile(uintptr(o.FD), "envoy-"+o.Stream)
			if f == nil {
				return nil, fmt.Errorf("adopt envoy pid %d: bad %s fd %d", es.Pid, o.Stream, o.FD)
			}
			if _, err := reexec.Inheritable(f, false); err != nil {
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

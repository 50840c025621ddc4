package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/envoy-agent/envoy-agent/internal/envoykit"
)

// site is a work folder with an Envoy bootstrap in it, on ports that were
// free a moment ago: what every scenario sets up before it starts anything.
type site struct {
	dir       string
	admin     int   // Envoy's admin port
	listeners []int // Envoy's HTTP listeners
	spare     []int // further ports, picked with the others so that none repeats
	boot      envoykit.BootstrapOptions
	bootPath  string
}

// newSite makes the work folder name, picks 1+listeners+spare free ports
// (admin, listeners, spare, in that order) and writes a bootstrap with
// x-config-version version to envoy.yaml in it.
func (b *bench) newSite(name, version string, listeners, spare int) (*site, error) {
	dir, err := b.dir(name)
	if err != nil {
		return nil, err
	}
	ports, err := envoykit.FreePorts(1 + listeners + spare)
	if err != nil {
		return nil, err
	}
	s := &site{dir: dir, admin: ports[0], listeners: ports[1 : 1+listeners], spare: ports[1+listeners:],
		bootPath: filepath.Join(dir, "envoy.yaml")}
	s.boot = envoykit.BootstrapOptions{Ports: envoykit.Ports{Admin: s.admin, Listener: s.listeners[0], Upstream: b.up.Port},
		ExtraListeners: s.listeners[1:], ResponseHeader: version}
	if err := s.writeBootstrap(); err != nil {
		return nil, err
	}
	return s, nil
}

// writeBootstrap (re)writes the site's bootstrap, atomically.
func (s *site) writeBootstrap() error {
	b, err := envoykit.RenderBootstrap(s.boot)
	if err != nil {
		return err
	}
	return envoykit.WriteFileAtomic(s.bootPath, b)
}

// listener is the site's first (most often only) listener.
func (s *site) listener() int { return s.listeners[0] }

// quickDrain is the drain of the scenarios that do not measure one: short,
// so that quitting and hot restarts are quick.
var quickDrain = agentConfig{DrainDuration: time.Second, ParentShutdown: 2 * time.Second, TerminationDrain: time.Second}

// agentSetup is what differs between the scenarios that run the agent.
type agentSetup struct {
	version  string      // the bootstrap's x-config-version
	drain    agentConfig // the agent's drain settings (the rest is the run's)
	procName string      // the agent's process (and log) name; "" sets up without starting it
	env      []string    // the agent's environment beyond NOTIFY_SOCKET
	ready    bool        // wait for READY=1 before setupAgent returns
	// listeners is how many HTTP listeners the bootstrap has (0: one), and
	// extraHeader their x-config-version after the first's
	// (envoykit.BootstrapOptions.ExtraResponseHeader).
	listeners   int
	extraHeader string
}

// agentRun is an agent's site: its bootstrap, its configuration, its
// notify socket and, once started, the agent.
type agentRun struct {
	*site
	status  int         // the agent's status port
	drain   agentConfig // the drain settings of agentSetup
	cfgPath string
	ns      *envoykit.NotifySocket
	p       *proc // nil until started
}

// controlSocket is the agent's control socket: control.sock in its run_dir.
func (r *agentRun) controlSocket() string { return filepath.Join(r.dir, "run", "control.sock") }

// setupAgent makes the site name with o.listeners (at least one) and a status port,
// listens on a notify socket in it and, unless o.procName is "", starts the
// agent there (and with o.ready waits for its READY=1). On an error it
// leaves nothing open; otherwise the caller closes the run (close) or at
// least its notify socket.
func (b *bench) setupAgent(ctx context.Context, name string, o agentSetup) (*agentRun, error) {
	s, err := b.newSite(name, o.version, max(o.listeners, 1), 1)
	if err != nil {
		return nil, err
	}
	if o.extraHeader != "" {
		s.boot.ExtraResponseHeader = o.extraHeader
		if err := s.writeBootstrap(); err != nil {
			return nil, err
		}
	}
	r := &agentRun{site: s, status: s.spare[0], drain: o.drain, cfgPath: filepath.Join(s.dir, "agent.toml")}
	if o.procName != "" {
		if err := r.writeConfig(b); err != nil {
			return nil, err
		}
	}
	if r.ns, err = envoykit.ListenNotify(); err != nil {
		return nil, err
	}
	if o.procName == "" {
		return r, nil
	}
	if _, err := b.startAgentRun(r, o.procName, o.env...); err != nil {
		r.ns.Close()
		return nil, err
	}
	if o.ready {
		if err := r.waitReady(ctx); err != nil {
			r.close(ctx)
			return nil, err
		}
	}
	return r, nil
}

// writeConfig writes the agent's configuration, with a base id of its own.
func (r *agentRun) writeConfig(b *bench) error {
	cfg := r.drain
	cfg.EnvoyBin, cfg.BootstrapPath, cfg.AdminPort, cfg.StatusPort = b.envoyBin, r.bootPath, r.admin, r.status
	cfg.BaseID, cfg.RunDir = b.baseID(), filepath.Join(r.dir, "run")
	return cfg.write(r.cfgPath)
}

// startAgentRun starts the agent of r as name, with NOTIFY_SOCKET and env,
// and makes it r.p.
func (b *bench) startAgentRun(r *agentRun, name string, env ...string) (*proc, error) {
	p, err := b.startAgent(name, r.cfgPath, append([]string{"NOTIFY_SOCKET=" + r.ns.Path}, env...)...)
	if err != nil {
		return nil, err
	}
	r.p = p
	return p, nil
}

// waitReady waits for the agent's first READY=1.
func (r *agentRun) waitReady(ctx context.Context) error {
	_, err := waitNotify(ctx, r.ns, r.p, "READY=1", 0, startTimeout)
	return err
}

// waitNotify waits for a datagram from the mark-th on with a line starting
// with kv from p, and returns when it arrived; it fails when p exits first
// or timeout passes.
func waitNotify(ctx context.Context, ns *envoykit.NotifySocket, p *proc, kv string, mark int, timeout time.Duration) (time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	m, err := ns.WaitFrom(ctx, kv, mark, p.Done())
	switch {
	case errors.Is(err, envoykit.ErrAborted):
		return time.Time{}, p.failure(fmt.Errorf("%s exited (%v) before it sent %s", p.name, p.Err(), kv))
	case err != nil:
		return time.Time{}, p.failure(fmt.Errorf("%s: %w", p.name, err))
	}
	return m.At, nil
}

// close quits the agent, if it was started, even when ctx has ended, and
// closes the notify socket.
func (r *agentRun) close(ctx context.Context) {
	if r.p != nil {
		_ = quitAgent(context.WithoutCancel(ctx), r.p, r.controlSocket())
	}
	r.ns.Close()
}

// setupEnvoy makes the site name with that many listeners and starts a
// bare Envoy on it, called procName.
func (b *bench) setupEnvoy(name, procName, version string, listeners int) (*site, *proc, error) {
	s, err := b.newSite(name, version, listeners, 0)
	if err != nil {
		return nil, nil, err
	}
	p, err := b.startEnvoy(procName, s.bootPath)
	if err != nil {
		return nil, nil, err
	}
	return s, p, nil
}

// startLoad starts the run's fixed-rate load (b.o.rate requests per second
// on b.o.workers kept-alive connections, 2 s per request) through the
// listener, for at most limit.
func (b *bench) startLoad(listener int, limit time.Duration) *envoykit.Load {
	return envoykit.StartLoad(envoykit.LoadOptions{URL: localURL(listener, "/"), Rate: b.o.rate,
		Connections: b.o.workers, Duration: limit, Timeout: 2 * time.Second})
}

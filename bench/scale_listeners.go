package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/envoy-agent/envoy-agent/internal/envoykit"
)

// scaleListenersSite is the listeners part's bootstrap: n HTTP listeners
// on 127.0.0.1, listener_K with its own route configuration route_K whose
// answers carry x-config-version headers[K], and the stats flush interval
// (an edit outside the listeners and clusters).
type scaleListenersSite struct {
	*site
	headers []string
	flush   time.Duration
}

// scaleFlush is the stats_flush_interval of the bootstrap; the bootstrap
// edit adds a second.
const scaleFlush = 5 * time.Second

// static renders the bootstrap with its listeners in static_resources (what
// the agent runs); with ldsPath, the listeners go to that LDS file instead
// and the bootstrap reads it (what a bare Envoy updates in place).
func (s *scaleListenersSite) render(upstream int, ldsPath string) (boot, lds []byte) {
	var l strings.Builder
	for k, port := range s.listeners {
		indent := "  "
		if ldsPath != "" {
			indent = ""
			l.WriteString(`- "@type": type.googleapis.com/envoy.config.listener.v3.Listener` + "\n  name: ")
		} else {
			l.WriteString("  - name: ")
		}
		fmt.Fprintf(&l, `listener_%d
%[2]s  address: {socket_address: {address: 127.0.0.1, port_value: %[3]d}}
%[2]s  filter_chains:
%[2]s  - filters:
%[2]s    - name: envoy.filters.network.http_connection_manager
%[2]s      typed_config:
%[2]s        "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
%[2]s        stat_prefix: listener_%[1]d
%[2]s        route_config:
%[2]s          name: route_%[1]d
%[2]s          virtual_hosts:
%[2]s          - name: all
%[2]s            domains: ["*"]
%[2]s            response_headers_to_add: [{header: {key: x-config-version, value: %[4]q}}]
%[2]s            routes: [{match: {prefix: "/"}, route: {cluster: upstream, timeout: 0s}}]
%[2]s        http_filters:
%[2]s        - name: envoy.filters.http.router
%[2]s          typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}
`, k, indent, port, s.headers[k])
	}
	head := fmt.Sprintf("node: {id: bench-scale, cluster: bench-scale}\nadmin: {address: {socket_address: {address: 127.0.0.1, port_value: %d}}}\nstats_flush_interval: %s\n", s.admin, s.flush)
	clusters := fmt.Sprintf(`  clusters:
  - name: upstream
    type: STATIC
    connect_timeout: 1s
    load_assignment:
      cluster_name: upstream
      endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: %d}}}}]}]
`, upstream)
	if ldsPath == "" {
		return []byte(head + "static_resources:\n  listeners:\n" + l.String() + clusters), nil
	}
	return []byte(head + fmt.Sprintf("dynamic_resources:\n  lds_config: {path_config_source: {path: %q}}\nstatic_resources:\n", ldsPath) + clusters),
		[]byte("resources:\n" + l.String())
}

// newScaleListenersSite makes the site: n listeners, every route v0.
func (b *bench) newScaleListenersSite(name string, n int) (*scaleListenersSite, error) {
	dir, err := b.dir(name)
	if err != nil {
		return nil, err
	}
	ports, err := envoykit.FreePorts(1 + n + 1)
	if err != nil {
		return nil, err
	}
	s := &scaleListenersSite{site: &site{dir: dir, admin: ports[0], listeners: ports[1 : 1+n], spare: ports[1+n:], bootPath: filepath.Join(dir, "envoy.yaml")},
		headers: make([]string, n), flush: scaleFlush}
	for i := range s.headers {
		s.headers[i] = "v0"
	}
	return s, nil
}

// writeStatic writes the agent's bootstrap.
func (s *scaleListenersSite) writeStatic(upstream int) error {
	boot, _ := s.render(upstream, "")
	return envoykit.WriteFileAtomic(s.bootPath, boot)
}

// writeLDS writes the bare Envoy's bootstrap and its LDS file (the LDS
// file alone when only is set: an edit).
func (s *scaleListenersSite) writeLDS(upstream int, only bool) error {
	lds := filepath.Join(s.dir, "lds.yaml")
	boot, listeners := s.render(upstream, lds)
	if err := envoykit.WriteFileAtomic(lds, listeners); err != nil || only {
		return err
	}
	return envoykit.WriteFileAtomic(s.bootPath, boot)
}

// scaleEdits are the listeners edited: the first, a middle and the last.
func scaleEdits(n int) []ListenerEdit {
	return []ListenerEdit{{Label: "first", Index: 0}, {Label: "middle", Index: n / 2}, {Label: "last", Index: n - 1}}
}

// scaleListeners is the listeners part: the agent on n listeners reloads a
// route edit of the first, a middle and the last listener, and an edit
// outside the listeners (a hot restart); a bare Envoy reads the same
// listeners from an LDS file and takes the same route edits from it.
func (b *bench) scaleListeners(ctx context.Context, n int) (ScaleListeners, error) {
	r := ScaleListeners{N: n, Edits: scaleEdits(n)}
	errA := b.scaleListenersAgent(ctx, &r)
	if errA != nil {
		r.AgentFailure = errA.Error()
	}
	errB := b.scaleListenersBare(ctx, &r)
	if errB != nil {
		r.BareFailure = errB.Error()
	}
	return r, errors.Join(errA, errB)
}

func (b *bench) scaleListenersAgent(ctx context.Context, r *ScaleListeners) error {
	s, err := b.newScaleListenersSite("scale-listeners-agent", r.N)
	if err != nil {
		return err
	}
	if err := s.writeStatic(b.up.Port); err != nil {
		return err
	}
	drain := quickDrain
	drain.LogLevel, drain.ReloadMethod = "info", "auto"
	run, err := b.scaleAgent(s.site, drain)
	if err != nil {
		return err
	}
	defer run.close(ctx)
	var failures []string
	for attempt := 1; ; attempt++ {
		mark, logMark := run.ns.Mark(), fileSize(b.logPath("scale-listeners-agent"))
		p, err := b.startAgentRun(run, "scale-listeners-agent")
		if err != nil {
			return err
		}
		at, err := waitNotify(ctx, run.ns, p, "READY=1", mark, startTimeout)
		if err == nil {
			r.AgentStartMs = ms(at.Sub(p.Started()))
			break
		}
		err = whyExited(p, logMark, err)
		_ = quitAgent(context.WithoutCancel(ctx), p, run.controlSocket())
		failures = append(failures, fmt.Sprintf("start %d: %v", attempt, err))
		// A start that failed is a result; the edits still need an agent
		// that started, so it is tried again, at most scaleStartAttempts times.
		if attempt == scaleStartAttempts || ctx.Err() != nil {
			return fmt.Errorf("%d of %d starts failed; the first: %s", len(failures), attempt, failures[0])
		}
	}
	if len(failures) > 0 {
		r.AgentFailure = fmt.Sprintf("%d start(s) failed before one worked; the first: %s", len(failures), failures[0])
	}
	for i := range r.Edits {
		e := &r.Edits[i]
		s.headers[e.Index] = fmt.Sprintf("e%d", i+1)
		e.Agent = b.agentEdit(ctx, run, s.listeners[e.Index], s.headers[e.Index], func() error { return s.writeStatic(b.up.Port) })
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	// An edit outside the listeners and clusters: a hot restart.
	s.flush += time.Second
	r.BootstrapEdit = b.agentEdit(ctx, run, s.listeners[0], s.headers[0], func() error { return s.writeStatic(b.up.Port) })
	return nil
}

// scaleAgent makes the agent's run on the site s, its notify socket open;
// the caller starts it and closes it.
func (b *bench) scaleAgent(s *site, drain agentConfig) (*agentRun, error) {
	run := &agentRun{site: s, status: s.spare[0], drain: drain, cfgPath: filepath.Join(s.dir, "agent.toml")}
	if err := run.writeConfig(b); err != nil {
		return nil, err
	}
	var err error
	if run.ns, err = envoykit.ListenNotify(); err != nil {
		return nil, err
	}
	return run, nil
}

// scaleStartAttempts is how many times the agent is started on the
// listeners before that part gives up.
const scaleStartAttempts = 3

// scaleEditWorkers is the load on the edited listener: raw HTTP/1.1
// workers on kept-alive connections that do not retry.
const scaleEditWorkers = 2

// editLoad starts the load on a listener.
func editLoad(listener int) *envoykit.Load {
	return envoykit.StartLoad(envoykit.LoadOptions{URL: localURL(listener, "/"), Client: envoykit.RawHTTP1,
		Workers: []envoykit.Workers{{N: scaleEditWorkers, Path: "/"}}, Duration: changeLimit + reloadGap + reloadTail, Timeout: 2 * time.Second})
}

// agentEdit writes the edit (write), reloads the agent under the load on
// the listener, and tells whether the listener answers want at once.
func (b *bench) agentEdit(ctx context.Context, run *agentRun, listener int, want string, write func() error) EditSide {
	var e EditSide
	pid := servingPid(run.p.pid())
	l := editLoad(listener)
	sleep(ctx, reloadWarmup)
	if err := write(); err != nil {
		l.Stop()
		e.Error = err.Error()
		return e
	}
	mark := fileSize(run.p.logPath)
	t := time.Now()
	answer, err := b.agentReload(ctx, run)
	e.Ms = ms(time.Since(t))
	if _, got, gerr := getVersion(ctx, listener); gerr == nil && got == want {
		e.ServedAtReturn = true
	}
	sleep(ctx, reloadTail)
	e.Load = loadStats(l.Stop())
	if err != nil {
		e.Error = err.Error()
		return e
	}
	e.Done = true
	e.SamePid = pid > 0 && servingPid(run.p.pid()) == pid
	e.Path = reloadPath(answer)
	e.Steps = reloadStepsSince(run.p.logPath, mark)
	b.logf("scale: agent reload of listener %d: %.1f ms, %s, same pid %v, %d/%d failed", listener, e.Ms, e.Path, e.SamePid, e.Load.Failed, e.Load.Sent)
	sleep(ctx, reloadGap) // a hot restart's old epoch exits first
	return e
}

// reloadPath is the path an `envoy-agent reload` answer names.
func reloadPath(answer string) string {
	switch {
	case strings.Contains(answer, "reloaded in place"):
		return "in place"
	case strings.Contains(answer, "hot restart: "):
		return "hot restart: " + oneLine(answer[strings.Index(answer, "hot restart: ")+len("hot restart: "):])
	}
	return oneLine(answer)
}

// servingPid is the agent's serving Envoy (its child with --restart-epoch
// of the highest pid: the newest), 0 for none.
func servingPid(agentPid int) int {
	best := 0
	for _, pid := range servingEnvoys(agentPid) {
		best = max(best, pid)
	}
	return best
}

func (b *bench) scaleListenersBare(ctx context.Context, r *ScaleListeners) error {
	s, err := b.newScaleListenersSite("scale-listeners-bare", r.N)
	if err != nil {
		return err
	}
	if err := s.writeLDS(b.up.Port, false); err != nil {
		return err
	}
	p, err := b.startEnvoy("scale-listeners-bare", s.bootPath)
	if err != nil {
		return err
	}
	defer func() { _ = p.stop(context.WithoutCancel(ctx), 10*time.Second) }()
	at, err := pollReady(ctx, p, s.admin, 5*time.Millisecond, startTimeout)
	if err != nil {
		return err
	}
	r.BareStartMs = ms(at.Sub(p.Started()))
	for i := range r.Edits {
		e := &r.Edits[i]
		listener := s.listeners[e.Index]
		s.headers[e.Index] = fmt.Sprintf("e%d", i+1)
		var side EditSide
		l := editLoad(listener)
		sleep(ctx, reloadWarmup)
		t := time.Now()
		if err := s.writeLDS(b.up.Port, true); err != nil {
			l.Stop()
			return err
		}
		err := waitVersion(ctx, listener, s.headers[e.Index], changeLimit)
		side.Ms = ms(time.Since(t))
		sleep(ctx, reloadTail)
		side.Load = loadStats(l.Stop())
		side.Path, side.SamePid = "in place (Envoy's own LDS update)", p.Running()
		if err != nil {
			side.Error = err.Error()
		} else {
			side.Done = true
		}
		e.Bare = side
		b.logf("scale: bare Envoy's LDS update of listener %d: %.1f ms, %d/%d failed", listener, side.Ms, side.Load.Failed, side.Load.Sent)
	}
	return nil
}

// waitVersion asks the listener (a new connection each time, 1 ms apart)
// until it answers want, at most limit.
func waitVersion(ctx context.Context, listener int, want string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		code, got, err := getVersion(ctx, listener)
		if err == nil && code == http.StatusOK && got == want {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("listener %d answers %d %q (%v) after %s, want %s", listener, code, got, err, limit, want)
		}
		sleep(ctx, time.Millisecond)
	}
}

// fileSize is a file's size now (0 when it cannot be read): a mark in a
// log.
func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

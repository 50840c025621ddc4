//go:build linux

// Start-up: take the claims and bind the agent's own sockets (open), wait
// for Envoy to be LIVE (READY=1), learn its hot-restart version; or report
// why it never was.

package service

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/user"
	"regexp"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/envoy-agent/envoy-agent/envoy"
	"github.com/envoy-agent/envoy-agent/envoy/certs"
	"github.com/envoy-agent/envoy-agent/internal/hostfiles"
	"github.com/envoy-agent/envoy-agent/service/claims"
	"github.com/envoy-agent/envoy-agent/service/config"
	"github.com/envoy-agent/envoy-agent/service/control"
	"github.com/envoy-agent/envoy-agent/service/systemd"
	"github.com/sirupsen/logrus"
)

// StartError is an Envoy that did not come up: it exited, or it was not LIVE
// within start_timeout.
type StartError struct {
	Reason    string
	LastLines []string
	Hints     []string // per line of LastLines: what to change in the configuration, or ""
}

func (e *StartError) Error() string {
	if len(e.LastLines) == 0 {
		return e.Reason
	}
	return e.Reason + "; Envoy's last log lines:\n  " + withHints(e.LastLines, e.Hints)
}

// readyPoll is how the agent polls Envoy's /ready while it starts: every
// readyPollMin for readyPollBrisk (most Envoys are LIVE by then), then
// easing to readyPollMax. READY=1 comes on average half a poll after LIVE,
// and a bare Envoy is LIVE about 50 ms after its exec: 2 ms keeps that
// within the 5 % the start is held to (make bench: READY against a bare
// Envoy's LIVE), for one admin GET per poll on a kept connection.
const (
	readyPollMin   = 2 * time.Millisecond
	readyPollMax   = 50 * time.Millisecond
	readyPollBrisk = 3 * time.Second
)

// bindPorts binds the status server's listener and the metrics one.
func bindPorts(cfg *config.Config) (statusLn, promLn net.Listener, err error) {
	a := cfg.Agent
	statusLn, err = claims.Listen(cfg, "agent.status_port", a.Localhost, a.StatusPort)
	if err != nil {
		return nil, nil, err
	}
	if a.PrometheusPort != 0 {
		promLn, err = claims.Listen(cfg, "agent.prometheus_port", a.PrometheusAddress, a.PrometheusPort)
		if err != nil {
			statusLn.Close()
			return nil, nil, err
		}
	}
	return statusLn, promLn, nil
}

// agentSockets are the agent's own listeners: the status port, the metrics
// port (nil when off) and the control socket with its server.
type agentSockets struct {
	statusLn, promLn net.Listener
	ctl              *control.Server
	controlLn        *net.UnixListener
	err              error
}

// opened is what a run holds from its start to its end: its claims and its
// own sockets (open). A live upgrade hands them over.
type opened struct {
	agentSockets
	held *claims.Held
}

// open takes the claims and binds the agent's own sockets before Envoy
// starts, so that a clash or a taken port fails the start with nothing to
// clean up. They do not depend on each other, so they are taken side by
// side and a start waits for the slower, not for both. A claim's error
// comes first: it names the other instance. An agent that adopts a running
// Envoy (a live upgrade) holds its base id, its ports and its listeners
// already.
func (s *supervisor) open(ctx context.Context) (*opened, error) {
	cfg := s.config()
	sockets := make(chan agentSockets, 1)
	go func() { sockets <- s.openSockets(ctx, cfg, s.handover != nil) }()
	held, err := claims.Take(cfg, claims.Self{Config: absPath(cfg.File), Instance: os.Getenv(EnvInstance)}, s.log, s.handover.ClaimFiles())
	own := <-sockets
	if err == nil {
		if err = own.err; err == nil {
			err = s.serveXDS(cfg) // the claims held: no other agent's socket is replaced
		}
		if err != nil {
			held.Close()
		}
	}
	if err != nil {
		own.close()
		return nil, err
	}
	return &opened{agentSockets: own, held: held}, nil
}

// serveXDS makes the ADS server's socket in the run folder, or takes over
// the one a live upgrade handed over, and serves it (the adopted epochs
// are set by then: open runs after newSupervisor).
func (s *supervisor) serveXDS(cfg *config.Config) error {
	if s.handover.HasXDS() {
		ln, err := s.handover.AdoptXDS()
		if err == nil {
			err = s.xds.Serve(ln)
		}
		return err
	}
	if err := os.MkdirAll(cfg.RunDir(), 0o750); err != nil {
		return config.Problemf(cfg, "agent.run_dir", "%v", err)
	}
	if err := hostfiles.CheckRunDir(cfg.RunDir()); err != nil {
		return config.Problemf(cfg, "agent.run_dir", "%v", err)
	}
	return s.xds.Listen()
}

// close lets go of the claims and closes the control socket (its file goes
// with the agent's exit); the servers close the ports.
func (o *opened) close() {
	o.controlLn.Close()
	o.held.Close()
}

// close closes whichever of the sockets were bound.
func (o agentSockets) close() {
	for _, ln := range []net.Listener{o.statusLn, o.promLn} {
		if ln != nil {
			ln.Close()
		}
	}
	if o.controlLn != nil {
		o.controlLn.Close()
	}
}

// openSockets binds the agent's own sockets (an adopting agent takes over the
// listeners handed to it) and, on a fresh start, checks that nothing answers
// on Envoy's admin port yet. On an error it closes what it had bound.
func (s *supervisor) openSockets(ctx context.Context, cfg *config.Config, adopting bool) (o agentSockets) {
	defer func() {
		if o.err != nil {
			o.close()
			o = agentSockets{err: o.err}
		}
	}()
	if o.statusLn, o.promLn, o.err = s.openPorts(cfg); o.err != nil {
		return o
	}
	if !adopting {
		if o.err = claims.CheckAdminPortFree(ctx, cfg); o.err != nil {
			return o
		}
	}
	o.ctl, o.controlLn, o.err = s.newControl()
	return o
}

// waitLive polls Envoy's /ready until it answers 200 LIVE, then sends
// READY=1 and returns true. Otherwise Envoy is gone when it returns: it
// exited or was not LIVE in time (an error), or a stop came first (nil).
func (s *supervisor) waitLive(ctx context.Context, started time.Time, runErr <-chan error, stopEnvoy context.CancelFunc, certsRead *certs.Loading) (live bool, err error) {
	// The certificates' read, when Envoy's start overlaps it: a pair that
	// is not whole fails the start, as it did when it was read first.
	defer s.certs.Disarm(certsRead)
	var certsDone <-chan struct{}
	if certsRead != nil {
		certsDone = certsRead.Done()
	}
	// stop stops the Envoy of a start that fails before it is LIVE: there
	// is nothing to drain.
	stop := func() {
		s.runner.DisableDraining()
		stopEnvoy()
		<-runErr
	}
	startTimeout := s.config().Agent.StartTimeout.D()
	deadline := time.NewTimer(startTimeout)
	defer deadline.Stop()
	// A start_timeout beyond the unit's TimeoutStartSec must not be cut short.
	s.notify.ExtendTimeout(startTimeout + startExtendMargin)
	poll := readyPollMin
	timer := time.NewTimer(0)
	defer timer.Stop()
	state := "not started"
	for {
		select {
		case err := <-runErr:
			var ee *envoy.ExitError
			if errors.As(err, &ee) {
				return false, &StartError{Reason: fmt.Sprintf("envoy exited before it was LIVE: %v", ee.Err), LastLines: ee.LastLines,
					Hints: startHints(s.config(), ee.LastLines)}
			}
			if err == nil {
				err = errors.New("envoy exited before it was LIVE")
			}
			return false, err
		case <-deadline.C:
			s.log.WithFields(logrus.Fields{"event": "start_timeout", "pid": s.proxy.Pid(), "state": state, "start_timeout_ms": startTimeout.Milliseconds()}).
				Errorf("envoy was not LIVE within start_timeout %s (state %s); stopping it", startTimeout, state)
			lines := s.proxy.LastLines()
			stop()
			return false, &StartError{Reason: fmt.Sprintf("envoy was not LIVE within start_timeout %s (its state: %s)", startTimeout, state), LastLines: lines}
		case <-ctx.Done():
			return false, s.abortStart(systemd.StopReason(ctx), runErr, stopEnvoy)
		case sig := <-s.sigs.Reload:
			s.log.Warnf("%s during start-up: ignored", sig)
		case sig := <-s.sigs.Reopen:
			s.log.Warnf("%s during start-up: ignored", sig)
		case <-certsDone:
			certsDone = nil
			if err := certsRead.Err(); err != nil {
				stop()
				return false, fmt.Errorf("envoy bootstrap %s: %w", s.config().Envoy.ConfigPath, err)
			}
		case <-timer.C:
		}
		pollCtx, cancel := context.WithTimeout(context.Background(), readyProbeTimeout)
		r, err := s.admin.Ready(pollCtx)
		cancel()
		if err == nil {
			if r.Live && certsDone != nil && certsRead.Started() {
				continue // LIVE before every certificate was read: the read's end polls again
			}
			if r.Live {
				if err := s.checkResources(started.Add(startTimeout)); err != nil {
					lines := s.proxy.LastLines()
					stop()
					return false, &StartError{Reason: err.Error(), LastLines: lines}
				}
				took := time.Since(started)
				s.metrics.startSeconds.Set(took.Seconds())
				s.goLive()
				s.notify.Ready(s.liveStatus() + s.adoptedNote())
				s.log.WithFields(logrus.Fields{"event": "live", "pid": s.proxy.Pid(), "epoch": s.proxy.Epoch(), "took_ms": took.Milliseconds()}).
					Infof("envoy is LIVE after %s", took.Round(time.Millisecond))
				s.learnVersion()
				return true, nil
			}
			if r.State != state {
				state = r.State
				s.notify.Status(fmt.Sprintf("waiting for Envoy (pid %d) to be LIVE: %s", s.proxy.Pid(), state))
			}
		}
		timer.Reset(poll)
		if time.Since(started) > readyPollBrisk {
			poll = min(poll*5/4+time.Millisecond, readyPollMax)
		}
	}
}

// startGC has Go's collector run a quarter as often until the start
// ends (the returned func puts it back): a start builds and drops the
// bootstrap's trees several times over (a start of 1,000 certificates ran
// 13 collections, 60 ms of the agent's processor, before Envoy was LIVE).
// An operator's GOGC above that, or off, is left as it is.
func startGC() (restore func()) {
	const startGCPercent = 400
	old := debug.SetGCPercent(startGCPercent)
	if old < 0 || old > startGCPercent {
		debug.SetGCPercent(old)
	}
	return func() { debug.SetGCPercent(old) }
}

// checkResources fails a start whose Envoy, LIVE, left out a listener or
// cluster of its resource files (reload_method "auto"), or a route
// configuration or secret the agent serves it: a static bootstrap with
// that listener or route would not have started at all. It has until
// deadline, the start's own (start_timeout): at 1,000 listeners on a busy
// machine, Envoy's admin took longer than serverInfoTimeout to answer, and
// a start that would have served failed.
func (s *supervisor) checkResources(deadline time.Time) error {
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	if err := s.proxy.ResourcesAccepted(ctx); err != nil {
		return fmt.Errorf("envoy is LIVE without all of its listeners, clusters, routes and secrets: %w", err)
	}
	return nil
}

// learnVersion records the serving Envoy's hot-restart version, which a
// reload's binary must match, and says so when it finds hot restart
// compiled out of an Envoy that was not known to be so built.
func (s *supervisor) learnVersion() {
	ctx, cancel := context.WithTimeout(context.Background(), serverInfoTimeout)
	defer cancel()
	wasOff := s.hotRestartOff()
	defer func() {
		if !wasOff && s.hotRestartOff() {
			s.noteHotRestartOff(s.config().Envoy.BinaryPath)
		}
	}()
	si, err := s.admin.ServerInfo(ctx)
	if err == nil && si.HotRestartVersion != "" {
		s.setHotRestartVersion(si.HotRestartVersion)
		s.log.Infof("envoy %s, hot-restart version %s", si.Version, si.HotRestartVersion)
		return
	}
	v, verr := s.envoys.HotRestartVersion(ctx, s.config().Envoy.BinaryPath)
	if verr != nil {
		s.log.Warnf("cannot learn Envoy's hot-restart version (%v; %v): reloads will be refused", err, verr)
		return
	}
	s.setHotRestartVersion(v)
}

// abortStart stops an Envoy that is not LIVE yet: there is nothing to drain.
func (s *supervisor) abortStart(why string, runErr <-chan error, stopEnvoy context.CancelFunc) error {
	s.log.Infof("%s before Envoy was LIVE: stopping it without a drain", why)
	s.notify.Stopping("stopping before Envoy was LIVE")
	s.runner.DisableDraining()
	stopEnvoy()
	if err := <-runErr; err != nil {
		var ee *envoy.ExitError
		if errors.As(err, &ee) {
			return &StartError{Reason: fmt.Sprintf("envoy exited before it was LIVE: %v", ee.Err), LastLines: ee.LastLines}
		}
		return err
	}
	return nil
}

// Envoy's own messages for start failures an operator fixes in the files,
// as Envoy 1.40 prints them (provoked with the real Envoy: a second Envoy
// with the same --base-id, a taken admin or listener port with
// enable_reuse_port false, a missing or unreadable file named in the
// bootstrap). Compiled at the first failed start, not at every start.
var (
	baseIDClashRE = lazyRegexp(`unable to bind domain socket with base_id=(\d+), id=\d+, errno=98`)
	portInUseRE   = lazyRegexp(`cannot bind '([^']+)': Address already in use`)
	listenerRE    = lazyRegexp(`listener '([^']+)' failed to bind`)
	shmExistsRE   = lazyRegexp(`cannot open shared memory region /envoy_shared_memory_(\d+) .*File exists`)
	unreadableRE  = lazyRegexp("(?:unable to read file: |Invalid path: |unable to open file ')([^'`\\s]+)")
)

// lazyRegexp is a regular expression compiled at its first use.
func lazyRegexp(expr string) func() *regexp.Regexp {
	return sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(expr) })
}

// startHints returns, for each of Envoy's last lines, a sentence saying what
// to change in the configuration, or "" when the line needs none. A hint is
// given once, beside the last line that calls for it (Envoy repeats its
// error at the end).
func startHints(cfg *config.Config, lines []string) []string {
	hints := make([]string, len(lines))
	seen := map[string]bool{}
	listener := ""
	for _, l := range lines {
		if m := listenerRE().FindStringSubmatch(l); m != nil {
			listener = m[1]
		}
	}
	for i := len(lines) - 1; i >= 0; i-- {
		h := startHint(cfg, lines[i], listener)
		if h == "" || seen[h] {
			continue
		}
		seen[h] = true
		hints[i] = h
	}
	return hints
}

func startHint(cfg *config.Config, line, listener string) string {
	if m := baseIDClashRE().FindStringSubmatch(line); m != nil {
		id, _ := strconv.ParseUint(m[1], 10, 32)
		who := "another Envoy on this host"
		if holder, held := claims.AgentOnBaseID(uint32(id)); held {
			who = "the Envoy of " + holder
		}
		return fmt.Sprintf("base_id %d is used by %s: set envoy.base_id in %s to a base_id of its own (%d is free)", id, who, cfg.File, claims.FreeBaseID(uint32(id)))
	}
	if m := shmExistsRE().FindStringSubmatch(line); m != nil {
		n, _ := strconv.ParseUint(m[1], 10, 32)
		id := uint32(n / hostfiles.BaseIDScale)
		owner := hostfiles.SharedMemoryOwner(id)
		if owner == "" {
			owner = hostfiles.SharedMemoryPath(id) + " existed"
		}
		return fmt.Sprintf("%s: Envoy's hot-restart shared memory for base_id %d was made by another process before this Envoy started; remove it (as root) or set envoy.base_id in %s to another value (%d is free)", owner, id, cfg.File, claims.FreeBaseID(id))
	}
	if m := portInUseRE().FindStringSubmatch(line); m != nil {
		who := "another process"
		_, portText, _ := net.SplitHostPort(m[1])
		port, err := strconv.ParseUint(portText, 10, 16)
		if err == nil {
			if holder, ok := claims.AgentOnPort(config.Port(port)); ok {
				who = holder
			}
		}
		if err == nil && config.Port(port) == cfg.Envoy.AdminPort {
			return fmt.Sprintf("Envoy's admin address %s is in use by %s: change envoy.admin_port in %s and the admin address in %s to a free port", m[1], who, cfg.File, cfg.Envoy.ConfigPath)
		}
		what := "a listener"
		if listener != "" {
			what = fmt.Sprintf("listener %q", listener)
		}
		return fmt.Sprintf("%s %s is in use by %s: change that listener's port in %s (envoy.config_path), or stop the other process", m[1], what, who, cfg.Envoy.ConfigPath)
	}
	if m := unreadableRE().FindStringSubmatch(line); m != nil {
		return fmt.Sprintf("Envoy (running as %s) cannot open %s, named in %s (envoy.config_path): fix the path there, or make the file readable (writable, for a log) by that user; under the unit only /run/envoy-agent* is writable (add LogsDirectory= for logs)", currentUser(), m[1], cfg.Envoy.ConfigPath)
	}
	return ""
}

func currentUser() string {
	if u, err := user.Current(); err == nil {
		return "user " + u.Username
	}
	return "this user"
}

// withHints writes Envoy's lines with each hint on the line after the one
// it explains.
func withHints(lines, hints []string) string {
	var b strings.Builder
	for i, l := range lines {
		if i > 0 {
			b.WriteString("\n  ")
		}
		b.WriteString(l)
		if i < len(hints) && hints[i] != "" {
			b.WriteString("\n  -> " + hints[i])
		}
	}
	return b.String()
}

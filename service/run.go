package service

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/envoy-agent/envoy-agent/envoy"
	"github.com/envoy-agent/envoy-agent/internal/childenv"
)

// Options are what `envoy-agent run` takes from its command line.
type Options struct {
	ConfigPath string
	Version    string
	// Stderr receives the agent's log and Envoy's; nil means os.Stderr.
	Stderr io.Writer
}

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
// easing to readyPollMax.
const (
	readyPollMin   = 5 * time.Millisecond
	readyPollMax   = 50 * time.Millisecond
	readyPollBrisk = 3 * time.Second
)

// Run is `envoy-agent run`: it starts Envoy, tells systemd when Envoy is LIVE,
// feeds the watchdog, and on SIGTERM drains Envoy and returns nil. It
// returns a *ConfigError for a bad configuration (before Envoy starts), a
// *StartError when Envoy never became LIVE, or Envoy's *envoy.ExitError
// when Envoy exited by itself.
func Run(ctx context.Context, opts Options) error {
	stderr := opts.Stderr
	if stderr == nil {
		stderr = os.Stderr
	}
	// Signals first: a SIGHUP or SIGTERM during start-up must not kill the
	// agent with the default action and leave nothing drained.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGUSR1)
	defer signal.Stop(sigs)
	ignoreSIGPIPE()
	stderr = bestEffortWriter{stderr}

	// An agent that re-executed into this one (a live upgrade) handed over
	// its Envoys and the settings they run with: the file may have been
	// edited since, and is only read at the next reload.
	handover, err := takeHandover()
	if err != nil {
		fmt.Fprintf(stderr, "envoy-agent: upgrade: cannot adopt the running Envoy: %v\n", err)
		return err
	}
	cfg := handover.config()
	if cfg == nil {
		if cfg, err = LoadConfig(opts.ConfigPath); err != nil {
			return err
		}
	}
	log := newLogger(stderr, cfg.Agent.LogLevel, cfg.Agent.LogFormat)
	s := &supervisor{cfg: cfg, log: log, notify: newNotifier(log), metrics: newMetrics(), sigs: sigs, handover: handover, version: opts.Version}
	s.selfPath, _ = os.Executable()
	return s.run(ctx, opts.Version, stderr)
}

// supervisor is one `envoy-agent run`.
type supervisor struct {
	cfg     *Config
	log     *logrus.Logger
	notify  *notifier
	metrics *metrics
	sigs    chan os.Signal

	proxy    *envoy.Envoy
	agent    *envoy.Agent
	reloader *reloader
	stderr   io.Writer

	lastExtend time.Duration // drain time of the last EXTEND_TIMEOUT_USEC; the drain's goroutine only
	report     statusRecord  // what GET /status reports of past events

	// Live upgrades (handover.go, upgrade.go).
	handover         *handoverState // what the agent before the exec handed over, nil on a fresh start
	version          string
	selfPath         string // the agent's binary, re-executed on an upgrade
	statusLn, promLn net.Listener
	up               upgradeState

	mu        sync.Mutex
	live      bool
	reloading bool
	hrVersion string // the serving Envoy's hot-restart version

	installed installedEnvoy // is the Envoy at binary_path the running one? (installedenvoy.go)
}

func (s *supervisor) config() *Config {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cfg
}

func (s *supervisor) setConfig(c *Config) {
	s.mu.Lock()
	s.cfg = c
	s.mu.Unlock()
}

func (s *supervisor) setReloading(v bool) {
	s.mu.Lock()
	s.reloading = v
	s.mu.Unlock()
}

func (s *supervisor) isReloading() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reloading
}

func (s *supervisor) hotRestartVersion() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hrVersion
}

func (s *supervisor) setHotRestartVersion(v string) {
	s.mu.Lock()
	s.hrVersion = v
	s.mu.Unlock()
}

// proxyConfig is cfg's ProxyConfig with the agent's logger and output.
func (s *supervisor) proxyConfig(cfg *Config) envoy.ProxyConfig {
	pc := cfg.ProxyConfig()
	pc.Logger = s.log
	pc.Stderr = envoyOutputFor(s.stderr)
	pc.Stdout = envoyOutputFor(s.stderr)
	// Envoy must not answer on systemd's notify socket or take its sockets.
	pc.Env = childenv.Clean(os.Environ())
	return pc
}

// applyLogSettings takes the agent's log level and format from cfg.
func (s *supervisor) applyLogSettings(cfg *Config) {
	fresh := newLogger(s.stderr, cfg.Agent.LogLevel, cfg.Agent.LogFormat)
	s.log.SetLevel(fresh.GetLevel())
	s.log.SetFormatter(fresh.Formatter)
}

func (s *supervisor) run(ctx context.Context, version string, stderr io.Writer) (err error) {
	cfg, log := s.config(), s.log
	s.stderr = stderr
	s.report.agentStarted(version)
	if s.proxy, err = s.newProxy(cfg); err != nil {
		log.Errorf("upgrade: cannot adopt the running Envoy: %v", err)
		return err
	}
	s.reloader = newReloader(s.reload)
	s.reloader.wait = s.waitForDrainingEpochs
	a := cfg.Agent
	s.agent = envoy.NewAgent(s.proxy, a.TerminationDrainDuration.D(), a.MinDrainDuration.D(), a.Localhost,
		int(cfg.Envoy.AdminPort), int(a.StatusPort), int(a.PrometheusPort), a.ExitOnZeroActiveConnections)
	s.agent.SetLogger(log)
	s.agent.OnDrainProgress(s.drainProgress)

	// Bind our own ports before Envoy starts, so that a taken port fails
	// the start with nothing to clean up.
	serveCtx, stopServing := context.WithCancel(context.Background())
	defer stopServing()
	// An agent that adopts a running Envoy (a live upgrade) holds its base
	// id, its ports and its listeners already.
	adopting := s.handover != nil
	held, err := claimResources(cfg, log, adopting)
	if err != nil {
		return err
	}
	defer held.Close()
	statusLn, promLn, err := s.listen(cfg)
	if err != nil {
		return err
	}
	s.statusLn, s.promLn = statusLn, promLn
	closeListeners := func() {
		statusLn.Close()
		if promLn != nil {
			promLn.Close()
		}
	}
	if !adopting {
		if err := checkAdminPortFree(ctx, cfg); err != nil {
			closeListeners()
			return err
		}
	}
	control, controlLn, err := s.newControl()
	if err != nil {
		closeListeners()
		return err
	}
	// Closed here, not only by the server's shutdown: the socket file goes
	// with the agent's exit.
	defer controlLn.Close()

	agentCtx, stopAgent := context.WithCancel(context.Background())
	defer stopAgent()
	control.quit = func() { s.agent.DisableDraining(); stopAgent() }
	control.report = s.handleStatus
	control.reopen = s.reopenLogs
	control.upgrade = s.upgradeHandler()
	status := &statusServer{log: log, ready: s.ready}
	go serveHTTP(serveCtx, statusLn, status.handler(), serverLimits{maxConns: statusMaxConns, write: statusWriteTimeout}, log)
	go serveHTTP(serveCtx, controlLn, control.handler(), serverLimits{maxConns: controlMaxConns, context: withPeerCred}, log)
	if promLn != nil {
		go serveHTTP(serveCtx, promLn, s.metrics.mergedHandler(s.proxy.Admin(), log), serverLimits{maxConns: metricsMaxConns, write: metricsWriteTimeout}, log)
	}

	log.Infof("envoy-agent %s starting envoy %s with %s (admin %s, status %s, control %s)", version, cfg.Envoy.BinaryPath,
		cfg.Envoy.ConfigPath, cfg.adminAddress(), statusLn.Addr(), controlLn.Addr())
	s.notify.Status("starting Envoy")
	started := time.Now()
	runErr := make(chan error, 1)
	go func() { runErr <- s.agent.Run(agentCtx) }()

	// The watchdog runs from the start: systemd arms it when it forks us,
	// not at READY. Until Envoy is LIVE the agent vouches for itself (the
	// start timeout bounds that); after, only Envoy's admin answers count.
	wd, err := watchdogInterval()
	if err != nil {
		log.Errorf("%v: no watchdog pings will be sent, so systemd will restart the unit when WatchdogSec= passes", err)
	}
	if wd > 0 {
		log.Infof("watchdog on: pinging every %s while Envoy's admin API answers", wd/2)
		go runWatchdog(serveCtx, wd, s.watchdogAlive, s.notify.Watchdog)
	}

	if live, err := s.waitLive(ctx, started, runErr, stopAgent); !live {
		return err
	}
	go s.watchInstalledEnvoy(serveCtx)
	done := ctx.Done()
	for {
		select {
		case err := <-runErr:
			return s.finish(err)
		case <-done:
			done = nil
			s.stop("stopping: the agent's context ended", stopAgent)
		case sig := <-s.sigs:
			switch sig {
			case syscall.SIGHUP:
				log.Infof("SIGHUP: reloading")
				go s.requestReload(context.Background())
			case syscall.SIGUSR1:
				log.Infof("SIGUSR1: reopening envoy's log files")
				go s.reopenLogs(context.Background())
			default:
				if agentCtx.Err() != nil {
					log.Infof("%s again: ending the drain now", sig)
					s.agent.DisableDraining()
					continue
				}
				s.stop(fmt.Sprintf("%s: draining Envoy", sig), stopAgent)
			}
		}
	}
}

// bindListeners binds the status server's listener and the metrics one.
func bindListeners(cfg *Config) (statusLn, promLn net.Listener, err error) {
	a := cfg.Agent
	statusLn, err = listenTCP("agent.status_port", a.Localhost, a.StatusPort)
	if err != nil {
		return nil, nil, portInUse(cfg, "agent.status_port", a.StatusPort, err)
	}
	if a.PrometheusPort != 0 {
		promLn, err = listenTCP("agent.prometheus_port", a.PrometheusAddress, a.PrometheusPort)
		if err != nil {
			statusLn.Close()
			return nil, nil, portInUse(cfg, "agent.prometheus_port", a.PrometheusPort, err)
		}
	}
	return statusLn, promLn, nil
}

// waitLive polls Envoy's /ready until it answers 200 LIVE, then sends
// READY=1 and returns true. Otherwise Envoy is gone when it returns: it
// exited or was not LIVE in time (an error), or a stop came first (nil).
func (s *supervisor) waitLive(ctx context.Context, started time.Time, runErr <-chan error, stopAgent context.CancelFunc) (live bool, err error) {
	startTimeout := s.config().Agent.StartTimeout.D()
	deadline := time.NewTimer(startTimeout)
	defer deadline.Stop()
	// A start_timeout beyond the unit's TimeoutStartSec must not be cut short.
	s.notify.ExtendTimeout(startTimeout + 10*time.Second)
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
			s.log.Errorf("envoy was not LIVE within start_timeout %s (state %s); stopping it", startTimeout, state)
			lines := s.proxy.LastLines()
			s.agent.DisableDraining()
			stopAgent()
			<-runErr
			return false, &StartError{Reason: fmt.Sprintf("envoy was not LIVE within start_timeout %s (its state: %s)", startTimeout, state), LastLines: lines}
		case <-ctx.Done():
			return false, s.abortStart("the agent's context ended", runErr, stopAgent)
		case sig := <-s.sigs:
			if sig == syscall.SIGHUP || sig == syscall.SIGUSR1 {
				s.log.Warnf("%s during start-up: ignored", sig)
				continue
			}
			return false, s.abortStart(sig.String(), runErr, stopAgent)
		case <-timer.C:
		}
		pollCtx, cancel := context.WithTimeout(context.Background(), time.Second)
		r, err := s.proxy.Admin().Ready(pollCtx)
		cancel()
		if err == nil {
			if r.Live {
				took := time.Since(started)
				s.metrics.startSeconds.Set(took.Seconds())
				s.setLive(true)
				s.notify.Ready(s.liveStatus() + s.adoptedNote())
				s.log.Infof("envoy is LIVE after %s", took.Round(time.Millisecond))
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

// learnVersion records the serving Envoy's hot-restart version, which a
// reload's binary must match.
func (s *supervisor) learnVersion() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	si, err := s.proxy.Admin().ServerInfo(ctx)
	if err == nil && si.HotRestartVersion != "" {
		s.setHotRestartVersion(si.HotRestartVersion)
		s.log.Infof("envoy %s, hot-restart version %s", si.Version, si.HotRestartVersion)
		return
	}
	v, verr := envoy.HotRestartVersion(ctx, s.config().Envoy.BinaryPath)
	if verr != nil {
		s.log.Warnf("cannot learn Envoy's hot-restart version (%v; %v): reloads will be refused", err, verr)
		return
	}
	s.setHotRestartVersion(v)
}

// requestReload asks for a reload and waits for its result; reloads are
// refused until Envoy is first LIVE and once a stop has begun.
func (s *supervisor) requestReload(ctx context.Context) ReloadResult {
	if !s.isLive() || s.agent.Draining() {
		res := ReloadResult{Error: "envoy is not serving (starting or stopping): nothing to reload", Epoch: s.proxy.Epoch()}
		s.log.Warnf("reload refused: %s", res.Error)
		return res
	}
	select {
	case res := <-s.reloader.request():
		return res
	case <-ctx.Done():
		return ReloadResult{Error: "the reload request was cancelled; the reload goes on"}
	}
}

// abortStart stops an Envoy that is not LIVE yet: there is nothing to drain.
func (s *supervisor) abortStart(why string, runErr <-chan error, stopAgent context.CancelFunc) error {
	s.log.Infof("%s before Envoy was LIVE: stopping it without a drain", why)
	s.notify.Stopping("stopping before Envoy was LIVE")
	s.agent.DisableDraining()
	stopAgent()
	if err := <-runErr; err != nil {
		var ee *envoy.ExitError
		if errors.As(err, &ee) {
			return &StartError{Reason: fmt.Sprintf("envoy exited before it was LIVE: %v", ee.Err), LastLines: ee.LastLines}
		}
		return err
	}
	return nil
}

func (s *supervisor) stop(why string, stopAgent context.CancelFunc) {
	s.log.Infof("%s", why)
	if s.isReloading() {
		s.log.Infof("waiting for the reload under way to end before draining")
	}
	s.report.drainBegan("stop", s.config().Agent.TerminationDrainDuration.D())
	if limit := s.config().Agent.StartTimeout.D(); !s.reloader.closeWithin(limit) {
		s.log.Warnf("the reload under way did not end within start_timeout (%s); stopping anyway", limit)
	}
	s.setLive(false)
	s.metrics.draining.Set(1)
	s.notify.Stopping("stopping: draining Envoy")
	stopAgent()
}

func (s *supervisor) finish(err error) error {
	s.setLive(false)
	if err != nil {
		s.notify.Status("Envoy exited: " + firstLine(err.Error()))
		return err
	}
	s.notify.Status("stopped")
	s.log.Infof("envoy-agent stopped")
	return nil
}

func (s *supervisor) drainNow() {
	s.report.drainBegan("endless", 0)
	s.metrics.draining.Set(1)
	s.setLive(false)
	s.agent.DrainNow()
	s.notify.Status("draining with no end (POST /drain); the next stop exits at once")
}

// drainProgress keeps STATUS= current during a drain and extends systemd's
// stop timeout so that it never cuts a configured drain short.
func (s *supervisor) drainProgress(p envoy.DrainProgress) {
	s.report.drainProgress(p)
	s.metrics.drainSeconds.Set(p.Elapsed.Seconds())
	conns := "unknown"
	if p.ActiveConnections >= 0 {
		conns = strconv.Itoa(p.ActiveConnections)
	}
	if p.Done {
		s.notify.Status(fmt.Sprintf("drained for %s (%s); stopping Envoy", p.Elapsed.Round(100*time.Millisecond), p.Reason))
		s.notify.ExtendTimeout(envoy.DefaultQuitGrace + 5*time.Second)
		return
	}
	s.notify.Status(fmt.Sprintf("draining: %s active connections, %s left", conns, p.Remaining.Round(time.Second)))
	// Once a second is plenty: each extension covers the whole rest.
	if p.Elapsed-s.lastExtend >= time.Second || s.lastExtend == 0 {
		s.lastExtend = max(p.Elapsed, 1)
		s.notify.ExtendTimeout(p.Remaining + envoy.DefaultQuitGrace + 5*time.Second)
	}
}

func (s *supervisor) setLive(v bool) {
	s.mu.Lock()
	s.live = v
	s.mu.Unlock()
	if v {
		s.metrics.live.Set(1)
	} else {
		s.metrics.live.Set(0)
	}
	s.metrics.epoch.Set(float64(s.proxy.Epoch()))
}

func (s *supervisor) isLive() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.live
}

func (s *supervisor) liveStatus() string {
	cfg := s.config()
	status := fmt.Sprintf("live: Envoy pid %d, epoch %d, admin %s", s.proxy.Pid(), s.proxy.Epoch(), cfg.adminAddress())
	if note := s.checkInstalledEnvoy(); note != "" {
		status += "; " + note
	}
	return status
}

// ready is /healthz/ready: Envoy answers LIVE and no drain has begun.
func (s *supervisor) ready(ctx context.Context) (bool, string) {
	if s.agent.Draining() {
		return false, "draining"
	}
	r, err := s.proxy.Admin().Ready(ctx)
	if err != nil {
		if s.isReloading() {
			// A starting epoch takes the admin port over early; the
			// serving epoch keeps serving meanwhile.
			return true, "LIVE (reloading)"
		}
		return false, "envoy admin API not answering"
	}
	if !r.Live {
		return false, r.State
	}
	return true, r.State
}

// watchdogAlive is true before Envoy is first LIVE (the agent itself is
// alive) and afterwards only while Envoy's admin API answers.
func (s *supervisor) watchdogAlive(ctx context.Context) bool {
	if (!s.isLive() && !s.agent.Draining()) || s.isReloading() {
		return true // the start timeout bounds both
	}
	_, err := s.proxy.Admin().Ready(ctx)
	return err == nil
}

func firstLine(s string) string {
	first, _, _ := strings.Cut(s, "\n")
	return first
}

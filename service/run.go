//go:build linux

package service

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/envoy-agent/envoy-agent/envoy"
	"github.com/envoy-agent/envoy-agent/envoy/certs"
	"github.com/envoy-agent/envoy-agent/envoy/epochfiles"
	"github.com/envoy-agent/envoy-agent/envoy/reexec"
	"github.com/envoy-agent/envoy-agent/envoy/versions"
	"github.com/envoy-agent/envoy-agent/envoy/xds"
	"github.com/envoy-agent/envoy-agent/internal/hostfiles"
	"github.com/envoy-agent/envoy-agent/internal/safefile"
	"github.com/envoy-agent/envoy-agent/service/config"
	"github.com/envoy-agent/envoy-agent/service/control"
	"github.com/envoy-agent/envoy-agent/service/guardwatch"
	"github.com/envoy-agent/envoy-agent/service/handover"
	"github.com/envoy-agent/envoy-agent/service/httpserver"
	"github.com/envoy-agent/envoy-agent/service/reloadqueue"
	"github.com/envoy-agent/envoy-agent/service/systemd"
)

// Options are what `envoy-agent run` takes from its command line.
type Options struct {
	ConfigPath string
	Version    string
	// Stderr receives the agent's log and Envoy's; nil means os.Stderr.
	Stderr io.Writer
	// Signals are the second stop signal, SIGHUP and SIGUSR1
	// (NotifySignals); the first stop signal ends Run's context. nil: none.
	Signals *systemd.Signals
}

// Run is `envoy-agent run`: it starts Envoy, tells systemd when Envoy is LIVE,
// feeds the watchdog, and on SIGTERM drains Envoy and returns nil. It
// returns a *ConfigError for a bad configuration (before Envoy starts), a
// *StartError when Envoy never became LIVE, or Envoy's *envoy.ExitError
// when Envoy exited by itself.
func Run(ctx context.Context, opts Options) error {
	if opts.Stderr == nil {
		opts.Stderr = os.Stderr
	}
	// Signals first: a SIGHUP or SIGTERM during start-up must not kill the
	// agent with the default action and leave nothing drained.
	if opts.Signals == nil {
		opts.Signals = &systemd.Signals{} // nil channels: no signal reaches this run but ctx's end
	}
	opts.Stderr = systemd.BestEffortWriter{W: opts.Stderr}
	restoreGC := sync.OnceFunc(startGC())
	defer restoreGC()

	// An agent that re-executed into this one (a live upgrade) handed over
	// its Envoys and the settings they run with: the file may have been
	// edited since, and is only read at the next reload.
	handover.CloseExecFD()
	handed, err := handover.Take()
	if err != nil {
		fmt.Fprintf(opts.Stderr, "envoy-agent: upgrade: cannot adopt the running Envoy: %v\n", err)
		return err
	}
	cfg := handed.ServingConfig()
	if cfg == nil {
		if cfg, err = config.LoadStartConfig(opts.ConfigPath); err != nil {
			return err
		}
		// The run folder and the admin socket's must be the agent's user's
		// (or root's): whoever else owns one could swap the files Envoy
		// runs, or answer as its admin.
		for _, d := range []struct{ key, dir string }{{"agent.run_dir", cfg.RunDir()}, {"envoy.admin_socket", filepath.Dir(cfg.Envoy.AdminSocket)}} {
			if _, serr := os.Lstat(d.dir); d.dir != "" && d.dir != "." && serr == nil {
				if err := hostfiles.CheckRunDir(d.dir); err != nil {
					return config.Problemf(cfg, d.key, "%v", err)
				}
			}
		}
	}
	log := systemd.NewLogger(opts.Stderr, cfg.Agent.LogLevel, cfg.Agent.LogFormat)
	for _, w := range cfg.Warnings() {
		log.Warn(w)
	}
	if handed == nil {
		// Before Envoy starts: without an inotify instance for a file it
		// watches, Envoy aborts at its start (and systemd would restart
		// the unit into the same abort).
		inotify, err := cfg.CheckInotify()
		if err != nil {
			return err
		}
		for _, w := range inotify {
			log.Warn(w)
		}
	}
	for _, n := range cfg.Notes() {
		log.Info(n)
	}
	s, err := newSupervisor(cfg, opts, handed, log, nil)
	if err != nil {
		log.Errorf("upgrade: cannot adopt the running Envoy: %v", err)
		return err
	}
	var certsRead *certs.Loading
	if handed == nil && cfg.Certificates() > 0 {
		// Envoy's first start overlaps the certificates' read.
		certsRead = s.certs.LoadNextInBackground()
	}
	return s.run(ctx, certsRead, restoreGC)
}

// supervisor is one `envoy-agent run`.
type supervisor struct {
	state // the configuration in force, the phase, the hot-restart version (state.go)

	log     *logrus.Logger
	stderr  io.Writer
	notify  *systemd.Notifier
	metrics *metrics
	sigs    *systemd.Signals
	version string // this agent's

	// The Envoy it runs, and where it got it (proxy.go).
	envoys   envoys
	proxy    envoyProcess
	admin    envoyAdmin
	runner   *envoy.Agent // Istio's Agent: runs the Envoy, drains and stops it when its context ends
	reloader *reloadqueue.Queue[*reloadPlan]
	versions versions.Cache // what the binaries at binary_path said of themselves, per file

	report statusRecord // what GET /status reports of past events

	// Live upgrades (upgrade.go, adopt.go, package handover).
	handover *handover.State // what the agent before the exec handed over, nil on a fresh start
	selfPath string          // the agent's binary, re-executed on an upgrade
	up       upgradeState

	certs     *certs.Manager // the bootstrap's certificates, served as secrets and watched
	xds       *xds.Server    // serves Envoy its routes and secrets (envoy/xds); its socket is made by open
	installed installedEnvoy // is the Envoy at binary_path the running one? (installedenvoy.go)

	// The reload guard (agent.reload_guard): its reads of Envoy and
	// windows (package guardwatch), and the reloads it watches (reload.go).
	watch  *guardwatch.Watch
	guards guards
}

// newSupervisor assembles the supervisor of one run, every part of it in
// this one place: cfg is the configuration in force, opts's Stderr and
// Signals are set, handed is what a live upgrade handed over (nil on a
// fresh start), and from are the Envoys it runs (nil: the real ones, a
// unit test's fake otherwise).
func newSupervisor(cfg *config.Config, opts Options, handed *handover.State, log *logrus.Logger, from envoys) (*supervisor, error) {
	s := &supervisor{state: newState(cfg), log: log, stderr: opts.Stderr, notify: systemd.NewNotifier(log), metrics: newMetrics(),
		sigs: opts.Signals, version: opts.Version, handover: handed, xds: xds.New(filepath.Join(cfg.RunDir(), xds.SocketName), log)}
	s.certs = certs.NewManager(log, s.xds, xds.Convert)
	s.selfPath, _ = os.Executable()
	s.certs.OnChange = s.metrics.certificatesChanged(s.certs)
	s.metrics.countDrift(s.driftedFiles)
	if handed.HasXDS() {
		// Before the adopted epochs are set and the server answers: the
		// certificates are every epoch's.
		s.certs.Adopt(handed.Certificates)
	}
	s.envoys = from
	if s.envoys == nil {
		s.envoys = realEnvoys{&s.versions}
	}
	if handed != nil {
		s.setHotRestartVersion(handed.HotRestartVersion) // before proxyConfig, which reads it
	}
	var err error
	if s.proxy, s.admin, err = s.envoys.open(s.proxyConfig(cfg, s.hotRestartVersion()), handed); err != nil {
		return nil, err
	}
	s.watch = guardwatch.New(adminReader{s.admin}, func() guardwatch.Settings {
		a := s.config().Agent
		return guardwatch.Settings{On: a.ReloadGuard > 0, URL: a.ReloadGuardURL}
	})
	s.reloader = reloadqueue.New(reloadqueue.Funcs[*reloadPlan]{
		Prepare: func(nested, force bool) (*reloadPlan, bool, control.ReloadResult) {
			p, res := s.prepareReload(nested, force)
			return p, p != nil, res
		},
		Wait: s.waitForDrainingEpochs,
		// An in-place reload starts no epoch: it cuts none.
		NeedsWait: func(p *reloadPlan) bool { return p.envoy.Path != envoy.InPlace },
		Apply:     s.applyReload,
		Discard:   s.discardReload,
	})
	a := cfg.Agent
	s.runner = envoy.NewAgent(s.proxy, a.TerminationDrainDuration.D(), a.MinDrainDuration.D(), a.Localhost,
		int(cfg.Envoy.AdminPort), int(a.StatusPort), int(a.PrometheusPort), a.ExitOnZeroActiveConnections)
	s.runner.SetLogger(log)
	s.runner.OnDrainProgress(s.drainProgress())
	return s, nil
}

// watchCertificates keeps the secrets of the bootstrap's certificates up
// to date with their files until ctx ends (envoy/certs). An Envoy adopted
// from an agent of before the ADS server (a live upgrade) already runs a
// rewritten copy: the operator's bootstrap is rewritten once more, only to
// learn which files to watch (a later agent hands them over: Adopt).
func (s *supervisor) watchCertificates(ctx context.Context, adopting bool) {
	if adopting && !s.handover.HasXDS() {
		cfg := s.config()
		if data, err := safefile.ReadRegular(cfg.Envoy.ConfigPath, epochfiles.MaxBootstrapSize); err == nil {
			if _, err := s.certs.RewriteBootstrap(data, cfg.Envoy.ConfigPath, cfg.RunDir()); err != nil {
				s.log.Errorf("%v", err)
			}
		}
	}
	if err := s.certs.Run(ctx); err != nil {
		s.log.Errorf("%v", err)
	}
}

// applyLogSettings takes the agent's log level and format from cfg.
func (s *supervisor) applyLogSettings(cfg *config.Config) {
	fresh := systemd.NewLogger(s.stderr, cfg.Agent.LogLevel, cfg.Agent.LogFormat)
	s.log.SetLevel(fresh.GetLevel())
	s.log.SetFormatter(fresh.Formatter)
}

// run is the run, once assembled: open (the claims and the agent's own
// sockets), serve (the agent's servers, the watchdog and Envoy's start),
// the wait for Envoy to be LIVE (READY=1) and for certsRead (nil: the
// certificates are read before Envoy starts), then loop until Envoy exits
// or a stop has stopped it.
func (s *supervisor) run(ctx context.Context, certsRead *certs.Loading, restoreGC func()) error {
	s.report.agentStarted(s.version)
	s.noteLastExit()
	o, err := s.open(ctx)
	if err != nil {
		return err
	}
	defer o.close()
	defer s.xds.Close() // Envoy stopped first: the runner ends before run returns

	serveCtx, stopServing := context.WithCancel(context.Background())
	defer stopServing()
	// The runner's context: its end stops Envoy (after a drain, unless
	// draining was disabled).
	envoyCtx, stopEnvoy := context.WithCancel(context.Background())
	defer stopEnvoy()
	status, runErr, started := s.serve(serveCtx, envoyCtx, stopEnvoy, o)
	live, err := s.waitLive(ctx, started, runErr, stopEnvoy, certsRead)
	restoreGC()
	if !live {
		s.recordExit(err)
		return err
	}
	status.Seed(true, "LIVE")
	for _, w := range s.config().BootstrapFileWarnings() { // a start's, judged once Envoy runs
		s.log.Warn(w)
	}
	go s.watchInstalledEnvoy(serveCtx)
	return s.loop(ctx, runErr, stopEnvoy)
}

// serve starts what runs until the agent exits, until serveCtx ends: the
// status port, the control socket and the metrics port on the sockets o
// holds, Envoy (the runner, until envoyCtx ends), the certificates' watch
// and the watchdog. It returns the status server, whose answer the caller
// seeds at LIVE, where the runner's end comes, and when Envoy was started.
func (s *supervisor) serve(serveCtx, envoyCtx context.Context, stopEnvoy context.CancelFunc, o *opened) (*httpserver.Status, <-chan error, time.Time) {
	cfg, log := s.config(), s.log
	ctl := o.ctl
	ctl.Quit = func() { s.runner.DisableDraining(); stopEnvoy() }
	ctl.Report = s.handleStatus
	ctl.Reopen = s.reopenLogs
	ctl.Upgrade = s.upgradeHandler(o)
	status := &httpserver.Status{Log: log, Ready: s.ready, Draining: s.stopping}
	go status.Serve(serveCtx, o.statusLn)
	go httpserver.Serve(serveCtx, o.controlLn, ctl.Handler(), httpserver.Limits{MaxConns: controlMaxConns, Context: control.WithPeerCred}, log)
	if o.promLn != nil {
		prom := &httpserver.Metrics{Log: log, Admin: s.admin, Agent: s.metrics.writeTo}
		go prom.Serve(serveCtx, o.promLn)
	}

	log.Infof("envoy-agent %s starting envoy %s with %s (admin %s, status %s, control %s)", s.version, cfg.Envoy.BinaryPath,
		cfg.Envoy.ConfigPath, cfg.AdminAddress(), o.statusLn.Addr(), o.controlLn.Addr())
	s.notify.Status("starting Envoy")
	started := time.Now()
	runErr := make(chan error, 1)
	go func() { runErr <- s.runner.Run(envoyCtx) }()
	// Watched from the start, so that a renewal right after READY=1 is
	// seen (a watch begun at LIVE missed one after a live upgrade).
	go s.watchCertificates(serveCtx, s.handover != nil)
	go s.watch.Run(serveCtx)

	// The watchdog runs from the start: systemd arms it when it forks us,
	// not at READY. Until Envoy is LIVE the agent vouches for itself (the
	// start timeout bounds that); after, only Envoy's admin answers count.
	wd, err := systemd.WatchdogInterval()
	if err != nil {
		log.Errorf("%v: no watchdog pings will be sent, so systemd will restart the unit when WatchdogSec= passes", err)
	}
	if wd > 0 {
		log.Infof("watchdog on: pinging every %s while Envoy's admin API answers", wd/2)
		go systemd.RunWatchdog(serveCtx, wd, s.watchdogCheck, s.notify.Watchdog, log)
	}
	return status, runErr, started
}

// loop serves the signals and a stop while Envoy serves, until the runner
// ends (Envoy exited, or a stop stopped it).
func (s *supervisor) loop(ctx context.Context, runErr <-chan error, stopEnvoy context.CancelFunc) error {
	done := ctx.Done()
	for {
		select {
		case err := <-runErr:
			return s.finish(err)
		case <-done:
			done = nil
			s.stop(systemd.StopReason(ctx)+": draining Envoy", stopEnvoy)
		case sig := <-s.sigs.Again:
			s.log.Infof("%s again: ending the drain now", sig)
			s.runner.DisableDraining()
		case <-s.sigs.Reload:
			s.log.Infof("SIGHUP: reloading")
			go s.requestReload(context.Background(), nil, control.ReloadOptions{})
		case <-s.sigs.Watchdog:
			s.watchdogStop(stopEnvoy)
		case <-s.sigs.Reopen:
			s.log.Infof("SIGUSR1: reopening envoy's log files")
			go s.reopenLogs(context.Background())
		}
	}
}

// ServeForkerOnMainThread runs main on a goroutine while the calling
// goroutine, which must be locked to the process's main thread, forks every
// Envoy and re-executes the agent on an upgrade (envoy/reexec). It returns
// main's result. The command's main calls it so that it needs service only.
func ServeForkerOnMainThread(main func() int) int { return reexec.ServeForkerOnMainThread(main) }

// AdminAddressError is a start that stopped because Envoy's admin bound an
// address other than the configured one (an exit 3, like a bad file).
type AdminAddressError = envoy.AdminAddressError

//go:build linux

package service

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"github.com/sirupsen/logrus"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/envoy-agent/envoy-agent/envoy"
	"github.com/envoy-agent/envoy-agent/envoy/certs"
	"github.com/envoy-agent/envoy-agent/envoy/versions"
	"github.com/envoy-agent/envoy-agent/internal/childenv"
	"github.com/envoy-agent/envoy-agent/internal/hostfiles"
	"github.com/envoy-agent/envoy-agent/internal/safefile"
	"github.com/envoy-agent/envoy-agent/service/claims"
	"github.com/envoy-agent/envoy-agent/service/config"
	"github.com/envoy-agent/envoy-agent/service/control"
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
	stderr := opts.Stderr
	if stderr == nil {
		stderr = os.Stderr
	}
	// Signals first: a SIGHUP or SIGTERM during start-up must not kill the
	// agent with the default action and leave nothing drained.
	sigs := opts.Signals
	if sigs == nil {
		sigs = &systemd.Signals{} // nil channels: no signal reaches this run but ctx's end
	}
	stderr = systemd.BestEffortWriter{W: stderr}

	// An agent that re-executed into this one (a live upgrade) handed over
	// its Envoys and the settings they run with: the file may have been
	// edited since, and is only read at the next reload.
	handover.CloseExecFD()
	handed, err := handover.Take()
	if err != nil {
		fmt.Fprintf(stderr, "envoy-agent: upgrade: cannot adopt the running Envoy: %v\n", err)
		return err
	}
	cfg := handed.ServingConfig()
	if cfg == nil {
		if cfg, err = config.LoadConfig(opts.ConfigPath); err != nil {
			return err
		}
		// The run folder must be the agent's user's (or root's): whoever else
		// owns it could swap the files Envoy runs.
		if dir := cfg.RunDir(); dir != "" {
			if _, serr := os.Lstat(dir); serr == nil {
				if err := hostfiles.CheckRunDir(dir); err != nil {
					return config.Problemf(cfg, "agent.run_dir", "%v", err)
				}
			}
		}
	}
	log := systemd.NewLogger(stderr, cfg.Agent.LogLevel, cfg.Agent.LogFormat)
	for _, w := range cfg.Warnings() {
		log.Warn(w)
	}
	s := &supervisor{state: newState(cfg), log: log, notify: systemd.NewNotifier(log), metrics: newMetrics(), sigs: sigs, handover: handed, version: opts.Version, certs: certs.NewManager(log)}
	s.selfPath, _ = os.Executable()
	s.certs.OnChange = s.metrics.certificatesChanged(s.certs)
	s.metrics.countDrift(s.driftedFiles)
	return s.run(ctx, opts.Version, stderr)
}

// supervisor is one `envoy-agent run`.
type supervisor struct {
	state // the configuration in force, the phase, the hot-restart version (state.go)

	log     *logrus.Logger
	notify  *systemd.Notifier
	metrics *metrics
	sigs    *systemd.Signals

	proxy    *envoy.Envoy
	agent    *envoy.Agent
	reloader *reloadqueue.Queue[*preparedReload]
	stderr   io.Writer

	lastExtend time.Duration // drain time of the last EXTEND_TIMEOUT_USEC; the drain's goroutine only
	report     statusRecord  // what GET /status reports of past events

	// Live upgrades (upgrade.go, adopt.go, package handover).
	handover         *handover.State // what the agent before the exec handed over, nil on a fresh start
	version          string
	selfPath         string // the agent's binary, re-executed on an upgrade
	statusLn, promLn net.Listener
	held             *claims.Held // handed over with the listeners
	up               upgradeState

	certs     *certs.Manager // the bootstrap's certificates, served as secrets and watched
	installed installedEnvoy // is the Envoy at binary_path the running one? (installedenvoy.go)
	versions  versions.Cache // what the binaries at binary_path said of themselves, per file
}

// proxyConfigOf maps the configuration's [envoy] table (and the run
// directory and localhost) onto the envoy package's ProxyConfig. It lives
// here, not in the config package, so that the config package links
// nothing of the envoy package.
func proxyConfigOf(c *config.Config) envoy.ProxyConfig {
	e := c.Envoy
	return envoy.ProxyConfig{
		LogLevel:               e.LogLevel,
		ComponentLogLevel:      e.ComponentLogLevel,
		NodeIPs:                e.NodeIPs,
		Sidecar:                e.DrainInboundOnly,
		LogAsJSON:              e.LogAsJSON,
		BinaryPath:             e.BinaryPath,
		ConfigPath:             e.ConfigPath,
		AdminPort:              int32(e.AdminPort),
		AdminSocket:            e.AdminSocket,
		DrainDuration:          durationpb.New(e.DrainDuration.D()),
		Concurrency:            e.Concurrency,
		ParentShutdownDuration: durationpb.New(e.ParentShutdownDuration.D()),
		BaseID:                 e.BaseID,
		ExtraArgs:              e.ExtraArgs,
		RunDir:                 c.RunDir(),
		LocalHost:              c.Agent.Localhost,
		AllowRemoteAdmin:       e.AllowRemoteAdmin,
		ResourceFiles:          c.Agent.InPlace(),
	}
}

// proxyConfig is cfg's ProxyConfig with the agent's logger and output.
func (s *supervisor) proxyConfig(cfg *config.Config) envoy.ProxyConfig {
	pc := proxyConfigOf(cfg)
	pc.Logger = s.log
	pc.Stderr = systemd.EnvoyOutputFor(s.stderr)
	pc.Stdout = systemd.EnvoyOutputFor(s.stderr)
	// Envoy must not answer on systemd's notify socket or take its sockets.
	pc.Env = childenv.Clean(os.Environ())
	pc.DisableHotRestart = s.hotRestartOff()
	pc.RewriteBootstrap = s.certs.RewriteBootstrap
	return pc
}

// watchCertificates keeps the secrets of the bootstrap's certificates up
// to date with their files until ctx ends (envoy/certs). An adopted Envoy
// (a live upgrade) already runs a rewritten copy: the operator's bootstrap
// is rewritten once more, only to learn which files to watch.
func (s *supervisor) watchCertificates(ctx context.Context, adopting bool) {
	if adopting {
		cfg := s.config()
		if data, err := safefile.ReadRegular(cfg.Envoy.ConfigPath, envoy.MaxBootstrapSize); err == nil {
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

func (s *supervisor) run(ctx context.Context, version string, stderr io.Writer) (err error) {
	cfg, log := s.config(), s.log
	s.stderr = stderr
	s.report.agentStarted(version)
	s.noteLastExit()
	if s.proxy, err = s.newProxy(cfg); err != nil {
		log.Errorf("upgrade: cannot adopt the running Envoy: %v", err)
		return err
	}
	s.reloader = reloadqueue.New(reloadqueue.Funcs[*preparedReload]{
		Prepare: func(nested bool) (*preparedReload, bool, control.ReloadResult) {
			p, res := s.prepareReload(nested)
			return p, p != nil, res
		},
		Wait: s.waitForDrainingEpochs,
		// An in-place reload starts no epoch: it cuts none.
		NeedsWait: func(p *preparedReload) bool { return p.plan.Path != envoy.InPlace },
		Apply:     s.applyReload,
		Discard:   s.discardReload,
	})
	a := cfg.Agent
	s.agent = envoy.NewAgent(s.proxy, a.TerminationDrainDuration.D(), a.MinDrainDuration.D(), a.Localhost,
		int(cfg.Envoy.AdminPort), int(a.StatusPort), int(a.PrometheusPort), a.ExitOnZeroActiveConnections)
	s.agent.SetLogger(log)
	s.agent.OnDrainProgress(s.drainProgress)

	serveCtx, stopServing := context.WithCancel(context.Background())
	defer stopServing()
	// An agent that adopts a running Envoy (a live upgrade) holds its base
	// id, its ports and its listeners already.
	adopting := s.handover != nil
	// The claims and the agent's own sockets are taken before Envoy starts,
	// so that a clash or a taken port fails the start with nothing to clean
	// up; they do not depend on each other, so they are taken side by side
	// and a start waits for the slower, not for both. A claim's error comes
	// first: it names the other instance.
	sockets := make(chan agentSockets, 1)
	go func() { sockets <- s.openSockets(ctx, cfg, adopting) }()
	held, err := claims.Take(cfg, claims.Self{Config: absPath(cfg.File), Instance: os.Getenv(EnvInstance)}, log, s.handover.ClaimFiles())
	own := <-sockets
	if err == nil && own.err != nil {
		held.Close()
		err = own.err
	}
	if err != nil {
		own.close()
		return err
	}
	defer held.Close()
	s.held = held
	statusLn, promLn, ctl, controlLn := own.statusLn, own.promLn, own.ctl, own.controlLn
	s.statusLn, s.promLn = statusLn, promLn
	// Closed here, not only by the server's shutdown: the socket file goes
	// with the agent's exit.
	defer controlLn.Close()

	agentCtx, stopAgent := context.WithCancel(context.Background())
	defer stopAgent()
	ctl.Quit = func() { s.agent.DisableDraining(); stopAgent() }
	ctl.Report = s.handleStatus
	ctl.Reopen = s.reopenLogs
	ctl.Upgrade = s.upgradeHandler()
	status := &httpserver.Status{Log: log, Ready: s.ready, Draining: s.agent.Draining}
	go status.Serve(serveCtx, statusLn)
	go httpserver.Serve(serveCtx, controlLn, ctl.Handler(), httpserver.Limits{MaxConns: controlMaxConns, Context: control.WithPeerCred}, log)
	if promLn != nil {
		prom := &httpserver.Metrics{Log: log, Admin: s.proxy.Admin(), Agent: s.metrics.writeTo}
		go prom.Serve(serveCtx, promLn)
	}

	log.Infof("envoy-agent %s starting envoy %s with %s (admin %s, status %s, control %s)", version, cfg.Envoy.BinaryPath,
		cfg.Envoy.ConfigPath, cfg.AdminAddress(), statusLn.Addr(), controlLn.Addr())
	s.notify.Status("starting Envoy")
	started := time.Now()
	runErr := make(chan error, 1)
	go func() { runErr <- s.agent.Run(agentCtx) }()
	go s.watchCertificates(serveCtx, adopting)

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

	if live, err := s.waitLive(ctx, started, runErr, stopAgent); !live {
		s.recordExit(err)
		return err
	}
	status.Seed(true, "LIVE")
	go s.watchInstalledEnvoy(serveCtx)
	done := ctx.Done()
	for {
		select {
		case err := <-runErr:
			return s.finish(err)
		case <-done:
			done = nil
			s.stop(systemd.StopReason(ctx)+": draining Envoy", stopAgent)
		case sig := <-s.sigs.Again:
			log.Infof("%s again: ending the drain now", sig)
			s.agent.DisableDraining()
		case <-s.sigs.Reload:
			log.Infof("SIGHUP: reloading")
			go s.requestReload(context.Background(), nil)
		case <-s.sigs.Watchdog:
			s.watchdogStop(stopAgent)
		case <-s.sigs.Reopen:
			log.Infof("SIGUSR1: reopening envoy's log files")
			go s.reopenLogs(context.Background())
		}
	}
}

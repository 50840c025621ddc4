package service

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/envoy-agent/envoy-agent/envoy"
)

// ReloadResult is the outcome of one reload, as `envoy-agent reload` and
// the log report it.
type ReloadResult struct {
	OK     bool   `json:"ok"`
	Epoch  int    `json:"epoch"` // the serving epoch afterwards
	Error  string `json:"error,omitempty"`
	Config bool   `json:"config_error,omitempty"` // refused for the configuration itself
	TookMs int64  `json:"took_ms"`
}

// reloader runs reloads one at a time. A request made while one runs
// waits for the next run, which serves every request made meanwhile (they
// are coalesced): each sees the files as they were when that run began.
type reloader struct {
	run func() ReloadResult

	mu      sync.Mutex
	running bool
	closed  bool
	pending []chan ReloadResult
	idle    chan struct{} // closed while no run is going on
}

func newReloader(run func() ReloadResult) *reloader {
	idle := make(chan struct{})
	close(idle)
	return &reloader{run: run, idle: idle}
}

// request asks for a reload; the channel gets its result.
func (r *reloader) request() <-chan ReloadResult {
	ch := make(chan ReloadResult, 1)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		ch <- ReloadResult{Error: "the agent is stopping"}
		return ch
	}
	r.pending = append(r.pending, ch)
	if !r.running {
		r.running = true
		r.idle = make(chan struct{})
		go r.loop()
	}
	return ch
}

func (r *reloader) loop() {
	for {
		r.mu.Lock()
		batch := r.pending
		r.pending = nil
		if len(batch) == 0 {
			r.running = false
			close(r.idle)
			r.mu.Unlock()
			return
		}
		r.mu.Unlock()
		res := r.run()
		for _, ch := range batch {
			ch <- res
		}
	}
}

// close refuses new requests and waits for the reload under way, if any,
// and those already asked for.
func (r *reloader) close() {
	r.mu.Lock()
	r.closed = true
	idle := r.idle
	r.mu.Unlock()
	<-idle
}

// restartOnly lists the keys a reload cannot change, and how to read them.
var restartOnly = []struct {
	key string
	get func(*Config) any
}{
	{"envoy.admin_port", func(c *Config) any { return c.Envoy.AdminPort }},
	{"envoy.base_id", func(c *Config) any { return c.Envoy.BaseID }},
	{"agent.localhost", func(c *Config) any { return c.Agent.Localhost }},
	{"agent.status_port", func(c *Config) any { return c.Agent.StatusPort }},
	{"agent.prometheus_port", func(c *Config) any { return c.Agent.PrometheusPort }},
	{"agent.prometheus_address", func(c *Config) any { return c.Agent.PrometheusAddress }},
	{"agent.run_dir", func(c *Config) any { return c.runDir() }},
	{"agent.control_socket", func(c *Config) any { return c.controlSocket() }},
}

// restartOnlyChanges names the keys that differ between old and new and
// need a restart.
func restartOnlyChanges(old, new *Config) []string {
	var keys []string
	for _, k := range restartOnly {
		if k.get(old) != k.get(new) {
			keys = append(keys, fmt.Sprintf("%s (%v -> %v)", k.key, k.get(old), k.get(new)))
		}
	}
	return keys
}

// errConfig marks reload errors that are about the configuration itself.
type errConfig struct{ error }

func (e errConfig) Unwrap() error { return e.error }

// reload is one reload: RELOADING=1, re-read and check the files, hot
// restart Envoy, READY=1 whatever happened.
func (s *supervisor) reload() ReloadResult {
	start := time.Now()
	from := s.proxy.Epoch()
	s.setReloading(true)
	s.notify.Reloading(fmt.Sprintf("reloading: epoch %d serving, starting epoch %d", from, from+1))
	s.notify.ExtendTimeout(2*s.config().Agent.StartTimeout.D() + validateTimeout)
	epoch, err := s.reloadSteps()
	s.setReloading(false)
	took := time.Since(start)
	s.metrics.reloadSeconds.Set(took.Seconds())
	s.metrics.epoch.Set(float64(s.proxy.Epoch()))
	res := ReloadResult{OK: err == nil, Epoch: s.proxy.Epoch(), TookMs: took.Milliseconds()}
	if err != nil {
		s.metrics.reloadFailures.Inc()
		res.Error = err.Error()
		res.Config = errors.As(err, new(errConfig)) || errors.As(err, new(*ConfigError))
		s.log.Errorf("reload failed after %s; epoch %d keeps serving: %v", took.Round(time.Millisecond), res.Epoch, err)
		s.notify.Ready(fmt.Sprintf("%s; last reload failed: %s", s.liveStatus(), firstLine(err.Error())))
		return res
	}
	s.metrics.reloads.Inc()
	s.log.Infof("reloaded in %s: epoch %d is serving", took.Round(time.Millisecond), epoch)
	s.notify.Ready(fmt.Sprintf("%s; reloaded %s", s.liveStatus(), time.Now().Format(time.RFC3339)))
	return res
}

func (s *supervisor) reloadSteps() (int, error) {
	old := s.config()
	cfg, err := LoadConfig(old.File)
	if err != nil {
		return 0, err
	}
	if keys := restartOnlyChanges(old, cfg); len(keys) > 0 {
		return 0, errConfig{fmt.Errorf("a reload cannot change %s: restart the service to apply it", strings.Join(keys, ", "))}
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Agent.StartTimeout.D()+validateTimeout)
	defer cancel()
	if err := validateBootstrap(ctx, cfg); err != nil {
		return 0, err
	}
	version, err := envoy.HotRestartVersion(ctx, cfg.Envoy.BinaryPath)
	if err != nil {
		return 0, errConfig{fmt.Errorf("envoy.binary_path: %w", err)}
	}
	if s.hotRestartVersion() == "" {
		s.learnVersion() // a reload asked for right at READY=1
	}
	if running := s.hotRestartVersion(); version != running {
		return 0, errConfig{fmt.Errorf("envoy.binary_path: %s has hot-restart version %s, the running Envoy %s: they cannot hot restart into each other; restart the service to switch", cfg.Envoy.BinaryPath, version, running)}
	}
	pc := s.proxyConfig(cfg)
	startCtx, cancelStart := context.WithTimeout(context.Background(), cfg.Agent.StartTimeout.D())
	defer cancelStart()
	epoch, err := s.proxy.HotRestart(startCtx, pc)
	if err != nil {
		return 0, err
	}
	a := cfg.Agent
	s.agent.SetDrainSettings(a.TerminationDrainDuration.D(), a.MinDrainDuration.D(), a.ExitOnZeroActiveConnections)
	s.applyLogSettings(cfg)
	s.setConfig(cfg)
	s.setHotRestartVersion(version)
	return epoch, nil
}

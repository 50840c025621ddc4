//go:build linux

// The Envoy the supervisor runs, as the supervisor sees it: what it needs
// of the Envoy process, of Envoy's admin API and of an Envoy binary (the
// seam a unit test's fake stands in for), and the ProxyConfig it runs an
// Envoy with.

package service

import (
	"go.yaml.in/yaml/v3"

	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/envoy-agent/envoy-agent/envoy"
	"github.com/envoy-agent/envoy-agent/envoy/adminapi"
	"github.com/envoy-agent/envoy-agent/envoy/epochfiles"
	"github.com/envoy-agent/envoy-agent/envoy/inplace"
	"github.com/envoy-agent/envoy-agent/envoy/reexec"
	"github.com/envoy-agent/envoy-agent/envoy/versions"
	"github.com/envoy-agent/envoy-agent/internal/childenv"
	"github.com/envoy-agent/envoy-agent/service/config"
	"github.com/envoy-agent/envoy-agent/service/handover"
	"github.com/envoy-agent/envoy-agent/service/httpserver"
	"github.com/envoy-agent/envoy-agent/service/systemd"
)

// envoyProcess is what the supervisor needs of the Envoy it runs:
// *envoy.Envoy, or a unit test's fake.
type envoyProcess interface {
	envoy.Proxy // Run, Drain, Cleanup, UpdateConfig: what envoy.Agent drives

	Pid() int
	Epoch() int
	Epochs() []envoy.EpochInfo
	Timings() (drain, parentShutdown time.Duration)
	LastLines() []string
	NamedListeners() []inplace.NamedListener
	ResourcesAccepted(context.Context) error
	ReopenLogs(context.Context) (int, error)
	Handover(execute func(reexec.HandoverState) error) error

	// A reload: the bootstrap copy it validates, what the serving epoch
	// can take in place, the wait for a draining epoch, and the one call
	// that carries the plan out.
	CopyBootstrap(path string) (*epochfiles.Copy, error)
	PlanInPlace(copied *epochfiles.Copy) (*epochfiles.Plan, error)
	// A plan that will not run (a dry run): its copy, made by a rewrite
	// that serves nothing, and what it changes whatever its path.
	CopyForPlan(data []byte, original string, certs func(doc *yaml.Node, runDir string) (bool, error)) (string, error)
	DiffServing(copied string) (inplace.Change, error)
	// The reload guard's rollback: a private copy of the serving
	// configuration, taken before a reload, that a plan back to it runs.
	KeepServingCopy() (string, error)
	ServingBinaryIs(path string) bool
	WaitForDrainingEpochs(ctx context.Context, report func(envoy.DrainingEpoch)) (time.Duration, error)
	Reload(context.Context, envoy.ReloadPlan) (envoy.ReloadOutcome, error)
}

// envoyAdmin is what the supervisor asks of Envoy's admin API:
// *adminapi.Client, or a unit test's fake.
type envoyAdmin interface {
	httpserver.Admin // what the metrics port relays
	Ready(context.Context) (adminapi.Ready, error)
	ServerInfo(context.Context) (adminapi.ServerInfo, error)
	ActiveConnections(context.Context) (int, error)
	Listeners(context.Context) ([]adminapi.Listener, error)
}

// adminReader is the reload guard's reads of Envoy's admin API
// (guardwatch.Envoy) over the supervisor's admin.
type adminReader struct{ admin envoyAdmin }

// maxGuardRead bounds an answer the guard reads: guard.StatsPath's
// statistics of thousands of clusters and listeners are a few MB.
const maxGuardRead = 32 << 20

func (a adminReader) Read(ctx context.Context, path string) ([]byte, error) {
	resp, err := a.admin.Get(ctx, path)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	return io.ReadAll(io.LimitReader(resp.Body, maxGuardRead))
}

func (a adminReader) Listeners(ctx context.Context) ([]adminapi.Listener, error) {
	return a.admin.Listeners(ctx)
}

// envoys is where the supervisor gets the Envoy it runs and what it asks
// an Envoy binary before it runs one: realEnvoys, or a unit test's fake.
type envoys interface {
	// open returns the Envoy to run with pc: a new one, or, with handed,
	// the one the agent before a live upgrade was running.
	open(pc envoy.ProxyConfig, handed *handover.State) (envoyProcess, envoyAdmin, error)
	// HotRestartVersion is the binary's `--hot-restart-version`.
	HotRestartVersion(ctx context.Context, binary string) (string, error)
	// Validate runs `envoy --mode validate` on cfg's bootstrap.
	Validate(ctx context.Context, cfg *config.Config) error
}

// realEnvoys are the envoy package's Envoys and the binaries themselves,
// asked once per file (the supervisor's versions cache).
type realEnvoys struct{ versions *versions.Cache }

func (r realEnvoys) open(pc envoy.ProxyConfig, handed *handover.State) (envoyProcess, envoyAdmin, error) {
	if handed != nil {
		e, err := envoy.AdoptEnvoy(pc, handed.Envoy)
		if err != nil {
			return nil, nil, err
		}
		return e, e.Admin(), nil
	}
	e := envoy.NewEnvoy(pc)
	return e, e.Admin(), nil
}

func (r realEnvoys) HotRestartVersion(ctx context.Context, binary string) (string, error) {
	return r.versions.HotRestartVersion(ctx, binary)
}

func (r realEnvoys) Validate(ctx context.Context, cfg *config.Config) error {
	return config.ValidateBootstrap(ctx, cfg, r.versions)
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

// proxyConfig is cfg's ProxyConfig for an Envoy whose binary's hot-restart
// version is hotRestartVersion ("" when it is not known yet), with the
// agent's logger and output. It is the one rule of DisableHotRestart: an
// Envoy runs with --disable-hot-restart when its binary says hot restart
// is compiled out. The first start does not ask the binary beforehand
// (noteHotRestartOff says why); a reload knows the new binary's answer.
func (s *supervisor) proxyConfig(cfg *config.Config, hotRestartVersion string) envoy.ProxyConfig {
	pc := proxyConfigOf(cfg)
	pc.Logger = s.log
	pc.Stderr = systemd.EnvoyOutputFor(s.stderr)
	pc.Stdout = systemd.EnvoyOutputFor(s.stderr)
	// Envoy must not answer on systemd's notify socket or take its sockets.
	pc.Env = childenv.Clean(os.Environ())
	pc.DisableHotRestart = hotRestartVersion == envoy.HotRestartDisabled
	pc.RewriteBootstrap = s.certs.EditBootstrap
	pc.Decoded = cfg.TakeStartBootstrap() // a start's first copy decodes nothing again
	pc.XDS = s.xds
	return pc
}

//go:build linux

package envoy

import (
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/envoy-agent/envoy-agent/envoy/adminapi"
	"github.com/envoy-agent/envoy-agent/envoy/cli"
	"github.com/envoy-agent/envoy-agent/envoy/epochfiles"
	"github.com/envoy-agent/envoy-agent/envoy/inplace"
	"github.com/envoy-agent/envoy-agent/envoy/xds/ads"
	"github.com/envoy-agent/envoy-agent/internal/bootyaml"
)

// ProxyConfig describes one Envoy: how to launch it and how to reach its admin
// API. The fields up to AgentIsRoot are those of Istio's pkg/envoy; the rest
// are what an Envoy on a plain VM needs on top.
type ProxyConfig struct {
	// LogLevel is Envoy's base log level (-l). Istio-style component levels
	// may be mixed in ("warning,upstream:debug"); those win over
	// ComponentLogLevel.
	LogLevel string
	// ComponentLogLevel is passed as --component-log-level
	// ("upstream:debug,connection:trace").
	ComponentLogLevel string
	// NodeIPs decides --local-address-ip-version: v6 only when every one of
	// them is an IPv6 address.
	NodeIPs []string
	// Sidecar limits drains to inbound listeners (drain_listeners?inboundonly).
	Sidecar bool
	// LogAsJSON makes Envoy write its own log lines as JSON (--log-format).
	LogAsJSON bool
	// OutlierLogPath is kept for API compatibility with Istio, where it feeds
	// a generated bootstrap. envoy-agent runs the operator's bootstrap,
	// changed only where it must (envoy/inplace), so it is not used here (the
	// package doc, Istio compatibility).
	OutlierLogPath string

	// BinaryPath is the Envoy executable.
	BinaryPath string
	// ConfigPath is Envoy's bootstrap (-c).
	ConfigPath string
	// ConfigCleanup removes ConfigPath in Cleanup (for generated bootstraps).
	ConfigCleanup bool
	// AdminPort is the port of Envoy's admin listener on the loopback address.
	AdminPort int32
	// DrainDuration is --drain-time-s: the length of graceful drains and of
	// a hot-restart parent's drain. Nil means Istio's default, 45s.
	DrainDuration *durationpb.Duration
	// Concurrency is --concurrency when above 0.
	Concurrency int32
	// TestOnly is kept for API compatibility with Istio; it has no effect.
	TestOnly bool
	// AgentIsRoot is kept for API compatibility with Istio; envoy-agent
	// never changes Envoy's credentials (privileges come from the unit).
	AgentIsRoot bool

	// ParentShutdownDuration is --parent-shutdown-time-s: how long after a
	// hot restart the old epoch is told to exit. It must exceed
	// DrainDuration. Nil means 60s.
	ParentShutdownDuration *durationpb.Duration
	// BaseID is --base-id, the hot-restart namespace (shared memory and
	// domain sockets); unique per Envoy on a host.
	BaseID uint32
	// DisableHotRestart passes --disable-hot-restart instead of
	// --base-id/--restart-epoch.
	DisableHotRestart bool
	// ResourceFiles runs each epoch with the bootstrap's static listeners
	// and clusters moved to resource files of its own, and its routes and
	// static secrets served by XDS (envoy/epochfiles, envoy/inplace), so
	// that a reload can change them in the serving Envoy (ReloadPlan's
	// InPlace path). A bootstrap that cannot be rewritten, or no XDS, runs
	// as it is.
	ResourceFiles bool
	// XDS is the agent's ADS server (envoy/xds.Server), which serves each
	// epoch its route configurations and secrets (the certificates'
	// secrets that RewriteBootstrap names included); nil: none, and each
	// epoch runs its bootstrap as it is.
	XDS ads.Server
	// ExtraArgs are appended to Envoy's command line, last.
	ExtraArgs []string
	// RunDir holds the files the proxy writes for Envoy (the admin address
	// file). Empty means a private temporary folder, removed by Cleanup.
	RunDir string
	// LocalHost is the address the admin API is reached on; empty means
	// 127.0.0.1.
	LocalHost string
	// AdminSocket is the path of Envoy's admin unix socket (the bootstrap's
	// admin.address.pipe). When set, the admin API is reached there and
	// AdminPort is not used; Envoy must bind exactly this path.
	AdminSocket string
	// AllowRemoteAdmin accepts an admin listener bound beyond loopback.
	// Without it, an Envoy whose admin address is not a loopback one is
	// stopped and Run reports an *AdminAddressError.
	AllowRemoteAdmin bool
	// QuitGrace is how long Envoy gets to exit after POST /quitquitquit
	// before it is SIGKILLed. Zero means 5s.
	QuitGrace time.Duration
	// Stdout and Stderr receive Envoy's output; nil means the agent's own.
	Stdout, Stderr io.Writer
	// Env is Envoy's environment; nil means the agent's own. A supervisor
	// leaves out what its own supervisor set for it alone (systemd's
	// NOTIFY_SOCKET, say): the package does not know what those are.
	Env []string
	// Logger receives the proxy's and agent's log lines; nil discards them.
	Logger Logger
	// Decoded, when set, is the operator's bootstrap as the caller read
	// and decoded it (to check it): the next copy takes its tree instead
	// of decoding the file again, if the file still holds those bytes.
	Decoded *bootyaml.Decoded
	// RewriteBootstrap, when set, rewrites the bootstrap as each private
	// copy an epoch runs is made: doc is the operator's file decoded (a
	// YAML or JSON bootstrap), which it changes in place, and runDir the
	// run folder the copy goes to; it reports whether it changed doc
	// (certs.Manager.EditBootstrap serves its certificates as secrets on
	// XDS). An error refuses the copy, and with it the start or reload.
	RewriteBootstrap func(doc *yaml.Node, runDir string) (bool, error)
}

// Logger is what the package logs through; *logrus.Logger and
// *logrus.Entry satisfy it.
type Logger interface {
	Infof(format string, args ...any)
	Warnf(format string, args ...any)
	Errorf(format string, args ...any)
}

type nopLogger struct{}

func (nopLogger) Infof(string, ...any)  {}
func (nopLogger) Warnf(string, ...any)  {}
func (nopLogger) Errorf(string, ...any) {}

func loggerOrNop(l Logger) Logger {
	if l == nil {
		return nopLogger{}
	}
	return l
}

// Defaults, matching Istio's where Istio has one.
const (
	DefaultDrainDuration          = cli.DefaultDrainDuration
	DefaultParentShutdownDuration = cli.DefaultParentShutdownDuration
	DefaultQuitGrace              = 5 * time.Second
	defaultFileFlushInterval      = time.Second
)

func durationOr(d *durationpb.Duration, def time.Duration) time.Duration {
	if d == nil {
		return def
	}
	return d.AsDuration()
}

// outputs are where Envoy's stdout and stderr go: Stdout and Stderr, or
// the agent's own.
func (c ProxyConfig) outputs() (stdout, stderr io.Writer) {
	stdout, stderr = c.Stdout, c.Stderr
	if stdout == nil {
		stdout = os.Stdout
	}
	if stderr == nil {
		stderr = os.Stderr
	}
	return stdout, stderr
}

func (c ProxyConfig) localHost() string {
	if c.LocalHost == "" {
		return "127.0.0.1"
	}
	return c.LocalHost
}

// rewrite is what a bootstrap copy of cfg goes through (epochfiles.Rewrite):
// the certificates (RewriteBootstrap), then the admin and the node
// (inplace.EditRunningCopy), steps 1 and 2 of the rewrite envoy/inplace
// draws, on the bootstrap decoded once and encoded once (decoding and
// encoding a bootstrap of 1,000 TLS filter chains took 35 and about
// 100 ms, and each step did both); the tree goes on with the copy to the
// step after it (step 3, the split). A .pb bootstrap, or one that does not
// parse (Envoy's validation says why), is copied as it is.
func (c ProxyConfig) rewrite() epochfiles.Rewrite {
	admin := c.agentAdmin()
	return func(data []byte, name, runDir string) ([]byte, *yaml.Node, error) {
		if !bootyaml.Rewritable(name) {
			return data, nil, nil
		}
		doc := c.Decoded.Take(data)
		if doc == nil {
			doc = &yaml.Node{}
			if err := bootyaml.Decode(data, doc); err != nil {
				if le := (*bootyaml.LimitError)(nil); errors.As(err, &le) {
					return nil, nil, fmt.Errorf("%s: %w", name, le)
				}
				return data, nil, nil
			}
		}
		changed := false
		if c.RewriteBootstrap != nil {
			var err error
			if changed, err = c.RewriteBootstrap(doc, runDir); err != nil {
				return nil, nil, err
			}
		}
		edits, err := inplace.EditRunningCopy(doc, admin, changed)
		if err != nil {
			return nil, nil, err
		}
		if !changed && edits.Empty() {
			return data, doc, nil
		}
		out, err := bootyaml.Encode(doc, name)
		return out, doc, err
	}
}

// agentAdmin is where the running copy's admin must be: where the agent
// reaches it (inplace.RunningCopy); zero with no admin configured.
func (c ProxyConfig) agentAdmin() inplace.AgentAdmin {
	switch {
	case c.AdminSocket != "":
		return inplace.AgentAdmin{Socket: c.AdminSocket}
	case c.AdminPort != 0:
		return inplace.AgentAdmin{Host: c.localHost(), Port: int(c.AdminPort)}
	}
	return inplace.AgentAdmin{}
}

// newAdmin returns the client for the admin API the configuration names.
func (c ProxyConfig) newAdmin() *adminapi.Client {
	if c.AdminSocket != "" {
		return adminapi.NewUnix(c.AdminSocket)
	}
	return adminapi.New(c.localHost(), int(c.AdminPort))
}

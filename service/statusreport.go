//go:build linux

package service

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/envoy-agent/envoy-agent/envoy"
)

// StatusSchemaVersion is the version of the JSON that GET /status and
// `envoy-agent status --json` give. Fields may be added within a version;
// a field is never renamed, retyped or removed without a new version.
const StatusSchemaVersion = 1

// Agent states, as the status report gives them.
const (
	StateStarting  = "starting"  // Envoy is not LIVE yet
	StateLive      = "live"      // Envoy serves
	StateReloading = "reloading" // a hot restart is under way; the serving epoch serves
	StateDraining  = "draining"  // a stop (or POST /drain) is draining Envoy
	StateStopped   = "stopped"   // no agent answers (given by the client only)
)

// statusAdminTimeout bounds each of the admin calls one status report makes:
// a wedged Envoy must not wedge `envoy-agent status` too.
const statusAdminTimeout = 2 * time.Second

// StatusReport is the answer of GET /status: what the agent and its Envoy
// are doing. README.md documents every field.
type StatusReport struct {
	SchemaVersion int           `json:"schema_version"`
	State         string        `json:"state"`
	Error         string        `json:"error,omitempty"` // state "stopped": why the agent could not be reached
	Agent         AgentStatus   `json:"agent"`
	Envoy         *EnvoyStatus  `json:"envoy,omitempty"`
	Epochs        []EpochStatus `json:"epochs"`
	Drain         *DrainStatus  `json:"drain,omitempty"`
	LastReload    *ReloadStatus `json:"last_reload,omitempty"`
	Reloads       ReloadCounts  `json:"reloads"`
}

// AgentStatus is the agent itself.
type AgentStatus struct {
	Version       string  `json:"version,omitempty"`
	Pid           int     `json:"pid,omitempty"`
	Instance      string  `json:"instance,omitempty"`
	Config        string  `json:"config"`
	Started       string  `json:"started,omitempty"` // RFC 3339
	UptimeSeconds float64 `json:"uptime_seconds,omitempty"`
	StatusAddress string  `json:"status_address,omitempty"`
}

// EnvoyStatus is the serving Envoy as its admin API describes it; a field
// the admin API did not give is empty, and AdminError says why.
type EnvoyStatus struct {
	Version           string           `json:"version"`
	HotRestartVersion string           `json:"hot_restart_version"`
	ServerState       string           `json:"server_state"` // /server_info's state: LIVE, DRAINING, ...
	Admin             string           `json:"admin"`
	BaseID            uint32           `json:"base_id"`
	ServingEpoch      int              `json:"serving_epoch"`
	ActiveConnections *int             `json:"active_connections"` // null when unknown
	Listeners         []envoy.Listener `json:"listeners"`
	AdminError        string           `json:"admin_error,omitempty"`
}

// EpochStatus is one running Envoy process.
type EpochStatus struct {
	Epoch      int     `json:"epoch"`
	Pid        int     `json:"pid"`
	Role       string  `json:"role"` // serving, draining, starting
	Started    string  `json:"started"`
	AgeSeconds float64 `json:"age_seconds"`
	// For a draining epoch replaced by a hot restart: when it was replaced,
	// and the seconds left until its drain ends and until it is told to exit.
	Replaced           string   `json:"replaced,omitempty"`
	DrainEndsInSeconds *float64 `json:"drain_ends_in_seconds,omitempty"`
	ExitsInSeconds     *float64 `json:"exits_in_seconds,omitempty"`
}

// DrainStatus is the agent's drain (a stop, or POST /drain's endless one).
type DrainStatus struct {
	Kind              string  `json:"kind"` // "stop" or "endless"
	Started           string  `json:"started"`
	ElapsedSeconds    float64 `json:"elapsed_seconds"`
	RemainingSeconds  float64 `json:"remaining_seconds"`  // until termination_drain_duration; 0 for endless
	ActiveConnections *int    `json:"active_connections"` // at the last poll; null when unknown
	Done              bool    `json:"done"`
	Reason            string  `json:"reason,omitempty"` // why it ended, once done
}

// ReloadStatus is the last reload's outcome.
type ReloadStatus struct {
	At     string `json:"at"` // when it began, RFC 3339
	TookMs int64  `json:"took_ms"`
	OK     bool   `json:"ok"`
	Epoch  int    `json:"epoch"`           // the serving epoch afterwards
	Error  string `json:"error,omitempty"` // why it failed
}

// ReloadCounts counts the reloads since the agent started.
type ReloadCounts struct {
	OK     int `json:"ok"`
	Failed int `json:"failed"`
}

// statusRecord keeps what the status report needs from the supervisor's
// events (a start, reloads, a drain).
type statusRecord struct {
	mu         sync.Mutex
	version    string
	started    time.Time
	lastReload *ReloadStatus
	counts     ReloadCounts
	drain      *DrainStatus
	drainStart time.Time
	drainLimit time.Duration // termination_drain_duration of a stop's drain
}

func (r *statusRecord) agentStarted(version string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.version, r.started = version, time.Now()
}

func (r *statusRecord) reloadDone(start time.Time, res ReloadResult) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lastReload = &ReloadStatus{At: start.UTC().Format(time.RFC3339Nano), TookMs: res.TookMs, OK: res.OK, Epoch: res.Epoch, Error: res.Error}
	if res.OK {
		r.counts.OK++
	} else {
		r.counts.Failed++
	}
}

// drainBegan records a drain: kind "stop", bounded by limit, or "endless".
func (r *statusRecord) drainBegan(kind string, limit time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.drain != nil {
		return
	}
	r.drainStart, r.drainLimit = time.Now(), limit
	r.drain = &DrainStatus{Kind: kind, Started: r.drainStart.UTC().Format(time.RFC3339Nano)}
}

func (r *statusRecord) drainProgress(p envoy.DrainProgress) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.drain == nil {
		r.drainStart = time.Now().Add(-p.Elapsed)
		r.drain = &DrainStatus{Kind: "stop", Started: r.drainStart.UTC().Format(time.RFC3339Nano)}
	}
	d := r.drain
	d.ElapsedSeconds, d.RemainingSeconds = seconds(p.Elapsed), seconds(p.Remaining)
	d.ActiveConnections = nil
	if p.ActiveConnections >= 0 {
		n := p.ActiveConnections
		d.ActiveConnections = &n
	}
	if p.Done {
		d.Done, d.Reason, d.RemainingSeconds = true, p.Reason, 0
	}
}

func seconds(d time.Duration) float64 { return float64(d.Milliseconds()) / 1000 }

// statusReport builds the report at now.
func (s *supervisor) statusReport(ctx context.Context) StatusReport {
	cfg := s.config()
	now := time.Now()
	r := &s.report
	r.mu.Lock()
	rep := StatusReport{
		SchemaVersion: StatusSchemaVersion,
		Agent: AgentStatus{Version: r.version, Pid: os.Getpid(), Instance: os.Getenv(EnvInstance), Config: absPath(cfg.File),
			Started: r.started.UTC().Format(time.RFC3339Nano), UptimeSeconds: seconds(now.Sub(r.started)),
			StatusAddress: net.JoinHostPort(cfg.Agent.Localhost, strconv.Itoa(int(cfg.Agent.StatusPort)))},
		LastReload: r.lastReload,
		Reloads:    r.counts,
	}
	if r.drain != nil {
		d := *r.drain
		if !d.Done {
			// Between the drain's polls (and before the first), the time is
			// now's; the connection count stays the last poll's.
			elapsed := now.Sub(r.drainStart)
			d.ElapsedSeconds = seconds(elapsed)
			if d.Kind == "stop" && r.drainLimit > 0 {
				d.RemainingSeconds = seconds(max(r.drainLimit-elapsed, 0))
			}
		}
		rep.Drain = &d
	}
	r.mu.Unlock()

	switch {
	case s.agent.Draining():
		rep.State = StateDraining
	case s.isReloading():
		rep.State = StateReloading
	case s.isLive():
		rep.State = StateLive
	default:
		rep.State = StateStarting
	}

	drainFor, exitAfter := s.proxy.Timings()
	rep.Epochs = []EpochStatus{}
	for _, e := range s.proxy.Epochs() {
		es := EpochStatus{Epoch: e.Epoch, Pid: e.Pid, Role: e.Role, Started: e.Started.UTC().Format(time.RFC3339Nano),
			AgeSeconds: seconds(now.Sub(e.Started))}
		if e.Role == envoy.RoleServing && rep.State == StateDraining {
			es.Role = envoy.RoleDraining
		}
		if e.Role == envoy.RoleDraining && !e.Since.IsZero() {
			es.Replaced = e.Since.UTC().Format(time.RFC3339Nano)
			drainLeft := max(seconds(e.Since.Add(drainFor).Sub(now)), 0)
			exitLeft := max(seconds(e.Since.Add(exitAfter).Sub(now)), 0)
			es.DrainEndsInSeconds, es.ExitsInSeconds = &drainLeft, &exitLeft
		}
		rep.Epochs = append(rep.Epochs, es)
	}

	es := &EnvoyStatus{
		HotRestartVersion: s.hotRestartVersion(),
		Admin:             cfg.adminAddress(),
		BaseID:            cfg.Envoy.BaseID,
		ServingEpoch:      s.proxy.Epoch(),
		Listeners:         []envoy.Listener{},
	}
	admin := s.proxy.Admin()
	call := func(f func(context.Context) error) error {
		c, cancel := context.WithTimeout(ctx, statusAdminTimeout)
		defer cancel()
		return f(c)
	}
	err := call(func(c context.Context) error {
		si, err := admin.ServerInfo(c)
		if err == nil {
			es.Version, es.ServerState = si.Version, si.State
			if si.HotRestartVersion != "" {
				es.HotRestartVersion = si.HotRestartVersion
			}
		}
		return err
	})
	if err == nil {
		err = call(func(c context.Context) error {
			n, err := admin.ActiveConnections(c)
			if err == nil {
				es.ActiveConnections = &n
			}
			return err
		})
	}
	if err == nil {
		err = call(func(c context.Context) error {
			ls, err := admin.Listeners(c)
			if err == nil {
				es.Listeners = ls
			}
			return err
		})
	}
	if err != nil {
		es.AdminError = err.Error()
	}
	rep.Envoy = es
	return rep
}

// handleStatus is GET /status: the status report as JSON.
func (s *supervisor) handleStatus(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed: use GET", http.StatusMethodNotAllowed)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(s.statusReport(r.Context()))
}

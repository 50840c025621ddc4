//go:build linux

package control

import (
	"time"
)

// Listener is one of Envoy's active listeners, as GET /listeners gives it.
type Listener struct {
	Name    string `json:"name"`
	Address string `json:"address"` // host:port, a pipe path, or "" when Envoy gives none
	// NamedByAgent: the bootstrap leaves the listener unnamed, and Name is
	// the one the agent gave it in the files Envoy runs (from its address).
	NamedByAgent bool `json:"named_by_agent,omitempty"`
}

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
	// Files says whether the agent's TOML and Envoy's bootstrap on disk are
	// what Envoy serves.
	Files *FilesStatus `json:"files,omitempty"`
	// Certificates are those the bootstrap names by file, served to Envoy
	// as secrets and watched for renewals (envoy/certs).
	Certificates []CertificateStatus `json:"certificates,omitempty"`
	// CertificatesPolled says why renewals of some certificates are read
	// every 30 s instead of at once (inotify's limits reached); "" when
	// every folder is watched.
	CertificatesPolled string `json:"certificates_polled,omitempty"`
}

// CertificateStatus is a certificate in use. It holds no key material.
type CertificateStatus struct {
	File     string   `json:"file"`
	KeyFile  string   `json:"key_file,omitempty"`
	CA       bool     `json:"ca,omitempty"` // a trusted CA bundle (its first certificate)
	Subject  string   `json:"subject"`
	DNSNames []string `json:"dns_names,omitempty"`
	Serial   string   `json:"serial"`
	NotAfter string   `json:"not_after"` // RFC 3339
	DaysLeft int      `json:"days_left"` // negative once expired
	// Error is a renewal refused (a key that does not match, an empty
	// file), naming the file, while this certificate goes on serving.
	Error string `json:"error,omitempty"`
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
	// Unit is the systemd unit the agent runs as, "" outside systemd.
	Unit string `json:"unit,omitempty"`
	// Restarts is systemd's NRestarts of Unit: how often systemd restarted
	// it (its watchdog, or Restart=on-failure). `envoy-agent status` asks
	// systemctl for it; null when it cannot.
	Restarts *int `json:"restarts,omitempty"`
	// PreviousExit is why the agent's previous run ended, as it recorded it
	// in the unit's state directory; null outside systemd or before any end.
	PreviousExit *PreviousExit `json:"previous_exit,omitempty"`
}

// PreviousExit is how an earlier run of the agent ended.
type PreviousExit struct {
	At     string `json:"at"`     // RFC 3339
	Pid    int    `json:"pid"`    // that run's agent pid
	Reason string `json:"reason"` // the first line of its error, or "stopped"
}

// EnvoyStatus is the serving Envoy as its admin API describes it; a field
// the admin API did not give is empty, and AdminError says why.
type EnvoyStatus struct {
	Version           string     `json:"version"`
	HotRestartVersion string     `json:"hot_restart_version"`
	ServerState       string     `json:"server_state"` // /server_info's state: LIVE, DRAINING, ...
	Admin             string     `json:"admin"`
	BaseID            uint32     `json:"base_id"`
	ServingEpoch      int        `json:"serving_epoch"`
	ActiveConnections *int       `json:"active_connections"` // null when unknown
	Listeners         []Listener `json:"listeners"`
	AdminError        string     `json:"admin_error,omitempty"`
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
	// Path and Changed are ReloadResult's (reload_method "auto" only).
	Path    string `json:"path,omitempty"`
	Changed string `json:"changed,omitempty"`
	// Outcome is one of the Outcome constants.
	Outcome string `json:"outcome,omitempty"`
	// GuardEnds is when the reload guard stops watching the reload, with
	// OutcomeGuarding (RFC 3339).
	GuardEnds string `json:"guard_ends,omitempty"`
	// Rollback is the reload guard's rollback, with OutcomeRolledBack.
	Rollback *RollbackStatus `json:"rollback,omitempty"`
}

// The outcomes of a reload (ReloadStatus.Outcome).
const (
	// OutcomeOK: the new configuration serves (and the reload guard, when
	// on, saw no regression).
	OutcomeOK = "ok"
	// OutcomeFailed: refused or failed; the configuration before serves.
	OutcomeFailed = "failed"
	// OutcomeGuarding: the new configuration serves and the reload guard
	// watches it until GuardEnds.
	OutcomeGuarding = "guarding"
	// OutcomeRolledBack: the reload guard saw a regression and put the
	// configuration before back; Rollback says why.
	OutcomeRolledBack = "rolled_back"
)

// RollbackStatus is the reload guard's rollback of a reload.
type RollbackStatus struct {
	At     string `json:"at"`     // when the guard called the regression, RFC 3339
	Reason string `json:"reason"` // the first finding, as a sentence
	// Findings are every signal that was past its threshold, most telling
	// first.
	Findings []GuardFinding `json:"findings"`
	// Path is how the configuration before came back: PathInPlace (the
	// previous resources put back in the same Envoy), PathHotRestart (a new
	// epoch of the previous bootstrap copy) or PathDrainRestart (the same,
	// where hot restart is compiled out).
	Path   string `json:"path"`
	TookMs int64  `json:"took_ms"` // from the regression until the configuration before served
	// Error is why the rollback failed: the reloaded configuration still
	// serves.
	Error string `json:"error,omitempty"`
}

// GuardFinding is one signal past its threshold (package guard's Finding).
type GuardFinding struct {
	Signal  string `json:"signal"`            // downstream_5xx, upstream_5xx, connect_failures, timeouts, healthy_hosts, listener_gone, listener_refused, url
	Subject string `json:"subject,omitempty"` // the cluster, the listener's address or the URL
	Before  string `json:"before"`            // its figures before the reload, "0.4% of 2410 requests"
	After   string `json:"after"`             // and after
}

// FilesStatus says whether the files on disk are what Envoy serves: the
// agent's TOML and Envoy's bootstrap as they were when the configuration
// in force came in (at the start or by the last reload that took one).
type FilesStatus struct {
	State string `json:"state"` // FilesInSync, FilesDiffer or FilesUnknown
	// ServedSince is when the configuration in force came in, RFC 3339.
	ServedSince string     `json:"served_since,omitempty"`
	Config      FileStatus `json:"config"`
	Bootstrap   FileStatus `json:"bootstrap"`
	// Reason says why they differ (the last reload of these files failed,
	// was refused or rolled back; an edit not reloaded yet), or why the
	// agent cannot tell.
	Reason string `json:"reason,omitempty"`
}

// The states of FilesStatus.
const (
	FilesInSync  = "in_sync"
	FilesDiffer  = "differ"
	FilesUnknown = "unknown"
)

// FileStatus is one of the files.
type FileStatus struct {
	Path string `json:"path"`
	// ServedSHA256 is the SHA-256 of the file's bytes that Envoy serves,
	// "" when the agent does not know them; SHA256 of those on disk now.
	ServedSHA256 string `json:"served_sha256,omitempty"`
	SHA256       string `json:"sha256,omitempty"`
	Differs      bool   `json:"differs"`
	Modified     string `json:"modified,omitempty"` // the file's modification time, RFC 3339
	Error        string `json:"error,omitempty"`    // why it could not be read
}

// ReloadCounts counts the reloads since the agent started.
type ReloadCounts struct {
	OK     int `json:"ok"`
	Failed int `json:"failed"`
	// RolledBack counts the reloads (of those OK) the reload guard rolled
	// back.
	RolledBack int `json:"rolled_back"`
}

// StatusAdminTimeout bounds each of the admin calls one status report makes:
// a wedged Envoy must not wedge `envoy-agent status` too.
const StatusAdminTimeout = 2 * time.Second

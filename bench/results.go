package main

import (
	"encoding/json"
	"fmt"
)

// Results is everything one run measured; results.json is this, indented.
// Durations are in milliseconds, sizes in bytes or KiB as named.
type Results struct {
	Date     string            `json:"date"`
	Host     Host              `json:"host"`
	Start    *StartResult      `json:"start,omitempty"`
	Reload   *ReloadResult     `json:"reload,omitempty"`
	Stop     *StopResult       `json:"stop,omitempty"`
	Overhead *OverheadResult   `json:"overhead,omitempty"`
	Growth   *GrowthResult     `json:"growth,omitempty"`
	InPlace  *InPlaceResult    `json:"in_place,omitempty"`
	Scale    *ScaleResult      `json:"scale,omitempty"`
	Errors   map[string]string `json:"errors,omitempty"` // scenario: why it could not run
}

// Host is where the run happened.
type Host struct {
	Cores         int     `json:"cores"`
	LoadAvgBefore string  `json:"loadavg_before"`
	LoadAvgAfter  string  `json:"loadavg_after"`
	Go            string  `json:"go"`
	Envoy         string  `json:"envoy"`
	Agent         string  `json:"agent"`
	AgentBinary   string  `json:"agent_binary"`
	EnvoyBinary   string  `json:"envoy_binary"`
	Seconds       float64 `json:"seconds"`
}

// StartResult is scenario 1: exec to ready.
type StartResult struct {
	Starts     int       `json:"starts"`
	AgentMs    []float64 `json:"agent_ms"`    // exec to READY=1 on the notify socket
	BaselineMs []float64 `json:"baseline_ms"` // exec to the first 200 of /ready, polled every 1ms
	Agent      Dist      `json:"agent"`
	Baseline   Dist      `json:"baseline"`
	// The floor (bench/launcher): a minimal Go supervisor's exec to READY=1,
	// timed in the same alternation; empty when the run had no -launcher.
	FloorMs       []float64 `json:"floor_ms,omitempty"`
	Floor         Dist      `json:"floor"`
	MedianDiffMs  float64   `json:"median_diff_ms"`
	MaxDiffMs     float64   `json:"max_diff_ms"`
	AgentPollNote string    `json:"agent_poll_note"`
	// Extra agent starts with the bench polling Envoy's /ready every 1ms
	// too: ProbeGap is Envoy LIVE (as the probe saw it) to READY=1.
	ProbeStarts int  `json:"probe_starts"`
	ProbeTotal  Dist `json:"probe_total"`
	ProbeGap    Dist `json:"probe_live_to_ready"`
}

// LoadStats sums up a load's samples.
type LoadStats struct {
	Sent     int            `json:"sent"`
	OK       int            `json:"ok"`
	Failed   int            `json:"failed"`
	FailedBy map[string]int `json:"failed_by,omitempty"`
	Latency  Dist           `json:"latency"` // every request, failed ones included (time to fail)
	Versions map[string]int `json:"versions,omitempty"`
}

// Bucket is one slice of a load's timeline, by send time.
type Bucket struct {
	OK     int `json:"ok"`
	Failed int `json:"failed"`
}

// Event is one config change, in ms since the load began.
type Event struct {
	StartMs float64 `json:"start_ms"`
	EndMs   float64 `json:"end_ms"`
	OK      bool    `json:"ok"`
	Error   string  `json:"error,omitempty"`
}

// ReloadSide is one side of scenario 2.
type ReloadSide struct {
	Available    bool      `json:"available"`
	NotAvailable string    `json:"not_available,omitempty"`
	Method       string    `json:"method"`
	Changes      int       `json:"changes"`
	ChangesOK    int       `json:"changes_ok"`
	ChangeMs     Dist      `json:"change_ms"` // how long each reload or restart took
	Load         LoadStats `json:"load"`
	VersionsSeen int       `json:"versions_seen"` // distinct x-config-version values answered
	VersionsWant int       `json:"versions_want"`
	LoadMs       float64   `json:"load_ms"`
	Buckets      []Bucket  `json:"buckets"`
	Events       []Event   `json:"events"`
	AgentHWMKiB  int       `json:"agent_vmhwm_kib,omitempty"` // the agent's peak RSS after the reloads
	// Steps is the agent's own breakdown of its successful reloads, from
	// its log (load_ms, copy_ms, validate_ms, versions_ms, hot_restart_ms,
	// took_ms).
	Steps map[string]Dist `json:"steps,omitempty"`
	// ValidateMs and HotRestartMs split the bare hot restart's changes:
	// `envoy --mode validate`, then exec of epoch N+1 to /server_info LIVE.
	ValidateMs    *Dist  `json:"validate_ms,omitempty"`
	HotRestartMs  *Dist  `json:"hot_restart_ms,omitempty"`
	EnvoyExitNote string `json:"envoy_exit_note,omitempty"`
}

// ReloadResult is scenario 2.
type ReloadResult struct {
	Workers  int        `json:"workers"`
	RateRPS  float64    `json:"rate_rps"`
	BucketMs int        `json:"bucket_ms"`
	GapMs    float64    `json:"gap_ms"` // pause after each change
	Agent    ReloadSide `json:"agent"`
	Baseline ReloadSide `json:"baseline"`
	// BareHotRestart is the floor the agent's reload is held to: a bare
	// validate and a hot restart by hand.
	BareHotRestart ReloadSide `json:"bare_hot_restart"`
}

// StopSide is one side of scenario 3.
type StopSide struct {
	SlowInFlight     int            `json:"slow_in_flight"`
	SlowFailed       int            `json:"slow_failed"`
	SlowFailedBy     map[string]int `json:"slow_failed_by,omitempty"`
	LoadBeforeSignal LoadStats      `json:"load_before_sigterm"`
	LoadDuringDrain  LoadStats      `json:"load_sigterm_to_exit"` // sent between SIGTERM and the exit
	ExitMs           float64        `json:"exit_ms"`              // SIGTERM to the process's exit
	FirstFailMs      float64        `json:"first_fail_ms"`        // the first failed load request after SIGTERM, by send time; -1: none
	ExitStatus       string         `json:"exit_status"`
}

// ZeroConnResult is the exit_on_zero_active_connections part of scenario 3.
type ZeroConnResult struct {
	MinDrainMs   float64 `json:"min_drain_ms"`
	PollMs       float64 `json:"poll_ms"`
	LastCloseMs  float64 `json:"last_close_ms"` // since SIGTERM
	ExitMs       float64 `json:"exit_ms"`       // since SIGTERM
	DelayMs      float64 `json:"delay_ms"`      // exit - max(last close, min drain)
	SlowInFlight int     `json:"slow_in_flight"`
	SlowFailed   int     `json:"slow_failed"`
	ExitStatus   string  `json:"exit_status"`
}

// StopResult is scenario 3.
type StopResult struct {
	SlowMs           float64        `json:"slow_ms"`
	TerminationDrain float64        `json:"termination_drain_ms"`
	MinDrain         float64        `json:"min_drain_ms"`
	Agent            StopSide       `json:"agent"`
	Baseline         StopSide       `json:"baseline"`
	ExitOnZero       ZeroConnResult `json:"exit_on_zero"`
}

// OverheadResult is scenario 4: the agent process alone, and its Envoy
// beside it for scale.
type OverheadResult struct {
	IdleS             float64 `json:"idle_s"`
	AgentHWMKiB       int     `json:"agent_vmhwm_kib"`
	AgentRSSKiB       int     `json:"agent_vmrss_kib"`
	AgentThreads      int     `json:"agent_threads"`
	AgentCPUSeconds   float64 `json:"agent_cpu_s"`       // schedstat, ns precision
	AgentCPUTicksSecs float64 `json:"agent_cpu_ticks_s"` // utime+stime, 10ms ticks
	AgentCPUPercent   float64 `json:"agent_cpu_percent_of_core"`
	EnvoyHWMKiB       int     `json:"envoy_vmhwm_kib"`
	EnvoyCPUSeconds   float64 `json:"envoy_cpu_s"`
	EnvoyCPUPercent   float64 `json:"envoy_cpu_percent_of_core"`
	WatchdogPings     int     `json:"watchdog_pings"`
	AgentBinaryBytes  int64   `json:"agent_binary_bytes"`
	EnvoyBinaryBytes  int64   `json:"envoy_binary_bytes"`
}

// GrowthRow is scenario 5 for one listener count.
type GrowthRow struct {
	Listeners   int     `json:"listeners"`
	StartMs     float64 `json:"start_ms"` // exec to /ready 200
	StatsBytes  int     `json:"stats_bytes"`
	StatsLines  int     `json:"stats_lines"`
	Parsed      int     `json:"parsed_connections"`
	StatsRounds int     `json:"stats_rounds"` // stats counts timed (fewer at 10,000 listeners)
	Held        int     `json:"held_connections"`
	Get         Dist    `json:"stats_get"`  // GET /stats?filter=... on a fresh connection
	Parse       Dist    `json:"parse"`      // adminapi.ParseActiveConnections
	Poll        Dist    `json:"stats_poll"` // both: one stats count (the drain poll once also read it)
	Kernel      Dist    `json:"drain_poll"` // conncount.Counter.Count: one drain poll
	FullCount   Dist    `json:"full_count"` // a count with nothing remembered (a fresh DownstreamCounter)
	PollFull    int     `json:"poll_full"`  // how many of the drain polls were full counts
	Ready       Dist    `json:"ready"`      // GET /ready on a fresh connection
}

// GrowthResult is scenario 5.
type GrowthResult struct {
	Iterations int         `json:"iterations"`
	Rows       []GrowthRow `json:"rows"`
}

// IdleStats sums up the requests of workers that leave their kept-alive
// connection idle between requests.
type IdleStats struct {
	Sent            int            `json:"sent"`
	Failed          int            `json:"failed"`
	AfterIdle       int            `json:"after_idle"`        // the first request after an idle pause
	FailedAfterIdle int            `json:"failed_after_idle"` // of them, failed
	FailedBy        map[string]int `json:"failed_by,omitempty"`
}

// InPlaceSide is one reload path of scenario 6, under load: the reload
// scenario's figures (ReloadSide: the load on the changed listener, time
// per change) and what tells the paths apart.
type InPlaceSide struct {
	ReloadSide
	ReloadMethod string `json:"reload_method"` // [agent] reload_method: "hot_restart" or "auto"
	// PathTaken is how many reloads answered as the path does
	// ("reloaded in place: ..." or "reloaded: epoch N ..."); OtherAnswer is
	// the first answer that did not.
	PathTaken   int       `json:"path_taken"`
	OtherAnswer string    `json:"other_answer,omitempty"`
	Idle        IdleStats `json:"idle"` // idle keep-alive connections to the listener the edit leaves alone
	// EnvoyPids is how many serving Envoy processes were seen from the
	// first sample to the end of the load (1: the pid never changed).
	EnvoyPids int `json:"envoy_pids"`
	// SteadyRSSKiB is the serving Envoys' VmRSS summed, median of the
	// samples under load before the first reload; PeakRSSKiB the largest
	// sum from the first reload to the end of the load.
	SteadyRSSKiB int `json:"steady_rss_kib"`
	PeakRSSKiB   int `json:"peak_rss_kib"`
}

// InPlaceScaleSide is one reload path of scenario 6 with many listeners,
// no load.
type InPlaceScaleSide struct {
	Listeners    int             `json:"listeners"`
	Method       string          `json:"method"`
	ReloadMethod string          `json:"reload_method"`
	StartMs      float64         `json:"start_ms"` // the agent's exec until READY=1
	Changes      int             `json:"changes"`
	ChangesOK    int             `json:"changes_ok"`
	PathTaken    int             `json:"path_taken"`
	OtherAnswer  string          `json:"other_answer,omitempty"`
	ChangeMs     Dist            `json:"change_ms"`
	Steps        map[string]Dist `json:"steps,omitempty"`
	// ServedAtReturn is how many reloads the first request after
	// `envoy-agent reload` returned already answered with the new route.
	ServedAtReturn int `json:"served_at_return"`
}

// InPlaceResult is scenario 6: the agent's reload by hot restart against
// its reload in place, of the same edit.
type InPlaceResult struct {
	Workers          int              `json:"workers"`
	RateRPS          float64          `json:"rate_rps"`
	IdlePausesMs     []float64        `json:"idle_pauses_ms"` // one idle worker each
	GapMs            float64          `json:"gap_ms"`
	ParentShutdownMs float64          `json:"parent_shutdown_ms"`
	DrainMs          float64          `json:"drain_ms"`
	HotRestart       InPlaceSide      `json:"hot_restart"`
	InPlace          InPlaceSide      `json:"in_place"`
	ScaleHotRestart  InPlaceScaleSide `json:"scale_hot_restart"`
	ScaleInPlace     InPlaceScaleSide `json:"scale_in_place"`
}

// ScaleResult is scenario 7: the agent at scale, each part beside a bare
// Envoy doing the same.
type ScaleResult struct {
	Certs      ScaleCerts     `json:"certs"`
	Listeners  ScaleListeners `json:"listeners"`
	SmallStart ScaleStart     `json:"small_start"`
}

// ScaleCerts is a bootstrap of N TLS filter chains, one certificate each,
// named by file, chosen by SNI.
type ScaleCerts struct {
	N      int      `json:"n"`
	Starts int      `json:"starts"` // per side, taking turns
	Agent  CertSide `json:"agent"`
	Bare   CertSide `json:"bare"`
}

// CertSide is one side of ScaleCerts.
type CertSide struct {
	StartsOK int    `json:"starts_ok"`
	Failure  string `json:"failure,omitempty"` // the first start that failed, and why
	// ReadyMs: exec to READY=1 (agent) or /ready 200 (bare); ServedMs:
	// exec until a handshake with every name got that name's certificate.
	ReadyMs  Dist     `json:"ready_ms"`
	ServedMs Dist     `json:"served_ms"`
	Renewal  *Renewal `json:"renewal,omitempty"`
}

// Renewal is one certificate replaced on disk (both files renamed into
// place) while Envoy serves.
type Renewal struct {
	Name     string  `json:"name"`
	Served   bool    `json:"served"`    // new handshakes got the new certificate within RenewalWait
	ServedMs float64 `json:"served_ms"` // from the rename to the first handshake that did
	WaitMs   float64 `json:"wait_ms"`
	SamePid  bool    `json:"same_pid"`
	Reloads  int     `json:"reloads"` // the agent's reloads meanwhile (its log)
	Note     string  `json:"note,omitempty"`
}

// ScaleListeners is a bootstrap of N HTTP listeners, each with its own
// route, and route edits of the first, a middle and the last.
type ScaleListeners struct {
	N             int            `json:"n"`
	AgentStartMs  float64        `json:"agent_start_ms"` // exec to READY=1
	BareStartMs   float64        `json:"bare_start_ms"`  // exec to /ready 200, the LDS file's listeners
	AgentFailure  string         `json:"agent_failure,omitempty"`
	BareFailure   string         `json:"bare_failure,omitempty"`
	Edits         []ListenerEdit `json:"edits"`
	BootstrapEdit EditSide       `json:"bootstrap_edit"` // the agent's reload of an edit outside listeners and clusters
}

// ListenerEdit is one listener's route edit, each way.
type ListenerEdit struct {
	Label string   `json:"label"` // first, middle, last
	Index int      `json:"index"`
	Agent EditSide `json:"agent"` // `envoy-agent reload` of the edited bootstrap
	Bare  EditSide `json:"bare"`  // a bare Envoy's update of the same edit from its LDS file
}

// EditSide is one edit applied one way, under a load of raw HTTP/1.1
// workers on the edited listener that do not retry.
type EditSide struct {
	Done    bool    `json:"done"`
	Error   string  `json:"error,omitempty"`
	Ms      float64 `json:"ms"`   // agent: `envoy-agent reload` returned; bare: the rename until the new route answered
	Path    string  `json:"path"` // the agent's answer: "in place" or "hot restart: why"
	SamePid bool    `json:"same_pid"`
	// ServedAtReturn: the first request after `envoy-agent reload` returned
	// answered the new route.
	ServedAtReturn bool            `json:"served_at_return"`
	Load           LoadStats       `json:"load"`
	Steps          map[string]Dist `json:"steps,omitempty"` // the agent's log of this reload
}

// ScaleStart is the small bootstrap's start, agent against bare Envoy,
// taking turns: Runs runs of PerRun starts each.
type ScaleStart struct {
	Runs      int       `json:"runs"`
	PerRun    int       `json:"per_run"`
	RunRatios []float64 `json:"run_ratios"` // each run's agent median / bare median
	Agent     Dist      `json:"agent"`
	Bare      Dist      `json:"bare"`
	Error     string    `json:"error,omitempty"`
}

// JSON is results.json.
func (r *Results) JSON() ([]byte, error) {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("results.json: %w", err)
	}
	return append(b, '\n'), nil
}

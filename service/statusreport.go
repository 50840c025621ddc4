//go:build linux

package service

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/envoy-agent/envoy-agent/envoy"
	"github.com/envoy-agent/envoy-agent/envoy/epochfiles"
	"github.com/envoy-agent/envoy-agent/internal/safefile"
	"github.com/envoy-agent/envoy-agent/service/config"
	"github.com/envoy-agent/envoy-agent/service/control"
)

// EnvInstance is the variable through which envoy-agent@.service tells the
// agent its instance name (Environment=ENVOY_AGENT_INSTANCE=%i): the status
// report, the claim files and the last exit's record name the instance.
const EnvInstance = "ENVOY_AGENT_INSTANCE"

// absPath is p made absolute, or p when that fails: the configuration's
// path as the status report and the claim files name it.
func absPath(p string) string {
	if abs, err := filepath.Abs(p); err == nil {
		return abs
	}
	return p
}

// statusRecord keeps what the status report needs from the supervisor's
// events (a start, reloads, a drain).
type statusRecord struct {
	mu         sync.Mutex
	version    string
	started    time.Time
	lastReload *control.ReloadStatus
	lastGuard  uint64      // the reload guard's window of lastReload, 0 for none
	tried      servedFiles // the files lastReload read, as far as it read them
	rolledBack []rolledBack
	counts     control.ReloadCounts
	drain      *control.DrainStatus
	drainStart time.Time
	drainLimit time.Duration         // termination_drain_duration of a stop's drain
	unit       string                // the systemd unit the agent runs as
	prevExit   *control.PreviousExit // how the previous run ended
}

// systemdUnit is the unit the agent runs as under systemd (INVOCATION_ID
// set): the last element of its cgroup v2 path; "" otherwise.
func systemdUnit() string {
	if os.Getenv("INVOCATION_ID") == "" {
		return ""
	}
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return ""
	}
	for line := range strings.Lines(string(data)) {
		if path, ok := strings.CutPrefix(strings.TrimSpace(line), "0::"); ok {
			if unit := path[strings.LastIndexByte(path, '/')+1:]; strings.HasSuffix(unit, ".service") {
				return unit
			}
		}
	}
	return ""
}

// previousRun records the systemd unit the agent runs as and how the
// previous run ended (nil: not known).
func (r *statusRecord) previousRun(unit string, prev *control.PreviousExit) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.unit, r.prevExit = unit, prev
}

func (r *statusRecord) agentStarted(version string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.version, r.started = version, time.Now()
}

// reloadDone records a reload's answer, begun at start, and the files it
// read (tried).
func (r *statusRecord) reloadDone(start time.Time, res control.ReloadResult, tried servedFiles) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lastReload = &control.ReloadStatus{At: start.UTC().Format(time.RFC3339Nano), TookMs: res.TookMs, OK: res.OK, Epoch: res.Epoch, Error: res.Error,
		Path: res.Path, Changed: res.Changed, Outcome: cmp.Or(res.Outcome, control.OutcomeOK), GuardEnds: res.GuardEnds}
	r.lastGuard, r.tried = res.GuardWindow, tried
	if !res.OK {
		r.lastReload.Outcome = control.OutcomeFailed
	}
	if res.OK {
		r.counts.OK++
	} else {
		r.counts.Failed++
	}
}

// guardEnded records the reload guard's verdict on the reload whose window
// is id: kept (rb nil), or rolled back, or its rollback failed (rb.Error),
// with the serving epoch then. A verdict on a reload that is not the last
// one changes nothing.
func (r *statusRecord) guardEnded(id uint64, rb *control.RollbackStatus, epoch int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lastReload == nil || r.lastGuard != id {
		return
	}
	lr := *r.lastReload // a new value: a report filled before keeps its own
	lr.GuardEnds = ""
	lr.Outcome = control.OutcomeOK
	if rb != nil {
		lr.Outcome, lr.Rollback, lr.Epoch = control.OutcomeRolledBack, rb, epoch
		if rb.Error == "" {
			r.counts.RolledBack++
		}
	}
	r.lastReload = &lr
}

// rolledBack is a pair of files the reload guard rolled back: a reload of
// the same bytes again is refused unless forced.
type rolledBack struct {
	files  servedFiles // the sums, and when they were rolled back
	reason string
}

// maxRolledBack bounds the rolled-back pairs remembered: the latest ones.
const maxRolledBack = 16

// rememberRolledBack records files as rolled back at at, for reason.
func (r *statusRecord) rememberRolledBack(files servedFiles, at time.Time, reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	files.at = at
	r.rolledBack = append(r.rolledBack, rolledBack{files: files, reason: reason})
	if n := len(r.rolledBack); n > maxRolledBack {
		r.rolledBack = r.rolledBack[n-maxRolledBack:]
	}
}

// wasRolledBack is the latest rollback of files (their TOML and bootstrap
// both), if any.
func (r *statusRecord) wasRolledBack(files servedFiles) (rolledBack, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.rolledBack) - 1; i >= 0; i-- {
		rb := r.rolledBack[i]
		if files.config != "" && files.bootstrap != "" && rb.files.config == files.config && rb.files.bootstrap == files.bootstrap {
			return rb, true
		}
	}
	return rolledBack{}, false
}

// drainBegan records a drain: kind "stop", bounded by limit, or "endless".
func (r *statusRecord) drainBegan(kind string, limit time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.drain != nil {
		return
	}
	r.drainStart, r.drainLimit = time.Now(), limit
	r.drain = &control.DrainStatus{Kind: kind, Started: r.drainStart.UTC().Format(time.RFC3339Nano)}
}

func (r *statusRecord) drainProgress(p envoy.DrainProgress) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.drain == nil {
		r.drainStart = time.Now().Add(-p.Elapsed)
		r.drain = &control.DrainStatus{Kind: "stop", Started: r.drainStart.UTC().Format(time.RFC3339Nano)}
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

// fill puts into rep what the record holds at now: the agent's version,
// start and previous run, the last reload and the counts, the drain.
func (r *statusRecord) fill(rep *control.StatusReport, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rep.Agent.Version, rep.Agent.Unit, rep.Agent.PreviousExit = r.version, r.unit, r.prevExit
	rep.Agent.Started, rep.Agent.UptimeSeconds = r.started.UTC().Format(time.RFC3339Nano), seconds(now.Sub(r.started))
	rep.LastReload, rep.Reloads = r.lastReload, r.counts
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
}

// statusReport builds the report at now.
func (s *supervisor) statusReport(ctx context.Context) control.StatusReport {
	cfg := s.config()
	now := time.Now()
	rep := control.StatusReport{
		SchemaVersion: control.StatusSchemaVersion,
		Agent: control.AgentStatus{Pid: os.Getpid(), Instance: os.Getenv(EnvInstance), Config: absPath(cfg.File),
			StatusAddress: net.JoinHostPort(cfg.Agent.Localhost, strconv.Itoa(int(cfg.Agent.StatusPort)))},
	}
	s.report.fill(&rep, now)
	files := s.filesStatus()
	rep.Files = &files
	for _, c := range s.certs.Certificates() {
		rep.Certificates = append(rep.Certificates, control.CertificateStatus{File: c.File, KeyFile: c.KeyFile, CA: c.CA,
			Subject: c.Subject, DNSNames: c.DNSNames, Serial: c.Serial, NotAfter: c.NotAfter.UTC().Format(time.RFC3339),
			DaysLeft: c.DaysLeft(now), Error: c.Error})
	}
	rep.CertificatesPolled = s.certs.Polled()

	switch {
	case s.stopping():
		rep.State = control.StateDraining
	case s.reloading():
		rep.State = control.StateReloading
	case s.live():
		rep.State = control.StateLive
	default:
		rep.State = control.StateStarting
	}

	drainFor, exitAfter := s.proxy.Timings()
	rep.Epochs = []control.EpochStatus{}
	for _, e := range s.proxy.Epochs() {
		es := control.EpochStatus{Epoch: e.Epoch, Pid: e.Pid, Role: e.Role, Started: e.Started.UTC().Format(time.RFC3339Nano),
			AgeSeconds: seconds(now.Sub(e.Started))}
		if e.Role == envoy.RoleServing && rep.State == control.StateDraining {
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

	es := &control.EnvoyStatus{
		HotRestartVersion: s.hotRestartVersion(),
		Admin:             cfg.AdminAddress(),
		BaseID:            cfg.Envoy.BaseID,
		ServingEpoch:      s.proxy.Epoch(),
		Listeners:         []control.Listener{},
	}
	admin := s.admin
	call := func(f func(context.Context) error) error {
		c, cancel := context.WithTimeout(ctx, control.StatusAdminTimeout)
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
			named := map[string]bool{}
			for _, n := range s.proxy.NamedListeners() {
				named[n.Name] = true
			}
			for _, l := range ls {
				es.Listeners = append(es.Listeners, control.Listener{Name: l.Name, Address: l.Address, NamedByAgent: named[l.Name]})
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

// servedFiles are the files of the configuration in force as they were
// when it came in: the SHA-256 (hex) of the TOML it was loaded from and
// of the bootstrap then. "" is unknown: a configuration handed over by a
// live upgrade was not loaded by this process, and its files may have
// been edited since.
type servedFiles struct {
	at                time.Time
	config, bootstrap string
}

// filesOf are c's files now, as c comes into force.
func filesOf(c *config.Config, at time.Time) servedFiles {
	f := servedFiles{at: at, config: c.Sum()}
	if f.config == "" {
		return f
	}
	if sum, err := bootstrapSum(c.Envoy.ConfigPath); err == nil {
		f.bootstrap = sum
	}
	return f
}

// bootstrapSum is the SHA-256 (hex) of the bootstrap at path, read as a
// reload reads it.
func bootstrapSum(path string) (string, error) {
	data, err := safefile.ReadRegular(path, epochfiles.MaxBootstrapSize)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:]), nil
}

// filesStatus compares cfg's files on disk with served, the files of cfg
// when it came into force, and says why they differ from last, the last
// reload, which read tried: when the files on disk are those it read, it
// failed or was rolled back; else they are an edit not reloaded yet.
func filesStatus(cfg *config.Config, served servedFiles, last *control.ReloadStatus, tried servedFiles) control.FilesStatus {
	st := control.FilesStatus{State: control.FilesInSync,
		Config:    fileStatus(cfg.File, served.config, config.FileSum),
		Bootstrap: fileStatus(cfg.Envoy.ConfigPath, served.bootstrap, bootstrapSum)}
	if !served.at.IsZero() {
		st.ServedSince = served.at.UTC().Format(time.RFC3339Nano)
	}
	if served.config == "" {
		st.State = control.FilesUnknown
		st.Reason = "the configuration in force was handed over by a live upgrade of the agent: its files may have been edited before; the next reload tells"
		return st
	}
	var newest time.Time
	var differ []string
	for _, f := range []control.FileStatus{st.Config, st.Bootstrap} {
		if !f.Differs {
			continue
		}
		differ = append(differ, f.Path)
		if m, err := time.Parse(time.RFC3339Nano, f.Modified); err == nil && m.After(newest) {
			newest = m
		}
	}
	if len(differ) == 0 {
		return st
	}
	st.State = control.FilesDiffer
	// That reload read these very bytes.
	read := last != nil && tried.config == st.Config.SHA256 && tried.bootstrap == st.Bootstrap.SHA256 && tried.config != ""
	switch {
	case read && last.Outcome == control.OutcomeRolledBack && last.Rollback != nil:
		st.Reason = fmt.Sprintf("the reload of these files at %s was rolled back by the reload guard: %s", last.At, last.Rollback.Reason)
	case read && !last.OK:
		st.Reason = fmt.Sprintf("the reload of these files at %s failed: %s", last.At, firstLine(last.Error))
	default:
		st.Reason = fmt.Sprintf("edited at %s, after Envoy took the configuration at %s: not reloaded yet", newest.UTC().Format(time.RFC3339), served.at.UTC().Format(time.RFC3339))
	}
	st.Reason += fmt.Sprintf("; Envoy serves the configuration from before (%d files differ)", len(differ))
	return st
}

// fileStatus is the file at path against served, its sum when it came
// into force ("" unknown), read with sum.
func fileStatus(path, served string, sum func(string) (string, error)) control.FileStatus {
	f := control.FileStatus{Path: path, ServedSHA256: served}
	if fi, err := os.Stat(path); err == nil {
		f.Modified = fi.ModTime().UTC().Format(time.RFC3339Nano)
	}
	now, err := sum(path)
	if err != nil {
		f.Error = err.Error()
	}
	f.SHA256 = now
	f.Differs = served != "" && now != served
	return f
}

// driftedFiles is how many of the files differ from what Envoy serves,
// for the metric (0 when unknown).
func (s *supervisor) driftedFiles() int {
	st := s.filesStatus()
	n := 0
	for _, f := range []control.FileStatus{st.Config, st.Bootstrap} {
		if f.Differs {
			n++
		}
	}
	return n
}

// filesStatus is filesStatus for the configuration in force now.
func (s *supervisor) filesStatus() control.FilesStatus {
	cfg, served := s.served()
	s.report.mu.Lock()
	last, tried := s.report.lastReload, s.report.tried
	s.report.mu.Unlock()
	return filesStatus(cfg, served, last, tried)
}

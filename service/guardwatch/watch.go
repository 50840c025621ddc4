// Package guardwatch runs the reload guard's watch in the daemon: it
// reads Envoy's admin API every guard.ReadEvery while the guard is on
// (the statistics of guard.StatsPath, the active listeners, and the
// operator's URL through guard.Ask), keeps the reads in a guard.History,
// and judges the Window a reload opens on it until the window says
// regression or ends. It says the verdict on the window's channel; what
// the daemon does with it (a rollback, the status, the log) is the
// daemon's. It knows nothing of the supervisor, of configuration files or
// of how a rollback is made.
package guardwatch

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/envoy-agent/envoy-agent/envoy/adminapi"
	"github.com/envoy-agent/envoy-agent/service/guard"
)

// Envoy is what the watch reads of Envoy's admin API: *adminapi.Client,
// or a test's stand-in.
type Envoy interface {
	Read(ctx context.Context, path string) ([]byte, error)
	Listeners(ctx context.Context) ([]adminapi.Listener, error)
}

// Settings are the guard's keys of the configuration in force, asked
// before every read.
type Settings struct {
	// On: agent.reload_guard is more than 0. Off, nothing is read and the
	// History is dropped (a baseline of before would be stale).
	On bool
	// URL is agent.reload_guard_url, "" for none.
	URL string
}

// Outcome is how a Window ended.
type Outcome int

const (
	// Kept: the window ran to its end with no regression.
	Kept Outcome = iota
	// Regressed: signals were past their thresholds FailuresInARow reads
	// in a row.
	Regressed
	// Superseded: another reload (or one that took no window) came before
	// the verdict; the reload is not judged any more.
	Superseded
	// Stopped: the watch ended (a stop, a live upgrade of the agent).
	Stopped
)

// Verdict is how a reload's window ended.
type Verdict struct {
	Outcome Outcome
	// At is when it was decided; Findings the signals past their
	// thresholds (Regressed), Summary what was judged (Kept).
	At       time.Time
	Findings []guard.Finding
	Summary  string
}

// Reason is the first finding as a sentence, or "".
func (v Verdict) Reason() string { return guard.Verdict{Findings: v.Findings}.Reason() }

// Window is the watch over one reload: when it ends and, once, its verdict.
type Window struct {
	applied time.Time
	ends    time.Time
	verdict chan Verdict
	judge   *guard.Window
}

// Applied is when the reload it watches was applied.
func (w *Window) Applied() time.Time { return w.applied }

// Ends is when the window ends unless a regression ends it first.
func (w *Window) Ends() time.Time { return w.ends }

// Verdict gets the window's one verdict.
func (w *Window) Verdict() <-chan Verdict { return w.verdict }

// readTimeout bounds each of a read's admin calls: the stats and the
// listeners together stay under the second between two reads.
const readTimeout = 400 * time.Millisecond

// Watch is the guard's reads and windows. Run's reader reads Envoy; the
// History and the open window are held under mu, taken by each read and
// by the other methods, which never wait for a read.
type Watch struct {
	envoy    Envoy
	settings func() Settings
	probe    *http.Client
	every    time.Duration // guard.ReadEvery; a test's shorter

	mu       sync.Mutex
	history  *guard.History
	open     *Window
	held     bool
	released time.Time // reads begun before are dropped
	ended    bool      // Run has returned
}

// New is a Watch of envoy whose keys settings gives; Run runs it.
func New(envoy Envoy, settings func() Settings) *Watch {
	return &Watch{envoy: envoy, settings: settings, probe: guard.NewProbeClient(), every: guard.ReadEvery}
}

// Run reads and judges every guard.ReadEvery until ctx ends; a window open
// then ends Stopped, and so does any opened after.
func (w *Watch) Run(ctx context.Context) {
	tick := time.NewTicker(w.every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			w.mu.Lock()
			w.ended = true
			w.end(Verdict{Outcome: Stopped, At: time.Now()})
			w.mu.Unlock()
			return
		case <-tick.C:
		}
		began := time.Now() // before the settings: a window opened after them drops this read
		st := w.settings()
		var sample guard.Sample
		ok := false
		if st.On {
			sample, ok = w.readEnvoy(ctx, st.URL)
		}
		w.take(began, st.On, ok, sample)
	}
}

// readEnvoy is one read of Envoy; ok false when the admin API did not
// answer (the read counts neither way).
func (w *Watch) readEnvoy(ctx context.Context, url string) (guard.Sample, bool) {
	s := guard.Sample{At: time.Now()}
	c, cancel := context.WithTimeout(ctx, readTimeout)
	body, err := w.envoy.Read(c, guard.StatsPath)
	cancel()
	if err != nil {
		return s, false
	}
	if s.Stats, err = guard.ParseStats(body); err != nil {
		return s, false
	}
	c, cancel = context.WithTimeout(ctx, readTimeout)
	ls, err := w.envoy.Listeners(c)
	cancel()
	if err != nil {
		return s, false
	}
	for _, l := range ls {
		if l.Address != "" {
			s.Listening = append(s.Listening, l.Address)
		}
	}
	if url != "" {
		c, cancel = context.WithTimeout(ctx, guard.ProbeTimeout)
		p := guard.Ask(c, w.probe, url)
		cancel()
		s.Probe = &p
	}
	return s, true
}

// take adds a read begun at began (ok: it succeeded) to the History and
// judges the open window by it; on is whether the guard was on.
func (w *Watch) take(began time.Time, on, ok bool, sample guard.Sample) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.held || began.Before(w.released) {
		return // a reload is being applied: its window counts from the read before
	}
	if !on {
		w.history = nil
		w.end(Verdict{Outcome: Superseded, At: time.Now()}) // a reload turned the guard off
		return
	}
	if w.history == nil {
		w.history = guard.NewHistory()
	}
	if ok {
		w.history.Add(sample)
	}
	if w.open == nil {
		return
	}
	now := time.Now()
	switch v := w.open.judge.Judge(w.history, now); {
	case v.Regression:
		w.end(Verdict{Outcome: Regressed, At: now, Findings: v.Findings})
	case v.Ended:
		w.end(Verdict{Outcome: Kept, At: now, Summary: v.Summary})
	}
}

// end gives the open window, if any, its verdict; w.mu is held.
func (w *Watch) end(v Verdict) {
	if w.open == nil {
		return
	}
	w.open.verdict <- v
	w.open = nil
}

// Hold stops taking reads while a reload is applied, so that the window it
// opens counts from the read before it: until Open or Release.
func (w *Watch) Hold() {
	w.mu.Lock()
	w.held = true
	w.mu.Unlock()
}

// Release ends a Hold with no window: the reload failed or changed
// nothing.
func (w *Watch) Release() {
	w.mu.Lock()
	w.held, w.released = false, time.Now()
	w.mu.Unlock()
}

// Open ends a Hold and watches a reload applied at applied for length,
// with th: its baseline is the History's last guard.BaselineSpan, its
// traffic counted from the latest read. A window still open ends
// Superseded. Once Run has returned, the window's verdict is Stopped at
// once.
func (w *Watch) Open(th guard.Thresholds, applied time.Time, length time.Duration) *Window {
	win := &Window{applied: applied, ends: applied.Add(length), verdict: make(chan Verdict, 1)}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.end(Verdict{Outcome: Superseded, At: time.Now()})
	w.held, w.released = false, time.Now()
	if w.ended {
		win.verdict <- Verdict{Outcome: Stopped, At: time.Now()}
		return win
	}
	if w.history == nil {
		w.history = guard.NewHistory() // the guard was off until this reload: nothing before to compare with
	}
	win.judge = w.history.Open(th, applied, length)
	w.open = win
	return win
}

// Close ends the open window, if it is win, with outcome (Superseded,
// Stopped); nil ends whichever is open.
func (w *Watch) Close(win *Window, outcome Outcome) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if win == nil || w.open == win {
		w.end(Verdict{Outcome: outcome, At: time.Now()})
	}
}

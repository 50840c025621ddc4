package guard

import (
	"fmt"
	"time"
)

// ReadEvery is how often the daemon reads Envoy for the guard (its /stats,
// listeners and the operator's URL): the reads FailuresInARow counts are
// this far apart.
const ReadEvery = time.Second

// MinWindow is the shortest window that can call a regression: one that
// shows from the first read on needs FailuresInARow reads.
const MinWindow = FailuresInARow * ReadEvery

// FailuresInARow is how many reads in a row a signal must be over its
// threshold before a Window calls a regression, as Argo Rollouts' and
// Flagger's analyses count failed measurements before they abort: one
// read can catch a moment (a hot restart's old epoch's counters reach the
// new one only at its stats flush), three a second apart cannot.
const FailuresInARow = 3

// Window is the guard's watch over one reload: the traffic before it (the
// baseline), what was there when it was applied (the mark), and until
// when it is watched. The goroutine that owns the History owns it.
type Window struct {
	th     Thresholds
	start  Mark
	before Figures
	ends   time.Time
	// probeBefore is whether the URL answered 2xx at the last read before
	// the reload: a URL that did not is not judged.
	probeBefore bool
	judgedAt    time.Time      // the read the last Judge counted
	streak      map[string]int // findings by key: reads in a row over their threshold
	probeFails  int            // the URL's failed reads in a row
	probeOK     int            // the URL's 2xx answers since the reload
	probeAsked  int            // the URL's answers since the reload
}

// Open starts watching a reload applied at applied, for length: its
// baseline is the last BaselineSpan of h, and its traffic is counted from
// h's latest read.
func (h *History) Open(th Thresholds, applied time.Time, length time.Duration) *Window {
	return &Window{th: th, start: h.Mark(), before: h.Baseline(), ends: applied.Add(length),
		probeBefore: h.now.probe != nil && h.now.probe.OK, judgedAt: h.now.At, streak: map[string]int{}}
}

// Ends is when the window ends.
func (w *Window) Ends() time.Time { return w.ends }

// Verdict is a Window's judgement at one read.
type Verdict struct {
	// Regression: signals were over their thresholds FailuresInARow reads
	// in a row; Findings are those signals, most telling first.
	Regression bool
	Findings   []Finding
	// Ended: the window is over with no regression; Summary says what
	// was judged.
	Ended   bool
	Summary string
}

// Reason is the verdict's first finding, or "".
func (v Verdict) Reason() string {
	if len(v.Findings) == 0 {
		return ""
	}
	return v.Findings[0].String()
}

// Judge judges h's latest read at now. A read counts once: Judge again
// with no new read (the admin API did not answer) moves no signal nearer
// a regression, as Argo Rollouts counts a measurement's error apart from
// its failure. Past the window's end it ends the window, unless the
// latest read still made a regression.
func (w *Window) Judge(h *History, now time.Time) Verdict {
	after := h.Since(w.start)
	findings := Judge(w.th, w.before, after)
	if h.now.At.After(w.judgedAt) {
		w.judgedAt = h.now.At
		w.count(findings, after)
	}
	var fired []Finding
	for _, f := range findings {
		if w.streak[f.key()] >= FailuresInARow {
			fired = append(fired, f)
		}
	}
	if w.probeBefore && w.probeFails >= FailuresInARow && after.Probe != nil {
		fired = append(fired, Finding{Signal: URL, Subject: after.Probe.URL, Before: "answered 2xx",
			After: fmt.Sprintf("%s, %d reads in a row", after.Probe.Answer, w.probeFails)})
	}
	if len(fired) > 0 {
		return Verdict{Regression: true, Findings: fired}
	}
	if now.Before(w.ends) {
		return Verdict{}
	}
	return Verdict{Ended: true, Summary: w.summary(after)}
}

// count moves each signal's streak by one read's findings.
func (w *Window) count(fs []Finding, after Figures) {
	over := map[string]bool{}
	for _, f := range fs {
		over[f.key()] = true
		w.streak[f.key()]++
	}
	for k := range w.streak {
		if !over[k] {
			delete(w.streak, k)
		}
	}
	if p := after.Probe; p != nil && w.probeBefore {
		w.probeAsked++
		if p.OK {
			w.probeFails = 0
			w.probeOK++
		} else {
			w.probeFails++
		}
	}
}

// summary says what a window that ended judged.
func (w *Window) summary(after Figures) string {
	s := fmt.Sprintf("no regression over %s: %s", after.Span.Round(time.Second), w.th.judged(after))
	switch {
	case w.probeBefore:
		s += fmt.Sprintf("; %s answered 2xx %d times of %d", w.start.probe.URL, w.probeOK, w.probeAsked)
	case w.start.probe != nil:
		s += fmt.Sprintf("; %s is not judged: it did not answer 2xx before the reload (%s)", w.start.probe.URL, w.start.probe.Answer)
	}
	return s
}

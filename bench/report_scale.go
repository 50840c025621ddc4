package main

import (
	"fmt"
	"strings"
)

// The scale scenario's targets (the issue of reload in place and
// certificates at any size), as ratios or bounds measured in the same run.
const (
	scaleCertStartTarget  = 1.5  // the agent's start on the certificates against a bare Envoy's
	scaleEditVsRestart    = 0.3  // a listener's route edit against the hot-restart reload of a bootstrap-level edit
	scaleEditVsBare       = 2.0  // against a bare Envoy's in-place update of the same edit from an LDS file
	scaleBareLDSReference = 204  // ms: that bare update as the issue measured it
	scaleSmallStartTarget = 1.20 // the small bootstrap's start against a bare Envoy's
)

func renderScale(w writer, r *Results) {
	s := r.Scale
	if !section(w, r, "7. Scale: a thousand certificates, a thousand listeners", "scale", s != nil) {
		return
	}
	renderScaleCerts(w, s.Certs)
	renderScaleListeners(w, s.Listeners)
	renderScaleStart(w, s.SmallStart)
	meaning(w, "a part the agent could not do shows its failure instead of figures; a bare Envoy's figures are what Envoy itself does with the same files. The targets are the issue's, each against the bare figure of the same run.")
}

func renderScaleCerts(w writer, c ScaleCerts) {
	if c.N == 0 {
		return
	}
	w("**%d certificates named by file**, one per filter chain (a tcp_proxy), chosen by SNI; %d starts each, taking turns. Start: exec to READY=1 (agent) or `/ready` 200 (bare, 1 ms polls); served: exec until a new handshake for every name got that name's certificate (%d handshakes at once). Then the middle name's pair is renewed (the key, then the certificate, each renamed into place) and new handshakes are made 5 ms apart.\n\n", c.N, c.Starts, handshakers)
	metricTable(w, "Agent", "Bare Envoy", "Agent vs bare")
	a, b := c.Agent, c.Bare
	w("| starts that served every name | %d/%d | %d/%d | | agent every time: %s |\n", a.StartsOK, c.Starts, b.StartsOK, c.Starts, yesNo(a.StartsOK == c.Starts))
	w("| start to ready, median / max | %s | %s | %s | ≤ ×%.1f: %s |\n", distCell(a.ReadyMs), distCell(b.ReadyMs), ratio(a.ReadyMs.Median, b.ReadyMs.Median),
		scaleCertStartTarget, yesNo(a.ReadyMs.N > 0 && b.ReadyMs.N > 0 && a.ReadyMs.Median <= scaleCertStartTarget*b.ReadyMs.Median))
	w("| start until every name served, median / max | %s | %s | %s | |\n", distCell(a.ServedMs), distCell(b.ServedMs), ratio(a.ServedMs.Median, b.ServedMs.Median))
	w("| renewal of one certificate: new handshakes get it after | %s | %s | | agent ≤ %s: %s |\n", renewalCell(a.Renewal), renewalCell(b.Renewal), renewalTarget,
		yesNo(a.Renewal != nil && a.Renewal.Served && a.Renewal.ServedMs <= ms(renewalTarget)))
	w("| the same Envoy pid, no reload | %s | %s | | agent: %s |\n", pidCell(a.Renewal), pidCell(b.Renewal),
		yesNo(a.Renewal != nil && a.Renewal.SamePid && a.Renewal.Reloads == 0))
	w("\n")
	for _, side := range []struct {
		name string
		s    CertSide
	}{{"Agent", a}, {"Bare Envoy", b}} {
		if side.s.Failure != "" {
			w("%s: %s\n\n", side.name, oneLine(side.s.Failure))
		}
		if side.s.Renewal != nil && side.s.Renewal.Note != "" {
			w("%s's renewal: %s\n\n", side.name, side.s.Renewal.Note)
		}
	}
}

func renderScaleListeners(w writer, l ScaleListeners) {
	if l.N == 0 {
		return
	}
	w("**%d HTTP listeners**, each with its own route configuration. The agent (`reload_method = \"auto\"`, the default) reloads a route edit (the listener's `x-config-version`) of the first, a middle and the last listener with `envoy-agent reload`, then an edit outside the listeners (`stats_flush_interval`: a hot restart); a bare Envoy that reads the same listeners from an LDS file takes the same route edits from it (the file renamed into place; time until the listener answers the new route, 1 ms polls). During each edit, %d raw HTTP/1.1 workers on kept-alive connections to the edited listener, which do not retry, ask without pause. Start: agent exec to READY=1 %s; bare exec to `/ready` 200 %s.\n\n",
		l.N, scaleEditWorkers, msf(l.AgentStartMs), msf(l.BareStartMs))
	restart := l.BootstrapEdit.Ms
	w("| Edit | Agent: time | path | same pid | served at return | failed / sent | Bare Envoy (LDS): time | failed / sent | Agent vs hot restart (%s) | Agent vs bare | Targets: in place, same pid, 0 failed; ≤ ×%.1f restart; ≤ ×%.0f bare (issue: %d ms) |\n|---|---:|---|---|---|---:|---:|---:|---:|---:|---|\n",
		msf(restart), scaleEditVsRestart, scaleEditVsBare, scaleBareLDSReference)
	for _, e := range l.Edits {
		a, b := e.Agent, e.Bare
		ok := a.Done && a.Path == "in place" && a.SamePid && a.Load.Failed == 0
		okR := a.Done && restart > 0 && a.Ms <= scaleEditVsRestart*restart
		okB := a.Done && b.Done && a.Ms <= scaleEditVsBare*b.Ms
		w("| %s (listener %d) | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s, %s, %s |\n", e.Label, e.Index, editTime(a), orDash(a.Path, a.Done), yesNoIf(a.SamePid, a.Done),
			yesNoIf(a.ServedAtReturn, a.Done), failedSent(a), editTime(b), failedSent(b), ratioIf(a.Ms, restart, a.Done), ratioIf(a.Ms, b.Ms, a.Done && b.Done), yesNo(ok), yesNo(okR), yesNo(okB))
	}
	be := l.BootstrapEdit
	w("| outside the listeners (`stats_flush_interval`) | %s | %s | %s | | %s | | | | | |\n\n", editTime(be), orDash(be.Path, be.Done), yesNoIf(be.SamePid, be.Done), failedSent(be))
	var steps []string
	for _, e := range l.Edits {
		if e.Agent.Done {
			steps = append(steps, fmt.Sprintf("%s: validate %s, load %s, plan %s, apply %s", e.Label, stepMedian(e.Agent.Steps, "validate_ms"), stepMedian(e.Agent.Steps, "load_ms"),
				stepMedian(e.Agent.Steps, "plan_ms"), applyStep(e.Agent.Steps)))
		}
	}
	if len(steps) > 0 {
		w("The agent's breakdown of each edit's reload (its log): %s.\n\n", strings.Join(steps, "; "))
	}
	for _, f := range []struct{ name, err string }{{"Agent", l.AgentFailure}, {"Bare Envoy", l.BareFailure}} {
		if f.err != "" {
			w("%s: %s\n\n", f.name, oneLine(f.err))
		}
	}
	for _, e := range append(l.Edits, ListenerEdit{Label: "outside the listeners", Agent: l.BootstrapEdit}) {
		for _, side := range []struct {
			name string
			s    EditSide
		}{{"agent", e.Agent}, {"bare Envoy", e.Bare}} {
			if side.s.Error != "" {
				w("The %s edit, %s: %s\n\n", e.Label, side.name, oneLine(side.s.Error))
			}
		}
	}
}

func renderScaleStart(w writer, s ScaleStart) {
	w("**The small bootstrap's start** (one listener), agent (exec to READY=1) against bare Envoy (exec to `/ready` 200, 1 ms polls), taking turns: %d runs of %d starts each.\n\n", s.Runs, s.PerRun)
	if s.Error != "" {
		w("Did not finish: %s\n\n", oneLine(s.Error))
	}
	metricTable(w, "Agent", "Bare Envoy", "Agent vs bare")
	var runs []string
	for _, x := range s.RunRatios {
		runs = append(runs, fmt.Sprintf("×%.2f", x))
	}
	w("| start, median / max | %s | %s | %s | ≤ ×%.2f: %s |\n", distCell(s.Agent), distCell(s.Bare), ratio(s.Agent.Median, s.Bare.Median), scaleSmallStartTarget,
		yesNo(s.Bare.N > 0 && s.Agent.Median <= scaleSmallStartTarget*s.Bare.Median))
	w("| each run's ratio of medians (median of them) | %s (×%.2f) | | | |\n\n", strings.Join(runs, ", "), medianOf(s.RunRatios))
}

func distCell(d Dist) string {
	if d.N == 0 {
		return "—"
	}
	return medMax(d)
}

func renewalCell(r *Renewal) string {
	switch {
	case r == nil:
		return "not measured"
	case r.Served:
		return msf(r.ServedMs)
	}
	return fmt.Sprintf("not within %s", msf(r.WaitMs))
}

func pidCell(r *Renewal) string {
	if r == nil {
		return "—"
	}
	return fmt.Sprintf("pid %s, %d reloads", map[bool]string{true: "same", false: "changed"}[r.SamePid], r.Reloads)
}

func editTime(e EditSide) string {
	if !e.Done {
		if e.Error != "" {
			return "failed"
		}
		return "—"
	}
	return msf(e.Ms)
}

func failedSent(e EditSide) string {
	if e.Load.Sent == 0 {
		return "—"
	}
	return fmt.Sprintf("%s / %d", failed(e.Load), e.Load.Sent)
}

func orDash(s string, ok bool) string {
	if !ok || s == "" {
		return "—"
	}
	return s
}

func yesNoIf(v, ok bool) string {
	if !ok {
		return "—"
	}
	return yesNo(v)
}

func ratioIf(a, b float64, ok bool) string {
	if !ok || b <= 0 {
		return "—"
	}
	return ratio(a, b)
}

// applyStep is a reload's apply step from its log: in_place_ms or
// hot_restart_ms.
func applyStep(steps map[string]Dist) string {
	if d, ok := steps["in_place_ms"]; ok {
		return "in place " + msf(d.Median)
	}
	if d, ok := steps["hot_restart_ms"]; ok {
		return "hot restart " + msf(d.Median)
	}
	return "—"
}

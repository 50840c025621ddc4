package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// renderMarkdown is results.md, and what the bench prints on stdout: one
// table per scenario, each with a line on what its numbers mean.
func renderMarkdown(r *Results) string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("# envoy-agent benchmark\n\n")
	w("Envoy %s; agent %s; %s; %d cores shared with other work (load average %s before, %s after), so every figure is noisy: "+
		"compare agent and baseline within a run, not across runs. The run took %.0f s. Baseline: a bare Envoy, run as a plain unit would run it "+
		"(same bootstrap, one worker, log level warning). All traffic on 127.0.0.1.\n\n",
		r.Host.Envoy, r.Host.Agent, r.Host.Go, r.Host.Cores, r.Host.LoadAvgBefore, r.Host.LoadAvgAfter, r.Host.Seconds)
	renderStart(w, r)
	renderReload(w, r)
	renderStop(w, r)
	renderOverhead(w, r)
	renderGrowth(w, r)
	renderInPlace(w, r)
	renderScale(w, r)
	return b.String()
}

type writer func(format string, args ...any)

// section starts a scenario's part: its heading, and a note if the scenario
// name did not finish. It reports whether there is anything else to show.
func section(w writer, r *Results, heading, name string, have bool) bool {
	w("## %s\n\n", heading)
	if e, ok := r.Errors[name]; ok {
		w("**Did not run to the end:** %s\n\n", oneLine(e))
	}
	if !have {
		if _, ok := r.Errors[name]; !ok {
			w("Not run.\n\n")
		}
	}
	return have
}

func renderStart(w writer, r *Results) {
	s := r.Start
	if !section(w, r, "1. Start: exec to ready", "start", s != nil) {
		return
	}
	w("%d starts each, taking turns. Agent: `envoy-agent run` until READY=1 on its NOTIFY_SOCKET. Baseline: bare Envoy until `GET /ready` answers 200, polled every 1 ms.\n\n", s.Starts)
	metricTable(w, "Agent", "Baseline", "Agent − baseline")
	w("| median | %s | %s | %s (%s) | ≤ ×%.2f: %s |\n", msf(s.Agent.Median), msf(s.Baseline.Median), signed(s.MedianDiffMs),
		ratio(s.Agent.Median, s.Baseline.Median), startTarget, yesNo(s.Baseline.Median > 0 && s.Agent.Median <= startTarget*s.Baseline.Median))
	w("| max | %s | %s | %s | |\n", msf(s.Agent.Max), msf(s.Baseline.Max), signed(s.MaxDiffMs))
	w("| min | %s | %s | %s | |\n", msf(s.Agent.Min), msf(s.Baseline.Min), signed(round3(s.Agent.Min-s.Baseline.Min)))
	if s.ProbeStarts > 0 {
		w("| of which Envoy LIVE → READY=1, median / max (%d more agent starts, Envoy's /ready also polled every 1 ms) | %s / %s | | | |\n",
			s.ProbeStarts, msf(s.ProbeGap.Median), msf(s.ProbeGap.Max))
	}
	if s.Floor.N > 0 {
		w("| the floor, median: a minimal Go supervisor (`bench/launcher`, built as the agent is) exec'ing the bare Envoy, to its READY=1 | %s | %s | %s (%s) | |\n",
			msf(s.Floor.Median), msf(s.Baseline.Median), signed(round3(s.Floor.Median-s.Baseline.Median)), ratio(s.Floor.Median, s.Baseline.Median))
		w("| the agent's own work, median: agent − floor | %s | | | |\n", signed(round3(s.Agent.Median-s.Floor.Median)))
	}
	w("\n")
	floor := ""
	if s.Floor.N > 0 {
		floor = " The floor is what any supervisor written in Go pays before the agent does anything of its own: its exec and the Go runtime's start, a fork and exec of Envoy, a `/ready` poll every 2 ms and one notify datagram; it reads no file, claims no base id and binds no port. Agent − floor is the agent's own start-up work: reading and checking the configuration, the base-id claim, the run folder's checks and the bootstrap's snapshot, its own ports and control socket."
	}
	meaning(w, "the difference is what the agent adds to a start: its own exec and config load, plus the gap between Envoy becoming LIVE and the agent's next `/ready` poll (%s). The baseline's 1 ms polling is the best a poller can do.%s", s.AgentPollNote, floor)
}

func renderReload(w writer, r *Results) {
	s := r.Reload
	if !section(w, r, "2. Reload under load", "reload", s != nil) {
		return
	}
	a, bl := s.Agent, s.Baseline
	w("A fixed-rate keep-alive load (vegeta, %d kept-alive connections, %.0f requests/s in all, 2 s timeout, a silent retry counted as a failure) through Envoy while the bootstrap is rewritten %d times with a new `x-config-version` response header, with a %.1f s pause after each change. Time per change: until `envoy-agent reload` returned, or until the restarted Envoy answered `/ready` (1 ms polls). The picture is `reload.svg`.\n\n",
		s.Workers, s.RateRPS, max(a.Changes, bl.Changes), s.GapMs/1000)
	na := a.NotAvailable
	cell := func(v string) string {
		if na != "" {
			return "n/a"
		}
		return v
	}
	metricTable(w, "Agent", "Baseline", "Agent vs baseline")
	if na != "" {
		w("| method | %s | %s | | |\n", na, bl.Method)
	} else {
		w("| method | %s | %s | | |\n", a.Method, bl.Method)
	}
	w("| config changes that worked | %s | %d/%d | | |\n", cell(fmt.Sprintf("%d/%d", a.ChangesOK, a.Changes)), bl.ChangesOK, bl.Changes)
	w("| time per change, median / max | %s | %s | %s | |\n", cell(medMax(a.ChangeMs)), medMax(bl.ChangeMs), cell(ratio(a.ChangeMs.Median, bl.ChangeMs.Median)))
	w("| requests sent | %s | %d | | |\n", cell(fmt.Sprint(a.Load.Sent)), bl.Load.Sent)
	w("| requests failed | %s | %s | %s | agent 0: %s |\n", cell(failed(a.Load)), failed(bl.Load),
		cell(fmt.Sprintf("%+d", a.Load.Failed-bl.Load.Failed)), cell(yesNo(a.Load.Failed == 0)))
	for _, q := range []struct {
		name string
		a, b float64
	}{{"latency p50", a.Load.Latency.Median, bl.Load.Latency.Median}, {"latency p99", a.Load.Latency.P99, bl.Load.Latency.P99}, {"latency max", a.Load.Latency.Max, bl.Load.Latency.Max}} {
		w("| %s | %s | %s | %s | |\n", q.name, cell(msf(q.a)), msf(q.b), cell(ratio(q.a, q.b)))
	}
	w("| config versions answered | %s | %d/%d | | every change served: %s |\n", cell(fmt.Sprintf("%d/%d", a.VersionsSeen, a.VersionsWant)), bl.VersionsSeen, bl.VersionsWant,
		cell(yesNo(a.VersionsSeen == a.VersionsWant)))
	if na == "" && a.AgentHWMKiB > 0 {
		w("| agent peak RSS after the reloads | %s | | | < 20 MiB: %s |\n", mib(a.AgentHWMKiB), yesNo(a.AgentHWMKiB < 20*1024))
	}
	for _, side := range []ReloadSide{a, bl} {
		for i, ev := range side.Events {
			if !ev.OK {
				w("\nChange %d by %s failed (%d of %d failed): %s\n", i+1, side.Method, side.Changes-side.ChangesOK, side.Changes, oneLine(ev.Error))
				break
			}
		}
	}
	renderReloadFloor(w, a, s.BareHotRestart)
	note := ""
	if na != "" {
		note = " The agent's side is n/a: this agent build has no `envoy-agent reload` command yet."
	}
	w("\n")
	meaning(w, "failed requests are what clients saw during config changes (latency counts failed requests too, at their time to fail; a request that Go's client would have retried silently on a new connection, after its kept-alive one turned out closed, counts as failed (\"retried\"), as curl, wrk and Python's http.client see it). "+
		"A hot restart hands the listening sockets to the new Envoy, so no request should fail; a stop-and-start leaves nothing listening for as long as Envoy takes to stop and start.%s", note)
}

// The targets the agent is held to, as ratios of the bare
// Envoy's figures measured in the same run.
const (
	startTarget  = 1.05 // start: exec → READY=1 against a bare exec → LIVE
	reloadTarget = 1.15 // reload: against a bare validate plus a bare hot restart
)

// renderReloadFloor compares the agent's reload with its floor: a bare
// validate and a bare hot restart under the same load, and gives the
// agent's own breakdown.
func renderReloadFloor(w writer, a, h ReloadSide) {
	if !h.Available || a.NotAvailable != "" {
		return
	}
	w("\nThe floor: what a reload's safety needs from Envoy, done by hand under the same load: `envoy --mode validate` on the bootstrap, then epoch N+1 exec'd with the same base id until `/server_info` says epoch N+1 LIVE (1 ms polls).\n\n")
	metricTable(w, "Agent", "Bare validate + hot restart", "Agent vs floor")
	w("| time per change, median / max | %s | %s | %s | ≤ ×%.2f: %s |\n", medMax(a.ChangeMs), medMax(h.ChangeMs), ratio(a.ChangeMs.Median, h.ChangeMs.Median),
		reloadTarget, yesNo(h.ChangeMs.Median > 0 && a.ChangeMs.Median <= reloadTarget*h.ChangeMs.Median))
	if h.ValidateMs != nil && h.HotRestartMs != nil {
		w("| of which `envoy --mode validate`, median | | %s | | |\n", msf(h.ValidateMs.Median))
		w("| of which exec of epoch N+1 → its /server_info LIVE, median | | %s | | |\n", msf(h.HotRestartMs.Median))
	}
	w("| requests failed | %s | %s | | agent 0: %s |\n", failed(a.Load), failed(h.Load), yesNo(a.Load.Failed == 0))
	if len(a.Steps) > 0 {
		w("\nThe agent's breakdown of its own reloads (medians, from its log; `envoy-agent reload`'s own exec and control-socket round trip are the rest of the time per change): ")
		var parts []string
		for _, k := range reloadStepKeys {
			if d, ok := a.Steps[k]; ok {
				parts = append(parts, fmt.Sprintf("%s %s", strings.TrimSuffix(k, "_ms"), msf(d.Median)))
			}
		}
		w("%s.\n", strings.Join(parts, ", "))
	}
}

func renderStop(w writer, r *Results) {
	s := r.Stop
	if !section(w, r, "3. Stop under load", "stop", s != nil) {
		return
	}
	a, bl := s.Agent, s.Baseline
	w("The same load, plus %d requests to an upstream that sleeps %.0f s, in flight when SIGTERM comes. Agent: termination_drain_duration %.0f s, min_drain_duration %.0f s. Baseline: SIGTERM to a bare Envoy.\n\n",
		a.SlowInFlight, s.SlowMs/1000, s.TerminationDrain/1000, s.MinDrain/1000)
	metricTable(w, "Agent (drain)", "Baseline (SIGTERM)", "Agent vs baseline")
	w("| slow requests in flight that failed | %d/%d | %d/%d | %+d | |\n", a.SlowFailed, a.SlowInFlight, bl.SlowFailed, bl.SlowInFlight, a.SlowFailed-bl.SlowFailed)
	w("| load requests failed, SIGTERM to exit | %s | %s | | |\n", duringDrain(a), duringDrain(bl))
	w("| load requests failed, sent before SIGTERM (in flight at it included) | %d/%d | %d/%d | | |\n", a.LoadBeforeSignal.Failed, a.LoadBeforeSignal.Sent, bl.LoadBeforeSignal.Failed, bl.LoadBeforeSignal.Sent)
	w("| SIGTERM to exit | %s | %s | %s | |\n", msf(a.ExitMs), msf(bl.ExitMs), signed(round3(a.ExitMs-bl.ExitMs)))
	w("| exit status | %s | %s | | |\n\n", a.ExitStatus, bl.ExitStatus)
	z := s.ExitOnZero
	if z.PollMs > 0 {
		w("With `exit_on_zero_active_connections = true` (min_drain_duration %.0f s): the load stops at SIGTERM and %d slow requests finish.\n\n", z.MinDrainMs/1000, z.SlowInFlight)
		metricTable(w, "Agent")
		w("| last connection closed, after SIGTERM | %s | |\n", msf(z.LastCloseMs))
		w("| agent exited, after SIGTERM | %s | |\n", msf(z.ExitMs))
		w("| exit after max(last close, min_drain_duration) | %s | within one poll (%s): %s |\n", msf(z.DelayMs), msf(z.PollMs), yesNo(z.DelayMs <= z.PollMs))
		w("| slow requests that failed | %d/%d | |\n\n", z.SlowFailed, z.SlowInFlight)
	}
	meaning(w, "a bare Envoy exits at once on SIGTERM and cuts every request in flight; the agent fails health checks, drains, and lets requests in flight finish, at the price of a longer stop (the drain). "+
		"Load requests sent after the exit fail on both sides (nothing listens) and are not counted; the agent's failures before its exit are the requests sent after its drain ended and it told Envoy to quit (see when they began), while the agent itself was still exiting. With exit_on_zero_active_connections, the delay is the wait for the next drain poll plus Envoy's quit and the agent's exit.")
}

func renderOverhead(w writer, r *Results) {
	s := r.Overhead
	if !section(w, r, "4. Overhead of the agent process", "overhead", s != nil) {
		return
	}
	w("The agent process only (its Envoy is not counted in the agent's column; it is shown beside it for scale), over %.0f s idle with WATCHDOG_USEC=2000000 and a NOTIFY_SOCKET (%d watchdog pings seen).\n\n", s.IdleS, s.WatchdogPings)
	metricTable(w, "Agent process", "Its Envoy", "Agent / Envoy")
	w("| peak RSS (VmHWM) | %s | %s | %s | < 20 MiB: %s |\n", mib(s.AgentHWMKiB), mib(s.EnvoyHWMKiB), pct(float64(s.AgentHWMKiB), float64(s.EnvoyHWMKiB)), yesNo(s.AgentHWMKiB < 20*1024))
	w("| CPU over the idle period | %.4f s (%.4f%% of a core) | %.2f s (%.3f%% of a core) | %s | < 0.1%% of a core: %s |\n",
		s.AgentCPUSeconds, s.AgentCPUPercent, s.EnvoyCPUSeconds, s.EnvoyCPUPercent, pct(s.AgentCPUSeconds, s.EnvoyCPUSeconds), yesNo(s.AgentCPUPercent < 0.1))
	w("| binary size | %s | %s | %s | |\n", mib(int(s.AgentBinaryBytes/1024)), mib(int(s.EnvoyBinaryBytes/1024)), pct(float64(s.AgentBinaryBytes), float64(s.EnvoyBinaryBytes)))
	w("| threads | %d | | | |\n\n", s.AgentThreads)
	meaning(w, "this is what supervising costs on top of Envoy. The agent's CPU is its run time from /proc/PID/task/*/schedstat (ns precision; utime+stime, in 10 ms ticks, gave %.2f s); idle, it only answers the watchdog by asking Envoy's `/ready` every second.", s.AgentCPUTicksSecs)
}

func renderGrowth(w writer, r *Results) {
	s := r.Growth
	if !section(w, r, "5. Growth with the number of listeners", "growth", s != nil && len(s.Rows) > 0) {
		return
	}
	base := s.Rows[0]
	w("A bare Envoy with N HTTP listeners, each of which has had a connection, %d held open. %d rounds of: one drain poll as the agent makes it, the kernel's count (`conncount.Counter`, kept across the rounds: quick counts from a sock_diag dump of the established sockets, a full one (the Envoy's `/proc/PID/fd` links and every TCP socket, listeners included) when a connection is new, the count is zero or the last full one is 2 s old); one full count with nothing remembered; one count from Envoy's stats, the poll's fallback when `/proc` cannot be read (`GET %s` on a fresh connection, then `adminapi.ParseActiveConnections`; until the kernel count came, every poll read both and took the larger); and one `GET /ready`. Baseline: the %d-listener row.\n\n",
		base.Held, s.Iterations, drainPollPath, base.Listeners)
	w("| Listeners | LIVE after | drain poll (kernel) median / p99 | poll vs %d listeners | target | full polls | full count median / p99 | full vs %d | stats count median / p99 | stats vs %d | stats answer | /ready median / p99 | poll share of a 250 ms interval |\n", base.Listeners, base.Listeners, base.Listeners)
	w("|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, g := range s.Rows {
		target := ""
		if g.Listeners >= 10000 {
			target = "≤ ×2.00: " + yesNo(g.Kernel.Median <= 2*base.Kernel.Median)
		}
		w("| %d | %s | %s / %s | %s | %s | %d of %d | %s / %s | %s | %s / %s (%d rounds) | %s | %d lines, %s | %s / %s | %.2f%% |\n", g.Listeners, msf(g.StartMs), msf(g.Kernel.Median), msf(g.Kernel.P99),
			ratio(g.Kernel.Median, base.Kernel.Median), target, g.PollFull, s.Iterations, msf(g.FullCount.Median), msf(g.FullCount.P99), ratio(g.FullCount.Median, base.FullCount.Median), msf(g.Poll.Median), msf(g.Poll.P99), g.StatsRounds, ratio(g.Poll.Median, base.Poll.Median),
			g.StatsLines, kib(g.StatsBytes), msf(g.Ready.Median), msf(g.Ready.P99), 100*g.Kernel.Median/250)
	}
	w("\n")
	meaning(w, "a quick drain poll dumps the established sockets only, so its cost follows the connections; a full count reads every socket of every Envoy process and of the namespace, listeners × workers included, and the stats count follows the listeners (Envoy renders, and the agent parses, one gauge per listener); `/ready` does not depend on them. The last column says how much of the agent's 250 ms drain poll interval one poll takes.")
}

// The in-place reload's targets, against the hot restart of the
// same edit in the same run.
const (
	inPlaceTimeTarget  = 0.75 // an in-place reload against a hot-restart reload
	inPlaceApplyMs     = 5.0  // its apply step: the files until Envoy took them
	inPlaceRSSTarget   = 1.10 // the serving Envoy's peak RSS during the reloads against its steady RSS
	inPlaceScaleTarget = 0.50 // at scale, against a hot-restart reload
)

func renderInPlace(w writer, r *Results) {
	s := r.InPlace
	if !section(w, r, "6. Reload in place against hot restart", "inplace", s != nil) {
		return
	}
	h, p := s.HotRestart, s.InPlace
	w("The agent twice, each reloading the same edit %d times (the first listener's route: a new `x-config-version`) with `envoy-agent reload`, %.1f s apart: with `reload_method = \"hot_restart\"` (every reload a hot restart) and with `reload_method = \"auto\"` (in place, the default). The load of scenario 2 (vegeta, %d kept-alive connections, %.0f requests/s) runs through the changed listener; %d workers keep a connection each to the second listener, which the edit leaves alone, and pause between requests, each its own pause from %.1f to %.1f s (longer than `parent_shutdown_duration` %.0f s, so that a hot restart's old epoch can exit under them; different, so that their requests fall at every phase of the reload cycle), writing the next request without checking for a close, as Python's http.client does. Envoy's RSS is the serving Envoys' (the agent's children with `--restart-epoch`: not its `--mode validate` runs) VmRSS summed, sampled every %s; steady: the median under load before the first reload; peak: the largest from the first reload to the end of the load (%.1f s after the last reload).\n\n",
		max(h.Changes, p.Changes), s.GapMs/1000, s.Workers, s.RateRPS, len(s.IdlePausesMs), minMax(s.IdlePausesMs)[0]/1000, minMax(s.IdlePausesMs)[1]/1000, s.ParentShutdownMs/1000, rssEvery, (reloadGap + reloadTail).Seconds())
	metricTable(w, "Hot restart", "In place", "In place vs hot restart")
	w("| reloads that worked | %d/%d | %d/%d | | |\n", h.ChangesOK, h.Changes, p.ChangesOK, p.Changes)
	w("| reloads that took the path (its answer: `reloaded: epoch N` / `reloaded in place`) | %d/%d | %d/%d | | in place every time: %s |\n",
		h.PathTaken, h.Changes, p.PathTaken, p.Changes, yesNo(p.Changes > 0 && p.PathTaken == p.Changes))
	w("| time per reload (`envoy-agent reload`), median / max | %s | %s | %s | ≤ ×%.2f: %s |\n", medMax(h.ChangeMs), medMax(p.ChangeMs), ratio(p.ChangeMs.Median, h.ChangeMs.Median),
		inPlaceTimeTarget, yesNo(h.ChangeMs.Median > 0 && p.ChangeMs.Median > 0 && p.ChangeMs.Median <= inPlaceTimeTarget*h.ChangeMs.Median))
	w("| of which `envoy --mode validate` (the log's `validate_ms`), median | %s | %s | | |\n", stepMedian(h.Steps, "validate_ms"), stepMedian(p.Steps, "validate_ms"))
	w("| of which reading the TOML and its checks (`load_ms`) / comparing the two bootstraps (`plan_ms`), median | %s / %s | %s / %s | | |\n", stepMedian(h.Steps, "load_ms"), stepMedian(h.Steps, "plan_ms"), stepMedian(p.Steps, "load_ms"), stepMedian(p.Steps, "plan_ms"))
	ip := p.Steps["in_place_ms"]
	w("| the apply step, median: a new epoch to LIVE (`hot_restart_ms`) / the files until Envoy took them (`in_place_ms`) | %s | %s | | in place ≤ %.0f ms: %s |\n",
		stepMedian(h.Steps, "hot_restart_ms"), stepMedian(p.Steps, "in_place_ms"), inPlaceApplyMs, yesNo(ip.N > 0 && ip.Median <= inPlaceApplyMs))
	w("| the agent's own count of the reload (`took_ms`: load, copy, validate, plan, apply), median | %s | %s | %s | |\n", stepMedian(h.Steps, "took_ms"), stepMedian(p.Steps, "took_ms"), ratio(p.Steps["took_ms"].Median, h.Steps["took_ms"].Median))
	w("| requests through the changed listener: sent / failed | %d / %s | %d / %s | | in place 0: %s |\n", h.Load.Sent, failed(h.Load), p.Load.Sent, failed(p.Load), yesNo(p.Load.Sent > 0 && p.Load.Failed == 0))
	w("| latency p50 / p99 / max | %s / %s / %s | %s / %s / %s | | |\n", msf(h.Load.Latency.Median), msf(h.Load.Latency.P99), msf(h.Load.Latency.Max),
		msf(p.Load.Latency.Median), msf(p.Load.Latency.P99), msf(p.Load.Latency.Max))
	w("| config versions answered | %d/%d | %d/%d | | |\n", h.VersionsSeen, h.VersionsWant, p.VersionsSeen, p.VersionsWant)
	w("| idle keep-alive connections to the other listener: requests failed / sent (of them the first after a pause) | %s | %s | | in place 0: %s |\n",
		idleCell(h.Idle), idleCell(p.Idle), yesNo(p.Idle.AfterIdle > 0 && p.Idle.Failed == 0))
	w("| serving Envoy processes seen | %d | %d | | in place 1 (pid unchanged): %s |\n", h.EnvoyPids, p.EnvoyPids, yesNo(p.EnvoyPids == 1))
	w("| Envoy's RSS, steady | %s | %s | | |\n", mib(h.SteadyRSSKiB), mib(p.SteadyRSSKiB))
	w("| Envoy's RSS, peak during the reloads (× steady) | %s (%s) | %s (%s) | | in place ≤ ×%.2f: %s |\n", mib(h.PeakRSSKiB), ratio(float64(h.PeakRSSKiB), float64(h.SteadyRSSKiB)),
		mib(p.PeakRSSKiB), ratio(float64(p.PeakRSSKiB), float64(p.SteadyRSSKiB)), inPlaceRSSTarget,
		yesNo(p.SteadyRSSKiB > 0 && float64(p.PeakRSSKiB) <= inPlaceRSSTarget*float64(p.SteadyRSSKiB)))
	for _, side := range []InPlaceSide{h, p} {
		if side.OtherAnswer != "" {
			w("\n%s: a reload answered otherwise: %s\n", side.Method, oneLine(side.OtherAnswer))
		}
		for i, ev := range side.Events {
			if !ev.OK {
				w("\nReload %d by %s failed: %s\n", i+1, side.Method, oneLine(ev.Error))
				break
			}
		}
	}
	if sh, sp := s.ScaleHotRestart, s.ScaleInPlace; sh.Listeners > 0 || sp.Listeners > 0 {
		n := max(sh.Listeners, sp.Listeners)
		w("\nAt scale: the agent on a bootstrap of %d HTTP listeners, %d reloads of the same edit (the first listener's route) each way, %.1f s apart, no load.\n\n", n, max(sh.Changes, sp.Changes), s.GapMs/1000)
		metricTable(w, "Hot restart", "In place", "In place vs hot restart")
		w("| reloads that worked / took the path | %d/%d / %d | %d/%d / %d | | |\n", sh.ChangesOK, sh.Changes, sh.PathTaken, sp.ChangesOK, sp.Changes, sp.PathTaken)
		w("| the first request after `envoy-agent reload` returned answered the new route | %d/%d | %d/%d | | |\n", sh.ServedAtReturn, sh.ChangesOK, sp.ServedAtReturn, sp.ChangesOK)
		w("| time per reload (`envoy-agent reload`), median / max | %s | %s | %s | ≤ ×%.2f: %s |\n", medMax(sh.ChangeMs), medMax(sp.ChangeMs), ratio(sp.ChangeMs.Median, sh.ChangeMs.Median),
			inPlaceScaleTarget, yesNo(sh.ChangeMs.Median > 0 && sp.ChangeMs.Median > 0 && sp.ChangeMs.Median <= inPlaceScaleTarget*sh.ChangeMs.Median))
		w("| of which `envoy --mode validate`, median | %s | %s | | |\n", stepMedian(sh.Steps, "validate_ms"), stepMedian(sp.Steps, "validate_ms"))
		w("| of which reading the TOML and its checks (`load_ms`) / comparing the two bootstraps (`plan_ms`), median | %s / %s | %s / %s | | |\n", stepMedian(sh.Steps, "load_ms"), stepMedian(sh.Steps, "plan_ms"), stepMedian(sp.Steps, "load_ms"), stepMedian(sp.Steps, "plan_ms"))
		w("| the apply step, median (`hot_restart_ms` / `in_place_ms`) | %s | %s | | |\n", stepMedian(sh.Steps, "hot_restart_ms"), stepMedian(sp.Steps, "in_place_ms"))
		w("| the agent's own count of the reload (`took_ms`: load, copy, validate, plan, apply), median | %s | %s | %s | |\n", stepMedian(sh.Steps, "took_ms"), stepMedian(sp.Steps, "took_ms"),
			ratio(sp.Steps["took_ms"].Median, sh.Steps["took_ms"].Median))
		w("| the agent's exec to READY=1 (for scale) | %s | %s | | |\n", msf(sh.StartMs), msf(sp.StartMs))
		for _, side := range []InPlaceScaleSide{sh, sp} {
			if side.OtherAnswer != "" {
				w("\n%s: a reload answered otherwise: %s\n", side.Method, oneLine(side.OtherAnswer))
			}
		}
	}
	w("\n")
	meaning(w, "both paths validate the whole new bootstrap first (`envoy --mode validate`), so validation is most of an in-place reload; the hot restart then starts a new Envoy and waits for it to be LIVE, while the in-place path rewrites the epoch's LDS and CDS files and waits until Envoy took them. "+
		"A hot restart moves every connection to the draining epoch, the untouched listener's too: an idle HTTP/1.1 connection whose old epoch exited meanwhile fails its next request; in place, Envoy drains only the changed listener (for `drain_duration`, %.0f s) and the other listener's connections stay as they were. Two Envoys run for the whole drain of a hot restart, so its peak RSS counts both (the hot-restart shared memory in each).", s.DrainMs/1000)
}

// minMax is the smallest and the largest of xs (0, 0 for none).
func minMax(xs []float64) [2]float64 {
	if len(xs) == 0 {
		return [2]float64{}
	}
	return [2]float64{slices.Min(xs), slices.Max(xs)}
}

// idleCell is "failed / sent (failed after a pause / after a pause)".
func idleCell(s IdleStats) string {
	out := fmt.Sprintf("%d / %d (%d / %d)", s.Failed, s.Sent, s.FailedAfterIdle, s.AfterIdle)
	if s.Failed > 0 {
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(s.FailedBy)) {
			parts = append(parts, fmt.Sprintf("%s %d", k, s.FailedBy[k]))
		}
		out += ": " + strings.Join(parts, ", ")
	}
	return out
}

// metricTable starts a table of metrics: a Metric column, cols (numbers,
// aligned right) and a Target column.
func metricTable(w writer, cols ...string) {
	w("| Metric | %s | Target |\n|---|%s---|\n", strings.Join(cols, " | "), strings.Repeat("---:|", len(cols)))
}

// meaning is a part's closing paragraph, on what its numbers mean.
func meaning(w writer, format string, args ...any) {
	w("_What the numbers mean:_ "+format+"\n\n", args...)
}

// Formatting helpers.

func medMax(d Dist) string {
	if d.N == 0 {
		return "—"
	}
	return msf(d.Median) + " / " + msf(d.Max)
}

// duringDrain is "failed/sent" of the load between SIGTERM and the exit,
// with when the first failure was sent.
func duringDrain(s StopSide) string {
	out := fmt.Sprintf("%d/%d", s.LoadDuringDrain.Failed, s.LoadDuringDrain.Sent)
	if s.FirstFailMs >= 0 {
		out += fmt.Sprintf(" (sent from %s after SIGTERM on)", msf(s.FirstFailMs))
	}
	return out
}

func msf(x float64) string {
	switch {
	case x == 0:
		return "0 ms"
	case x < 1 && x > -1:
		return fmt.Sprintf("%.3f ms", x)
	case x < 10 && x > -10:
		return fmt.Sprintf("%.2f ms", x)
	default:
		return fmt.Sprintf("%.1f ms", x)
	}
}

func signed(x float64) string {
	s := msf(x)
	if x >= 0 {
		return "+" + s
	}
	return s
}

func ratio(a, b float64) string {
	if b == 0 {
		return "—"
	}
	return fmt.Sprintf("×%.2f", a/b)
}

func pct(a, b float64) string {
	if b == 0 {
		return "—"
	}
	return fmt.Sprintf("%.1f%%", 100*a/b)
}

func mib(kib int) string { return fmt.Sprintf("%.1f MiB", float64(kib)/1024) }

func kib(bytes int) string { return fmt.Sprintf("%.1f KiB", float64(bytes)/1024) }

func yesNo(ok bool) string {
	if ok {
		return "yes"
	}
	return "**no**"
}

// failed is "N" with the kinds of failure, e.g. "12 (refused 10, reset 2)".
func failed(s LoadStats) string {
	if s.Failed == 0 {
		return "0"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(s.FailedBy)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, s.FailedBy[k]))
	}
	return fmt.Sprintf("%d (%s)", s.Failed, strings.Join(parts, ", "))
}

func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\n", " / ")
	if len(s) > 600 {
		s = s[:600] + "..."
	}
	return s
}

// stepMedian is the median of one step of the agent's reload breakdown
// (its log's *_ms fields), or a dash when the reloads had no such step.
func stepMedian(steps map[string]Dist, k string) string {
	d, ok := steps[k]
	if !ok {
		return "—"
	}
	return msf(d.Median)
}

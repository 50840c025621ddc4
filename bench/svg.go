package main

import (
	"fmt"
	"html"
	"strings"
)

// renderReloadSVG draws scenario 2: successes and failures per time slice,
// the agent above the baseline, each config change shaded.
func renderReloadSVG(r *ReloadResult) string {
	const (
		width, left, right = 1000, 70, 20
		panelH, top, gap   = 200, 60, 70
	)
	height := top + 2*panelH + gap + 60
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	w(`<rect width="100%%" height="100%%" fill="white"/>` + "\n")
	if r == nil {
		w(`<text x="%d" y="40" font-size="16">Reload under load: not run</text></svg>`+"\n", left)
		return b.String()
	}
	w(`<text x="%d" y="24" font-size="16" font-weight="bold">Reload under load: requests per %d ms, by send time</text>`+"\n", left, r.BucketMs)
	w(`<text x="%d" y="44" fill="#444">%d workers, %.0f requests/s; shaded and numbered: each config change (reload or restart) while it runs</text>`+"\n", left, r.Workers, r.RateRPS)

	// Shared scales: time and requests per bucket.
	maxMs, maxN := 1000.0, 1
	for _, s := range []ReloadSide{r.Agent, r.Baseline} {
		maxMs = max(maxMs, s.LoadMs, float64(len(s.Buckets)*r.BucketMs))
		for _, bk := range s.Buckets {
			maxN = max(maxN, bk.OK+bk.Failed)
		}
	}
	plotW := float64(width - left - right)
	x := func(tms float64) float64 { return float64(left) + plotW*tms/maxMs }

	panel := func(y0 int, title string, s ReloadSide) {
		// A fifth of the panel is headroom for the change labels.
		y := func(n int) float64 { return float64(y0+panelH) - 0.8*float64(panelH)*float64(n)/float64(maxN) }
		w(`<text x="%d" y="%d" font-weight="bold">%s</text>`+"\n", left, y0-8, html.EscapeString(title))
		w(`<rect x="%d" y="%d" width="%.0f" height="%d" fill="none" stroke="#999"/>`+"\n", left, y0, plotW, panelH)
		if s.NotAvailable != "" {
			w(`<text x="%.0f" y="%d" text-anchor="middle" font-size="16" fill="#666">%s</text>`+"\n", float64(left)+plotW/2, y0+panelH/2, html.EscapeString(s.NotAvailable))
			return
		}
		bw := max(0.5, plotW*float64(r.BucketMs)/maxMs-0.5)
		for i, bk := range s.Buckets {
			bx := x(float64(i * r.BucketMs))
			if bk.OK > 0 {
				w(`<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#2e9e44"/>`+"\n", bx, y(bk.OK), bw, y(0)-y(bk.OK))
			}
			if bk.Failed > 0 {
				w(`<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#d62728"/>`+"\n", bx, y(bk.OK+bk.Failed), bw, y(bk.OK)-y(bk.OK+bk.Failed))
			}
		}
		// The changes go over the bars, translucent, each numbered in the
		// headroom at the top.
		for i, ev := range s.Events {
			color, label := "#3a6fc4", fmt.Sprintf("%d", i+1)
			if !ev.OK {
				color, label = "#ff7f0e", fmt.Sprintf("%d failed", i+1)
			}
			w(`<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s" fill-opacity="0.3"/>`+"\n", x(ev.StartMs), y0, max(1.5, x(ev.EndMs)-x(ev.StartMs)), panelH, color)
			w(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s" stroke-dasharray="3,3"/>`+"\n", x(ev.StartMs), y0, x(ev.StartMs), y0+panelH, color)
			w(`<text x="%.1f" y="%d" fill="%s" font-size="11">%s</text>`+"\n", x(ev.StartMs)+3, y0+13, color, label)
		}
		// y axis: 0, half, max.
		for _, n := range []int{0, maxN / 2, maxN} {
			w(`<text x="%d" y="%.1f" text-anchor="end">%d</text>`+"\n", left-6, y(n)+4, n)
		}
		w(`<text x="%d" y="%d" text-anchor="end" fill="#444">%d sent, %d failed, %d/%d changes worked</text>`+"\n", width-right, y0-8, s.Load.Sent, s.Load.Failed, s.ChangesOK, s.Changes)
	}
	panel(top+10, "Agent: "+r.Agent.Method, r.Agent)
	panel(top+10+panelH+gap, "Baseline: "+r.Baseline.Method, r.Baseline)

	// Time axis under each panel.
	for _, y0 := range []int{top + 10 + panelH, top + 10 + 2*panelH + gap} {
		for t := 0.0; t <= maxMs; t += 5000 {
			w(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#999"/>`+"\n", x(t), y0, x(t), y0+4)
			w(`<text x="%.1f" y="%d" text-anchor="middle">%.0f s</text>`+"\n", x(t), y0+16, t/1000)
		}
	}
	ly := height - 18
	w(`<rect x="%d" y="%d" width="12" height="12" fill="#2e9e44"/><text x="%d" y="%d">succeeded</text>`+"\n", left, ly-10, left+16, ly)
	w(`<rect x="%d" y="%d" width="12" height="12" fill="#d62728"/><text x="%d" y="%d">failed</text>`+"\n", left+110, ly-10, left+126, ly)
	w(`<rect x="%d" y="%d" width="12" height="12" fill="#3a6fc4" fill-opacity="0.3"/><text x="%d" y="%d">config change N in progress (dashed: its start)</text>`+"\n", left+200, ly-10, left+216, ly)
	w(`<rect x="%d" y="%d" width="12" height="12" fill="#ff7f0e" fill-opacity="0.3"/><text x="%d" y="%d">config change that failed</text>`+"\n", left+520, ly-10, left+536, ly)
	w(`<text x="%d" y="%d" transform="rotate(-90 %d %d)" text-anchor="middle" fill="#444">requests per %d ms</text>`+"\n",
		18, top+10+panelH+gap/2, 18, top+10+panelH+gap/2, r.BucketMs)
	w("</svg>\n")
	return b.String()
}

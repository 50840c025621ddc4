// Package guard is the reload guard's judgement: given Envoy's statistics
// read every second, the minutes before a reload and the window after it,
// it says whether the reload made Envoy's traffic worse, with the signal
// that says so and its figures before and after.
//
// It knows nothing of how the statistics are read or of what a rollback
// does: the daemon reads Envoy's admin API (StatsPath, the listeners, the
// operator's URL through Probe) into a Sample, adds each to a History, and
// at a reload opens a Window on it; each Judge after a read returns a
// Verdict. The signals (Signal) and how each was seen moving in a real
// Envoy are in docs/design.md, "The reload guard". The model is Flagger's
// and Argo Rollouts' analysis: few explicit signals, each with a
// threshold, judged against what it was before the change, only once
// there is enough traffic, and only after it failed several reads in a
// row.
package guard

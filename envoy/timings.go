//go:build linux

package envoy

import "time"

// The timings of the envoy package, each with why it has that value. The
// ones an operator sets (drains, parent shutdown, start timeout) come from
// ProxyConfig and NewAgent instead.
const (
	// epochPoll is how often a starting epoch is checked (its admin address
	// file, then /server_info): a reload ends on average half a poll after
	// the new epoch is LIVE, and a bare hot restart takes about 50 ms, so
	// 10 ms cost a reload 5 ms (10 %) for nothing. One poll is a file read
	// or one admin GET on a kept connection (well under 0.5 ms of CPU), so
	// the 25 or so polls of a start cost little next to Envoy's own.
	epochPoll = 2 * time.Millisecond

	// adminCallTimeout bounds one admin call whose caller polls again
	// (/server_info during a reload, the quit before SIGTERM): Envoy's
	// admin answers in milliseconds, so a second means it is not answering.
	adminCallTimeout = time.Second

	// drainPollTimeoutFloor is the least a drain's connection count may
	// take, however short the poll interval: on a busy machine reading the
	// kernel's socket tables takes tens of milliseconds.
	drainPollTimeoutFloor = 200 * time.Millisecond

	// switchSettle is how often Run looks whether a hot restart under way
	// made its new epoch the serving one, when the serving one exited.
	switchSettle = 10 * time.Millisecond

	// replacedEpochQuitWait is how long a stop lets replaced epochs exit on
	// their own after the serving one quit (Envoy's quit ends its parent
	// too) before it signals them.
	replacedEpochQuitWait = time.Second
)

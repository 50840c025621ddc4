package testenvoy

import (
	"testing"
	"time"

	"github.com/envoy-agent/envoy-agent/internal/envoykit"
)

// Load is the kit's load (envoykit.Load): a request that Go's client would
// have retried silently counts as failed, so "0 failed" means what a client
// that does not retry would see.
type Load = envoykit.Load

// loadRatePerConn is each connection's share of a test load: a request every
// 20 ms, enough to meet every epoch of a reload 200 ms apart and light on a
// shared 2-core machine.
const loadRatePerConn = 50

// loadTimeout bounds one request of a test load: longer than the slowest
// request the tests ask for (envoykit.MaxSlow).
const loadTimeout = 40 * time.Second

// StartLoad starts the kit's keep-alive load on url over conns connections;
// it runs until Stop (or for at most 10 minutes), and is stopped when the
// test ends.
func StartLoad(t testing.TB, url string, conns int) *Load {
	t.Helper()
	l := envoykit.StartLoad(envoykit.LoadOptions{URL: url, Rate: float64(loadRatePerConn * conns), Connections: conns,
		Duration: 10 * time.Minute, Timeout: loadTimeout})
	t.Cleanup(func() { l.Stop() })
	return l
}

// WaitAnswers waits until the load has had n more good answers than now.
func WaitAnswers(t testing.TB, l *Load, n int64) {
	t.Helper()
	from := l.OK()
	if !Eventually(10*time.Second, func() bool { return l.OK() >= from+n }) {
		t.Fatalf("the load got fewer than %d answers in 10s (%d failed, last error: %s)", n, l.Failed(), l.LastErr())
	}
}

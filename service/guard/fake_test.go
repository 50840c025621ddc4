package guard

import (
	"maps"
	"time"
)

// fakeEnvoy stands in for Envoy's counters in the unit tests: it counts
// what a test says happened and gives the Sample a read would.
type fakeEnvoy struct {
	at        time.Time
	stats     map[string]uint64
	listening []string
	probe     *Probe
}

var t0 = time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)

func newFake() *fakeEnvoy {
	return &fakeEnvoy{at: t0, stats: map[string]uint64{}, listening: []string{"127.0.0.1:10000"}}
}

// requests counts n downstream requests through the connection manager
// "ingress" and cluster c, bad of them answered 5xx.
func (f *fakeEnvoy) requests(c string, n, bad uint64) {
	f.stats["http.ingress.downstream_rq_completed"] += n
	f.stats["http.ingress.downstream_rq_5xx"] += bad
	f.stats["cluster."+c+".upstream_rq_completed"] += n
	f.stats["cluster."+c+".upstream_rq_5xx"] += bad
	f.stats["listener.127.0.0.1_10000.downstream_cx_total"] += n
	f.hosts(c, f.stats["cluster."+c+".membership_healthy"], max(f.stats["cluster."+c+".membership_total"], 1))
}

// hosts sets cluster c's membership gauges.
func (f *fakeEnvoy) hosts(c string, healthy, total uint64) {
	f.stats["cluster."+c+".membership_healthy"] = healthy
	f.stats["cluster."+c+".membership_total"] = total
}

// read is the Sample of a read a second after the previous one.
func (f *fakeEnvoy) read() Sample {
	f.at = f.at.Add(time.Second)
	var p *Probe
	if f.probe != nil {
		c := *f.probe
		p = &c
	}
	return Sample{At: f.at, Stats: maps.Clone(f.stats), Listening: append([]string(nil), f.listening...), Probe: p}
}

// second adds a read to h after n requests to cluster c, bad of them 5xx.
func (f *fakeEnvoy) second(h *History, c string, n, bad uint64) {
	f.requests(c, n, bad)
	h.Add(f.read())
}

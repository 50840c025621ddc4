package guard

import (
	"testing"
	"time"
)

func TestHistoryCounts(t *testing.T) {
	h := NewHistory()
	f := newFake()
	f.requests("web", 1000, 10) // before the first read: not counted
	h.Add(f.read())
	m := h.Mark()
	f.second(h, "web", 100, 0)
	// upstream_rq_5xx appears at its first use: it counts from 0.
	f.stats["cluster.new.upstream_rq_5xx"] = 4
	f.requests("new", 4, 0)
	h.Add(f.read())
	got := h.Since(m)
	if got.Downstream != (Share{Part: 0, Of: 104}) {
		t.Errorf("downstream = %+v, want 0 of 104", got.Downstream)
	}
	if c := got.Clusters["new"]; c.Answers != (Share{Part: 4, Of: 4}) {
		t.Errorf("cluster new answers = %+v, want 4 of 4 (a counter that appears counts from 0)", c.Answers)
	}
	if got.Span != 2*time.Second {
		t.Errorf("span %s, want 2s", got.Span)
	}
}

// TestHistoryAcrossProcesses: a counter that went down was reset (a new
// process) and counts from 0; one that vanishes and comes back with its
// value adds nothing (a hot-restarted epoch carries the old one's on).
func TestHistoryAcrossProcesses(t *testing.T) {
	h := NewHistory()
	f := newFake()
	f.requests("web", 500, 0)
	h.Add(f.read())
	m := h.Mark()
	saved := f.stats["http.ingress.downstream_rq_completed"]
	delete(f.stats, "http.ingress.downstream_rq_completed")
	h.Add(f.read())
	f.stats["http.ingress.downstream_rq_completed"] = saved + 20
	h.Add(f.read())
	if got := h.Since(m).Downstream.Of; got != 20 {
		t.Errorf("after vanishing and coming back 20 higher: %d requests, want 20", got)
	}
	f.stats["http.ingress.downstream_rq_completed"] = 7
	h.Add(f.read())
	if got := h.Since(m).Downstream.Of; got != 27 {
		t.Errorf("after a reset to 7: %d requests, want 27", got)
	}
}

// TestHistoryScopes: statistics of a cluster whose name has dots, a
// cluster's sub-scopes (external, internal), per-worker listener copies and
// the admin's own listener and connection manager are told apart.
func TestHistoryScopes(t *testing.T) {
	h := NewHistory()
	f := newFake()
	h.Add(f.read())
	m := h.Mark()
	f.stats["cluster.api.example.com.membership_total"] = 2
	f.stats["cluster.api.example.com.membership_healthy"] = 2
	f.stats["cluster.api.example.com.upstream_rq_completed"] = 9
	f.stats["cluster.api.example.com.external.upstream_rq_5xx"] = 9 // a sub-scope, counted in upstream_rq_5xx too
	f.stats["cluster.api.example.com.upstream_rq_5xx"] = 3
	f.stats["http.admin.downstream_rq_completed"] = 50
	f.stats["http.admin.downstream_rq_5xx"] = 50
	f.stats["listener.admin.downstream_cx_total"] = 50
	f.stats["listener.127.0.0.1_10000.worker_0.downstream_cx_total"] = 50
	f.stats["listener.127.0.0.1_10000.downstream_cx_total"] = 60
	h.Add(f.read())
	got := h.Since(m)
	if c, ok := got.Clusters["api.example.com"]; !ok || c.Answers != (Share{Part: 3, Of: 9}) || c.Healthy != 2 || c.Hosts != 2 {
		t.Errorf("cluster api.example.com = %+v (%v), want 3 of 9 answers, 2 of 2 hosts", c, ok)
	}
	if len(got.Clusters) != 1 {
		t.Errorf("clusters %v, want api.example.com only", sortedKeys(got.Clusters))
	}
	if got.Downstream.Of != 0 {
		t.Errorf("downstream counts the admin's requests: %+v", got.Downstream)
	}
	if l := got.Listeners["127.0.0.1_10000"]; len(got.Listeners) != 1 || l.Refused.Of != 60 || !l.Listening || l.Address != "127.0.0.1:10000" {
		t.Errorf("listeners %+v, want 127.0.0.1:10000 alone, listening, 60 connections", got.Listeners)
	}
}

// TestHistoryBaselineSpan: the baseline reaches BaselineSpan back, not to
// the first read.
func TestHistoryBaselineSpan(t *testing.T) {
	h := NewHistory()
	f := newFake()
	h.Add(f.read())
	for range 600 { // ten minutes: 100 requests a second, all 5xx in the first five
		bad := uint64(0)
		if f.at.Sub(t0) < 5*time.Minute {
			bad = 100
		}
		f.second(h, "web", 100, bad)
	}
	b := h.Baseline()
	if b.Span > BaselineSpan || b.Span < BaselineSpan-checkpointEvery {
		t.Errorf("baseline over %s, want about %s", b.Span, BaselineSpan)
	}
	if b.Downstream.Part != 0 || b.Downstream.Of < 29_000 {
		t.Errorf("baseline %+v: want the last five minutes only (no 5xx, about 30000 requests)", b.Downstream)
	}
}

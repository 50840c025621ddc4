package guard

import (
	"strings"
	"testing"
	"time"
)

// warm gives h a baseline: a minute of 100 requests a second, 1 % 5xx.
func warm(h *History, f *fakeEnvoy) {
	h.Add(f.read())
	for range 60 {
		f.second(h, "web", 100, 1)
	}
}

func TestWindowNeedsReadsInARow(t *testing.T) {
	h, f := NewHistory(), newFake()
	warm(h, f)
	w := h.Open(DefaultThresholds(), f.at, 10*time.Second)
	for i := 1; i < FailuresInARow; i++ {
		f.second(h, "web", 100, 100)
		if v := w.Judge(h, f.at); v.Regression || v.Ended {
			t.Fatalf("read %d of every answer 5xx: %+v, want no verdict yet", i, v)
		}
	}
	f.second(h, "web", 100, 100)
	v := w.Judge(h, f.at)
	if !v.Regression || v.Findings[0].Signal != Downstream5xx {
		t.Fatalf("read %d: %+v, want a regression of downstream 5xx", FailuresInARow, v)
	}
	if want := "5xx answers: 1% of 6000 requests before the reload, 100% of 300 requests after"; v.Reason() != want {
		t.Errorf("reason %q, want %q", v.Reason(), want)
	}
}

// TestWindowCountsEachReadOnce: asked again with no new read (the admin
// API did not answer), a window does not count a failure twice.
func TestWindowCountsEachReadOnce(t *testing.T) {
	h, f := NewHistory(), newFake()
	warm(h, f)
	w := h.Open(DefaultThresholds(), f.at, 10*time.Second)
	f.second(h, "web", 100, 100)
	for range 5 {
		if v := w.Judge(h, f.at.Add(500*time.Millisecond)); v.Regression {
			t.Fatalf("one bad read judged 5 times: %+v", v)
		}
	}
}

// TestWindowBlipAndEnd: a signal over its threshold for fewer reads than
// FailuresInARow is no regression; the window ends at its length with what
// it judged.
func TestWindowBlipAndEnd(t *testing.T) {
	h, f := NewHistory(), newFake()
	warm(h, f)
	f.hosts("web", 2, 2)
	h.Add(f.read())
	w := h.Open(DefaultThresholds(), f.at, 10*time.Second)
	f.hosts("web", 0, 2) // two reads without healthy hosts, then back
	f.second(h, "web", 100, 1)
	w.Judge(h, f.at)
	f.second(h, "web", 100, 1)
	w.Judge(h, f.at)
	f.hosts("web", 2, 2)
	var v Verdict
	for range 8 {
		f.second(h, "web", 100, 1)
		if v = w.Judge(h, f.at); v.Regression {
			t.Fatalf("a two-read blip: %+v", v)
		}
	}
	if !v.Ended || !strings.Contains(v.Summary, "no regression over 10s") || !strings.Contains(v.Summary, "1000 requests") {
		t.Errorf("at the end: %+v, want ended, judged over 10s, 1000 requests", v)
	}
}

func TestWindowURL(t *testing.T) {
	up := &Probe{URL: "http://127.0.0.1:10000/healthz", OK: true, Answer: "200 OK"}
	down := &Probe{URL: up.URL, Answer: "503 Service Unavailable"}
	t.Run("stops answering", func(t *testing.T) {
		h, f := NewHistory(), newFake()
		f.probe = up
		warm(h, f)
		w := h.Open(DefaultThresholds(), f.at, 10*time.Second)
		f.probe = down
		var v Verdict
		for i := range FailuresInARow {
			h.Add(f.read()) // no traffic: only the URL tells
			if v = w.Judge(h, f.at); v.Regression != (i == FailuresInARow-1) {
				t.Fatalf("read %d: %+v", i+1, v)
			}
		}
		if v.Findings[0].Signal != URL || v.Findings[0].Subject != up.URL || !strings.Contains(v.Reason(), "503 Service Unavailable, 3 reads in a row") {
			t.Errorf("finding %v", v.Findings)
		}
	})
	t.Run("failing before the reload", func(t *testing.T) {
		h, f := NewHistory(), newFake()
		f.probe = down
		warm(h, f)
		w := h.Open(DefaultThresholds(), f.at, 5*time.Second)
		var v Verdict
		for range 5 {
			h.Add(f.read())
			if v = w.Judge(h, f.at); v.Regression {
				t.Fatalf("a URL failing before the reload was judged: %+v", v)
			}
		}
		if !v.Ended || !strings.Contains(v.Summary, "not judged: it did not answer 2xx before the reload (503 Service Unavailable)") {
			t.Errorf("summary %q", v.Summary)
		}
	})
}

package guard

import (
	"math/rand/v2"
	"testing"
	"time"
)

// bad draws how many of n requests fail when each fails with probability p.
func bad(r *rand.Rand, n uint64, p float64) uint64 {
	var k uint64
	for range n {
		if r.Float64() < p {
			k++
		}
	}
	return k
}

// TestBackgroundNeverFires: with 1 % of the answers 5xx before and after
// the reload, at light and heavy rates, no window of the default
// thresholds calls a regression (500 windows of 10 s a rate).
func TestBackgroundNeverFires(t *testing.T) {
	for _, rate := range []uint64{5, 20, 100, 1000} {
		r := rand.New(rand.NewPCG(1, rate))
		h, f := NewHistory(), newFake()
		h.Add(f.read())
		for range 300 { // the baseline
			f.second(h, "web", rate, bad(r, rate, 0.01))
		}
		fired := 0
		for range 500 {
			w := h.Open(DefaultThresholds(), f.at, 10*time.Second)
			for {
				f.second(h, "web", rate, bad(r, rate, 0.01))
				v := w.Judge(h, f.at)
				if v.Regression {
					fired++
					t.Logf("%d/s: %s", rate, v.Reason())
				}
				if v.Regression || v.Ended {
					break
				}
			}
			for range 10 { // between reloads
				f.second(h, "web", rate, bad(r, rate, 0.01))
			}
		}
		if fired > 0 {
			t.Errorf("%d requests a second, 1%% 5xx: %d of 500 good reloads called regressions", rate, fired)
		}
	}
}

// TestBrokenRouteFires: every answer 5xx after the reload is a regression
// once MinRequests were counted and FailuresInARow reads said so; at 5
// requests a second, a 10 s window counts too few and ends unjudged.
func TestBrokenRouteFires(t *testing.T) {
	for _, tc := range []struct {
		rate  uint64
		reads int // when it fires; 0: never within the window
	}{{5, 0}, {20, 5}, {50, 3}, {1000, 3}} {
		h, f := NewHistory(), newFake()
		r := rand.New(rand.NewPCG(2, tc.rate))
		h.Add(f.read())
		for range 300 {
			f.second(h, "web", tc.rate, bad(r, tc.rate, 0.01))
		}
		w := h.Open(DefaultThresholds(), f.at, 10*time.Second)
		reads := 0
		var v Verdict
		for !v.Regression && !v.Ended {
			f.second(h, "web", tc.rate, tc.rate)
			reads++
			v = w.Judge(h, f.at)
		}
		if tc.reads == 0 {
			if !v.Ended || v.Regression {
				t.Errorf("%d/s: %+v, want the window to end unjudged", tc.rate, v)
			}
			continue
		}
		if !v.Regression || reads != tc.reads {
			t.Errorf("%d/s: after %d reads %+v, want a regression at read %d", tc.rate, reads, v, tc.reads)
		}
	}
}

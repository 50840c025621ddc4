package guardwatch

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/envoy-agent/envoy-agent/envoy/adminapi"
	"github.com/envoy-agent/envoy-agent/service/guard"
)

// fakeEnvoy stands in for Envoy's admin API: each read of the statistics
// counts perRead more requests, bad of them 5xx; down makes the admin
// API fail.
type fakeEnvoy struct {
	mu           sync.Mutex
	perRead, bad uint64
	down         bool
	completed    uint64
	failed       uint64
	reads        int
}

func (f *fakeEnvoy) Read(_ context.Context, path string) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if path != guard.StatsPath {
		return nil, fmt.Errorf("read %s, want the guard's statistics", path)
	}
	if f.down {
		return nil, errors.New("connection refused")
	}
	f.reads++
	f.completed += f.perRead
	f.failed += f.bad
	return fmt.Appendf(nil, "http.ingress.downstream_rq_completed: %d\nhttp.ingress.downstream_rq_5xx: %d\n", f.completed, f.failed), nil
}

func (f *fakeEnvoy) Listeners(context.Context) ([]adminapi.Listener, error) {
	return []adminapi.Listener{{Name: "ingress", Address: "127.0.0.1:10000"}}, nil
}

func (f *fakeEnvoy) set(perRead, bad uint64, down bool) {
	f.mu.Lock()
	f.perRead, f.bad, f.down = perRead, bad, down
	f.mu.Unlock()
}

func (f *fakeEnvoy) readCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reads
}

// testEvery is the reads' interval in these tests: FailuresInARow of them
// fit many times in the windows below.
const testEvery = 10 * time.Millisecond

func start(t *testing.T, f *fakeEnvoy, on bool) (*Watch, context.CancelFunc) {
	t.Helper()
	var mu sync.Mutex
	settings := Settings{On: on}
	w := New(f, func() Settings { mu.Lock(); defer mu.Unlock(); return settings })
	w.every = testEvery
	ctx, cancel := context.WithCancel(context.Background())
	go w.Run(ctx)
	t.Cleanup(cancel)
	return w, cancel
}

func verdict(t *testing.T, win *Window) Verdict {
	t.Helper()
	select {
	case v := <-win.Verdict():
		return v
	case <-time.After(10 * time.Second):
		t.Fatal("no verdict within 10 s")
		return Verdict{}
	}
}

// waitReads waits until the fake was read n more times.
func waitReads(t *testing.T, f *fakeEnvoy, n int) {
	t.Helper()
	want := f.readCount() + n
	for end := time.Now().Add(10 * time.Second); f.readCount() < want; {
		if time.Now().After(end) {
			t.Fatalf("fewer than %d reads within 10 s", n)
		}
		time.Sleep(testEvery)
	}
}

func TestVerdicts(t *testing.T) {
	th := guard.DefaultThresholds()
	for _, tc := range []struct {
		name      string
		bad       uint64 // of 100 requests a read, after the reload
		down      bool   // the admin API fails after the reload
		want      Outcome
		findingOf guard.Signal
	}{
		{name: "good reload", bad: 1, want: Kept},
		{name: "every answer 5xx", bad: 100, want: Regressed, findingOf: guard.Downstream5xx},
		{name: "admin API down", down: true, want: Kept},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeEnvoy{perRead: 100, bad: 1}
			w, _ := start(t, f, true)
			waitReads(t, f, 5) // the baseline
			w.Hold()
			f.set(100, tc.bad, tc.down)
			applied := time.Now()
			win := w.Open(th, applied, 50*testEvery)
			v := verdict(t, win)
			if v.Outcome != tc.want {
				t.Fatalf("outcome %d, want %d: %+v", v.Outcome, tc.want, v)
			}
			switch tc.want {
			case Regressed:
				if len(v.Findings) == 0 || v.Findings[0].Signal != tc.findingOf || !strings.Contains(v.Reason(), "5xx answers") {
					t.Errorf("findings %+v, want %s first", v.Findings, tc.findingOf)
				}
				if v.At.After(win.Ends()) {
					t.Errorf("the regression was called at %s, after the window's end %s", v.At, win.Ends())
				}
			case Kept:
				if v.At.Before(win.Ends()) || v.Summary == "" {
					t.Errorf("kept at %s with summary %q; want at the window's end %s, with a summary", v.At, v.Summary, win.Ends())
				}
			}
		})
	}
}

// TestHoldKeepsTheApplyOutOfTheBaseline: reads taken while a reload is
// applied (held) are not taken: the window counts from the read before
// the hold, so the failures Envoy counted during the apply are the
// window's, not the baseline's.
func TestHoldKeepsTheApplyOutOfTheBaseline(t *testing.T) {
	f := &fakeEnvoy{perRead: 100}
	w, _ := start(t, f, true)
	waitReads(t, f, 5)
	w.Hold()
	f.set(100, 100, false) // the reload's effect, already counted during the apply
	waitReads(t, f, 3)
	win := w.Open(guard.DefaultThresholds(), time.Now(), 30*testEvery)
	v := verdict(t, win)
	if v.Outcome != Regressed || len(v.Findings) == 0 || !strings.HasPrefix(v.Findings[0].Before, "0% of ") {
		t.Fatalf("%+v, want a regression judged against a baseline without the apply's failures", v)
	}
}

// TestSupersededAndStopped: a window still open when another opens, or
// when the watch is closed or ends, gets that outcome; a window opened
// after the watch ended is Stopped at once.
func TestSupersededAndStopped(t *testing.T) {
	f := &fakeEnvoy{perRead: 100}
	w, cancel := start(t, f, true)
	waitReads(t, f, 2)
	first := w.Open(guard.DefaultThresholds(), time.Now(), time.Hour)
	second := w.Open(guard.DefaultThresholds(), time.Now(), time.Hour)
	if v := verdict(t, first); v.Outcome != Superseded {
		t.Fatalf("the first window: %+v, want superseded", v)
	}
	w.Close(first, Stopped) // not the open one: nothing happens
	third := w.Open(guard.DefaultThresholds(), time.Now(), time.Hour)
	if v := verdict(t, second); v.Outcome != Superseded {
		t.Fatalf("the second window: %+v, want superseded", v)
	}
	cancel()
	if v := verdict(t, third); v.Outcome != Stopped {
		t.Fatalf("the window open at the watch's end: %+v, want stopped", v)
	}
	if v := verdict(t, w.Open(guard.DefaultThresholds(), time.Now(), time.Hour)); v.Outcome != Stopped {
		t.Fatalf("a window opened after the end: %+v, want stopped at once", v)
	}
}

// TestOffReadsNothing: with the guard off, Envoy is not read.
func TestOffReadsNothing(t *testing.T) {
	f := &fakeEnvoy{perRead: 100}
	asked := make(chan struct{}, 100)
	w := New(f, func() Settings { asked <- struct{}{}; return Settings{} })
	w.every = testEvery
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.Run(ctx)
	for range 5 { // five ticks asked the settings
		select {
		case <-asked:
		case <-time.After(10 * time.Second):
			t.Fatal("the settings were not asked within 10 s")
		}
	}
	if n := f.readCount(); n != 0 {
		t.Fatalf("%d reads with the guard off", n)
	}
}

package reloadqueue

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/envoy-agent/envoy-agent/internal/envoykit"
	"github.com/envoy-agent/envoy-agent/service/control"
)

// fake is a daemon whose steps the test drives: each Prepare takes the
// next verdict from verdicts ("good" or "bad"), Wait blocks until the test
// releases it or its context ends, and Apply and Discard are recorded.
type fake struct {
	mu        sync.Mutex
	verdicts  []string
	prepared  int
	forces    []bool // each Prepare's force
	applied   []int  // the prepared reload each Apply got
	discarded []int
	waiting   chan struct{} // a Wait began
	release   chan struct{} // ends a Wait with no error
	inApply   chan struct{} // an Apply began; it returns when applyGo is closed
	applyGo   chan struct{}
}

func newFake(verdicts ...string) *fake {
	return &fake{verdicts: verdicts, waiting: make(chan struct{}, 8), release: make(chan struct{}),
		inApply: make(chan struct{}, 8), applyGo: make(chan struct{})}
}

func (f *fake) funcs(wait bool) Funcs[int] {
	fs := Funcs[int]{
		Prepare: func(_, force bool) (int, bool, control.ReloadResult) {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.prepared++
			f.forces = append(f.forces, force)
			v := "good"
			if len(f.verdicts) > 0 {
				v, f.verdicts = f.verdicts[0], f.verdicts[1:]
			}
			if v == "bad" {
				return 0, false, control.ReloadResult{Error: "bad configuration"}
			}
			return f.prepared, true, control.ReloadResult{}
		},
		Apply: func(p int, run Run) control.ReloadResult {
			f.inApply <- struct{}{}
			<-f.applyGo
			f.mu.Lock()
			defer f.mu.Unlock()
			f.applied = append(f.applied, p)
			return control.ReloadResult{OK: true, Epoch: p, Note: run.Note}
		},
		Discard: func(p int) {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.discarded = append(f.discarded, p)
		},
	}
	if wait {
		fs.Wait = func(ctx context.Context, progress func(string)) (time.Duration, string, error) {
			progress("waiting for epoch 0")
			f.waiting <- struct{}{}
			select {
			case <-f.release:
				return time.Millisecond, "waited for epoch 0", nil
			case <-ctx.Done():
				return time.Millisecond, "", ctx.Err()
			}
		}
	}
	return fs
}

func (f *fake) state() (prepared int, applied, discarded []int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.prepared, append([]int(nil), f.applied...), append([]int(nil), f.discarded...)
}

func get(t *testing.T, ch <-chan control.ReloadResult) control.ReloadResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no answer within 10 s")
		return control.ReloadResult{}
	}
}

func signalled(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not happen within 10 s", what)
	}
}

// TestRequestsDuringARunAreCoalesced: requests made while a reload
// applies are served together by one next run, which prepares once.
func TestRequestsDuringARunAreCoalesced(t *testing.T) {
	f := newFake()
	q := New(f.funcs(false))
	first := q.Request(nil, false)
	signalled(t, f.inApply, "the first apply")
	later := []<-chan control.ReloadResult{q.Request(nil, false), q.Request(nil, false), q.Request(nil, false)}
	close(f.applyGo)
	if r := get(t, first); !r.OK || r.Epoch != 1 {
		t.Fatalf("first: %+v", r)
	}
	for i, ch := range later {
		if r := get(t, ch); !r.OK || r.Epoch != 2 {
			t.Fatalf("later %d: %+v, want the one next run (prepared 2)", i, r)
		}
	}
	if prepared, applied, _ := f.state(); prepared != 2 || len(applied) != 2 {
		t.Fatalf("prepared %d, applied %v; want 2 runs for 4 requests", prepared, applied)
	}
	if !q.CloseWithin(5 * time.Second) {
		t.Fatal("the queue did not go idle")
	}
}

// TestRefusals: a bad configuration is answered with Prepare's refusal
// and nothing is applied; after CloseWithin every request is refused.
func TestRefusals(t *testing.T) {
	f := newFake("bad")
	close(f.applyGo)
	q := New(f.funcs(false))
	if r := get(t, q.Request(nil, false)); r.OK || r.Error != "bad configuration" {
		t.Fatalf("a bad configuration: %+v", r)
	}
	if _, applied, _ := f.state(); len(applied) != 0 {
		t.Fatalf("applied %v after a refusal", applied)
	}
	if r := get(t, q.Request(nil, false)); !r.OK {
		t.Fatalf("a good one after it: %+v", r)
	}
	if !q.CloseWithin(5 * time.Second) {
		t.Fatal("the queue did not go idle")
	}
	if r := get(t, q.Request(nil, false)); r.OK || r.Error != "the agent is stopping" {
		t.Fatalf("a request after CloseWithin: %+v", r)
	}
}

// TestRequestDuringAWait: a run waiting (for a draining epoch) tells its
// callers what it waits for; a bad request arriving meanwhile is refused
// at once while the run goes on; a good one replaces the prepared reload
// (the old one discarded), joins the run and hears what it waits for.
func TestRequestDuringAWait(t *testing.T) {
	f := newFake("good", "bad", "good")
	close(f.applyGo)
	q := New(f.funcs(true))
	var mu sync.Mutex
	var heard []string
	hear := func(who string) func(string) {
		return func(msg string) { mu.Lock(); heard = append(heard, who+": "+msg); mu.Unlock() }
	}
	first := q.Request(hear("first"), false)
	signalled(t, f.waiting, "the wait")
	if r := get(t, q.Request(nil, false)); r.OK || r.Error != "bad configuration" {
		t.Fatalf("a bad request during the wait: %+v, want refused at once", r)
	}
	signalled(t, f.waiting, "the wait, resumed")
	good := q.Request(hear("good"), false)
	signalled(t, f.waiting, "the wait, resumed again")
	close(f.release)
	r1, r2 := get(t, first), get(t, good)
	if !r1.OK || r1.Epoch != 3 || r2.Epoch != 3 || r1.Note != "waited for epoch 0" {
		t.Fatalf("answers %+v and %+v; want both from the third preparation, with the wait's note", r1, r2)
	}
	prepared, applied, discarded := f.state()
	if prepared != 3 || len(applied) != 1 || applied[0] != 3 || len(discarded) != 1 || discarded[0] != 1 {
		t.Fatalf("prepared %d, applied %v, discarded %v; want 3, [3], [1]", prepared, applied, discarded)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(heard) != 2 || heard[0] != "first: waiting for epoch 0" || heard[1] != "good: waiting for epoch 0" {
		t.Fatalf("progress heard: %q", heard)
	}
}

// TestCloseEndsAWait: a stop ends a run's wait; its callers get the
// wait's error and the prepared reload is discarded, never applied.
func TestCloseEndsAWait(t *testing.T) {
	f := newFake()
	close(f.applyGo)
	q := New(f.funcs(true))
	ch := q.Request(nil, false)
	signalled(t, f.waiting, "the wait")
	if !q.CloseWithin(10 * time.Second) {
		t.Fatal("CloseWithin did not end the run")
	}
	r := get(t, ch)
	if r.OK || r.Error != context.Canceled.Error() {
		t.Fatalf("the answer after a stop: %+v", r)
	}
	if _, applied, discarded := f.state(); len(applied) != 0 || len(discarded) != 1 {
		t.Fatalf("applied %v, discarded %v; want none applied, one discarded", applied, discarded)
	}
}

// TestCloseWithinGivesUpOnAHungRun: a stop does not wait past its bound
// for a reload that hangs in Apply.
func TestCloseWithinGivesUpOnAHungRun(t *testing.T) {
	f := newFake()
	q := New(f.funcs(false))
	ch := q.Request(nil, false)
	signalled(t, f.inApply, "the apply")
	if q.CloseWithin(50 * time.Millisecond) {
		t.Fatal("CloseWithin reported a hung run as ended")
	}
	close(f.applyGo)
	if r := get(t, ch); !r.OK {
		t.Fatalf("the run, once unblocked: %+v", r)
	}
}

// TestNeedsWait: a prepared reload that needs no wait (in place: it starts
// no epoch) is applied without waiting.
func TestNeedsWait(t *testing.T) {
	f := newFake()
	close(f.applyGo)
	fs := f.funcs(true)
	fs.NeedsWait = func(int) bool { return false }
	q := New(fs)
	if r := get(t, q.Request(nil, false)); !r.OK {
		t.Fatalf("%+v", r)
	}
	select {
	case <-f.waiting:
		t.Fatal("waited although NeedsWait said no")
	default:
	}
}

// TestForceJoinsTheRun: a run prepares with force when any request it
// serves was forced, whether it came first, was coalesced with others, or
// joined during a wait.
func TestForceJoinsTheRun(t *testing.T) {
	f := newFake()
	q := New(f.funcs(false))
	first := q.Request(nil, false)
	signalled(t, f.inApply, "the first apply")
	later := []<-chan control.ReloadResult{q.Request(nil, false), q.Request(nil, true), q.Request(nil, false)}
	close(f.applyGo)
	get(t, first)
	for _, ch := range later {
		get(t, ch)
	}
	get(t, q.Request(nil, false))
	f.mu.Lock()
	forces := append([]bool(nil), f.forces...)
	f.mu.Unlock()
	if len(forces) != 3 || forces[0] || !forces[1] || forces[2] {
		t.Fatalf("Prepare's force per run: %v; want [false true false] (the coalesced run forced by one of its three)", forces)
	}

	w := newFake("good", "good")
	close(w.applyGo)
	qw := New(w.funcs(true))
	ch := qw.Request(nil, false)
	signalled(t, w.waiting, "the wait")
	joined := qw.Request(nil, true)
	signalled(t, w.waiting, "the wait, resumed")
	close(w.release)
	get(t, ch)
	get(t, joined)
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.forces) != 2 || w.forces[0] || !w.forces[1] {
		t.Fatalf("Prepare's force: %v; want the preparation of the forced request that joined the wait forced", w.forces)
	}
}

// TestJobsRunAlone: a job asked for while a reload applies runs after
// that run and before the next one, which a request made meanwhile
// starts; a job asked for during a wait does not join the run; after
// CloseWithin a job is refused.
func TestJobsRunAlone(t *testing.T) {
	f := newFake()
	q := New(f.funcs(false))
	first := q.Request(nil, false)
	signalled(t, f.inApply, "the first apply")
	var order []string
	var mu sync.Mutex
	note := func(s string) { mu.Lock(); order = append(order, s); mu.Unlock() }
	jobDone := make(chan bool, 1)
	go func() {
		jobDone <- q.Do(func(context.Context) {
			_, applied, _ := f.state()
			note(fmt.Sprintf("job after %d applies", len(applied)))
		})
	}()
	pendingJob(t, q)
	second := q.Request(nil, false)
	close(f.applyGo)
	get(t, first)
	if ran := <-jobDone; !ran {
		t.Fatal("the job did not run")
	}
	get(t, second)
	if _, applied, _ := f.state(); len(applied) != 2 || len(order) != 1 || order[0] != "job after 1 applies" {
		t.Fatalf("applied %v, job: %v; want the job between the two runs", applied, order)
	}

	w := newFake()
	close(w.applyGo)
	qw := New(w.funcs(true))
	ch := qw.Request(nil, false)
	signalled(t, w.waiting, "the wait")
	ran := make(chan bool, 1)
	go func() {
		ran <- qw.Do(func(context.Context) {
			if _, applied, _ := w.state(); len(applied) != 1 {
				t.Errorf("the job ran before the waiting run applied (%v)", applied)
			}
		})
	}()
	pendingJob(t, qw)
	close(w.release)
	get(t, ch)
	if !<-ran {
		t.Fatal("the job asked for during the wait did not run")
	}
	if !qw.CloseWithin(5 * time.Second) {
		t.Fatal("the queue did not go idle")
	}
	if qw.Do(func(context.Context) { t.Error("a job ran after CloseWithin") }) {
		t.Fatal("Do after CloseWithin reported the job ran")
	}
}

// pendingJob waits until q holds one request, the job just asked for.
func pendingJob(t *testing.T, q *Queue[int]) {
	t.Helper()
	if !envoykit.Eventually(10*time.Second, func() bool { q.mu.Lock(); defer q.mu.Unlock(); return len(q.pending) == 1 }) {
		t.Fatal("the job was not queued within 10 s")
	}
}

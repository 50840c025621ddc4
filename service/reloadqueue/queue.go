// Package reloadqueue runs a daemon's reloads one at a time and coalesces
// the requests that arrive meanwhile. It knows nothing of Envoy: the daemon
// gives it how to prepare a reload (re-read and check the files), how to
// wait before applying one (for a draining epoch), and how to apply and
// discard one; the queue decides when each runs and who hears what.
//
// A request made while a reload runs waits for the next run, which serves
// every request made meanwhile: each sees the files as they were when that
// run began. A run first prepares, and answers a bad configuration at
// once. Then, when the prepared reload needs it, it waits (Wait) and only
// then applies. A request that arrives during that wait is prepared at
// once: a bad configuration is refused then and there, while the run goes
// on with the files it validated; a good one replaces them, and its
// requests join the run. A request may be forced (Request's force): the
// run that serves it prepares with force, as does a run that any of its
// coalesced requests forced.
//
// Other work that must not run beside a reload (a dry run's plan, the
// reload guard's rollback) is a job (Do): it runs between two runs, alone,
// and is never coalesced; a request that arrives during a run's wait
// joins that run, a job waits for its end.
package reloadqueue

import (
	"context"
	"sync"
	"time"

	"github.com/envoy-agent/envoy-agent/service/control"
)

// Funcs are what the daemon does at each step of a run, for its prepared
// reload type P.
type Funcs[P any] struct {
	// Prepare re-reads and checks the files; nested is true for a request
	// that arrived while a run waits, force when a request the run serves
	// was forced. ok false: refused, with res.
	Prepare func(nested, force bool) (p P, ok bool, res control.ReloadResult)
	// Wait, when not nil and NeedsWait(p), runs before Apply: it returns
	// how long it waited and a note for the answer. It ends with an error
	// when ctx ends: at a stop, or when a request arrives meanwhile.
	// progress hears at once what it waits for.
	Wait      func(ctx context.Context, progress func(string)) (time.Duration, string, error)
	NeedsWait func(P) bool
	// Apply carries the prepared reload out and returns the answer, the
	// whole of it: the queue only hands it to every request the run
	// serves. run says when the run began and what it waited for.
	Apply func(p P, run Run) control.ReloadResult
	// Discard lets go of a prepared reload that will not run.
	Discard func(P)
}

// Run is what a run did before it applied its reload: when it began (its
// first Prepare) and how long it waited, with the wait's note.
type Run struct {
	Start  time.Time
	Waited time.Duration
	Note   string
}

// Queue runs reloads one at a time (see the package doc).
type Queue[P any] struct {
	f Funcs[P]

	ctx    context.Context // ended by CloseWithin: a stop ends a wait
	cancel context.CancelFunc

	mu      sync.Mutex
	running bool
	closed  bool
	pending []request
	arrived chan struct{} // a request came while a run is under way (a hint: pending is the truth)
	idle    chan struct{} // closed while no run is going on
}

// request is one caller's request: the result comes on result, and
// progress (when not nil) hears at once what the run waits for. A job's
// request is job, and done closes once it ran (or was refused: ran false).
type request struct {
	result   chan control.ReloadResult
	progress func(string)
	force    bool

	job  func(context.Context)
	done chan bool
}

// forced reports whether any of batch was forced.
func forced(batch []request) bool {
	for _, r := range batch {
		if r.force {
			return true
		}
	}
	return false
}

// New returns an idle queue.
func New[P any](f Funcs[P]) *Queue[P] {
	idle := make(chan struct{})
	close(idle)
	ctx, cancel := context.WithCancel(context.Background())
	return &Queue[P]{f: f, idle: idle, ctx: ctx, cancel: cancel, arrived: make(chan struct{}, 1)}
}

// Request asks for a reload, forced or not; the channel gets its result.
// progress may be nil.
func (q *Queue[P]) Request(progress func(string), force bool) <-chan control.ReloadResult {
	ch := make(chan control.ReloadResult, 1)
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		ch <- control.ReloadResult{Error: "the agent is stopping"}
		return ch
	}
	q.enqueue(request{result: ch, progress: progress, force: force})
	return ch
}

// Do runs job alone, between two runs, once the run under way and the
// jobs asked for before it are done; it waits for job's end and reports
// whether it ran (false: the queue is closed). job's context ends at a
// stop (CloseWithin).
func (q *Queue[P]) Do(job func(context.Context)) bool {
	done := make(chan bool, 1)
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return false
	}
	q.enqueue(request{job: job, done: done})
	q.mu.Unlock()
	return <-done
}

// enqueue adds r to the pending requests and starts the loop when it is
// idle; q.mu is held.
func (q *Queue[P]) enqueue(r request) {
	q.pending = append(q.pending, r)
	if !q.running {
		q.running = true
		q.idle = make(chan struct{})
		go q.loop()
		return
	}
	if r.job == nil {
		select {
		case q.arrived <- struct{}{}:
		default:
		}
	}
}

// takePending returns the pending requests; with last, when there are
// none, the loop ends (running false, idle closed). With reloadsOnly
// (during a run's wait), jobs stay pending.
func (q *Queue[P]) takePending(last, reloadsOnly bool) []request {
	q.mu.Lock()
	defer q.mu.Unlock()
	var batch, kept []request
	for _, r := range q.pending {
		if reloadsOnly && r.job != nil {
			kept = append(kept, r)
		} else {
			batch = append(batch, r)
		}
	}
	q.pending = kept
	if len(batch) == 0 && last {
		q.running = false
		close(q.idle)
	}
	return batch
}

// loop serves the pending requests until there are none: the jobs first,
// each alone, then one run for the reloads.
func (q *Queue[P]) loop() {
	for {
		batch := q.takePending(true, false)
		if len(batch) == 0 {
			return
		}
		var reloads []request
		for _, r := range batch {
			if r.job == nil {
				reloads = append(reloads, r)
				continue
			}
			if q.ctx.Err() != nil { // a stop: a job is not a reload asked for
				r.done <- false
				continue
			}
			r.job(q.ctx)
			r.done <- true
		}
		if len(reloads) > 0 {
			q.run(reloads)
		}
	}
}

// run carries out one reload for batch: prepare, wait, apply.
func (q *Queue[P]) run(batch []request) {
	start := time.Now()
	p, ok, res := q.f.Prepare(false, forced(batch))
	if !ok {
		answerAll(batch, res)
		return
	}
	var waited time.Duration
	var note, said string
	progress := func(msg string) {
		if said == "" { // once per run: a resumed wait says it again
			said = msg
			tellAll(batch, msg)
		}
	}
	for q.f.Wait != nil && (q.f.NeedsWait == nil || q.f.NeedsWait(p)) {
		ctx, stop := context.WithCancel(q.ctx)
		go func() {
			select {
			case <-q.arrived:
				stop()
			case <-ctx.Done():
			}
		}()
		d, n, err := q.f.Wait(ctx, progress)
		stop()
		waited += d
		if n != "" {
			note = n
		}
		if err == nil {
			break
		}
		if q.ctx.Err() != nil { // a stop
			q.f.Discard(p)
			answerAll(batch, control.ReloadResult{Error: err.Error(), TookMs: waited.Milliseconds(), WaitedMs: waited.Milliseconds(), Note: note})
			return
		}
		// A request arrived during the wait: check its files now.
		later := q.takePending(false, true)
		if len(later) == 0 {
			continue
		}
		np, nok, nres := q.f.Prepare(true, forced(batch) || forced(later))
		if !nok {
			answerAll(later, nres)
			continue
		}
		q.f.Discard(p)
		p, batch = np, append(batch, later...)
		if said != "" {
			tellAll(later, said)
		}
	}
	answerAll(batch, q.f.Apply(p, Run{Start: start, Waited: waited, Note: note}))
}

func answerAll(batch []request, res control.ReloadResult) {
	for _, r := range batch {
		r.result <- res
	}
}

func tellAll(batch []request, msg string) {
	for _, r := range batch {
		if r.progress != nil {
			r.progress(msg)
		}
	}
}

// CloseWithin refuses new requests and jobs, ends a wait under way (and a
// job's context), and waits for the reload under way, if any, and those
// already asked for, up to d; it reports whether they ended. Jobs not
// begun do not run. A stop must not wait on a reload that hangs.
func (q *Queue[P]) CloseWithin(d time.Duration) bool {
	q.cancel()
	q.mu.Lock()
	q.closed = true
	idle := q.idle
	q.mu.Unlock()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-idle:
		return true
	case <-t.C:
		return false
	}
}

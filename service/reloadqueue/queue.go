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
// requests join the run.
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
	// that arrived while a run waits. ok false: refused, with res.
	Prepare func(nested bool) (p P, ok bool, res control.ReloadResult)
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
// progress (when not nil) hears at once what the run waits for.
type request struct {
	result   chan control.ReloadResult
	progress func(string)
}

// New returns an idle queue.
func New[P any](f Funcs[P]) *Queue[P] {
	idle := make(chan struct{})
	close(idle)
	ctx, cancel := context.WithCancel(context.Background())
	return &Queue[P]{f: f, idle: idle, ctx: ctx, cancel: cancel, arrived: make(chan struct{}, 1)}
}

// Request asks for a reload; the channel gets its result. progress may be
// nil.
func (q *Queue[P]) Request(progress func(string)) <-chan control.ReloadResult {
	ch := make(chan control.ReloadResult, 1)
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		ch <- control.ReloadResult{Error: "the agent is stopping"}
		return ch
	}
	q.pending = append(q.pending, request{result: ch, progress: progress})
	if !q.running {
		q.running = true
		q.idle = make(chan struct{})
		go q.loop()
		return ch
	}
	select {
	case q.arrived <- struct{}{}:
	default:
	}
	return ch
}

// takePending returns the pending requests; with last, when there are
// none, the loop ends (running false, idle closed).
func (q *Queue[P]) takePending(last bool) []request {
	q.mu.Lock()
	defer q.mu.Unlock()
	batch := q.pending
	q.pending = nil
	if len(batch) == 0 && last {
		q.running = false
		close(q.idle)
	}
	return batch
}

func (q *Queue[P]) loop() {
	for {
		batch := q.takePending(true)
		if len(batch) == 0 {
			return
		}
		q.run(batch)
	}
}

// run carries out one reload for batch: prepare, wait, apply.
func (q *Queue[P]) run(batch []request) {
	start := time.Now()
	p, ok, res := q.f.Prepare(false)
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
		later := q.takePending(false)
		if len(later) == 0 {
			continue
		}
		np, nok, nres := q.f.Prepare(true)
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

// CloseWithin refuses new requests, ends a wait under way, and waits for
// the reload under way, if any, and those already asked for, up to d; it
// reports whether they ended. A stop must not wait on a reload that hangs.
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

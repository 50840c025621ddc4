// A change carried out in a running Envoy: the steps planned, then run,
// and put back when Envoy rejects one.

package inplace

import (
	"context"
	"slices"
	"time"
)

// RejectedError is a change Envoy refused; the previous resources were
// put back.
type RejectedError struct {
	Reason string
	// Restored is false when putting the previous files back failed too.
	Restored bool
}

func (e *RejectedError) Error() string {
	if e.Restored {
		return "Envoy rejected the change, the previous listeners and clusters were put back: " + e.Reason
	}
	return "Envoy rejected the change and the previous files could not be put back: " + e.Reason
}

// applyTimeout bounds each wait for Envoy to read a file, and for what a
// step added to be warm.
const applyTimeout = 10 * time.Second

// Apply carries c out in the Envoy that runs old from the resource files
// in dir: c is what Compare(old, new) found, which the caller computed
// once. It plans the steps (planSteps) and runs them, each confirmed
// through Envoy's admin API (files, confirm.go): nil once Envoy took every
// one. When Envoy rejects a step, or what it added does not warm, the files
// it had before are put back and the error is a *RejectedError with
// Envoy's reason.
func Apply(ctx context.Context, dir string, old, new *Bootstrap, c Change, admin Admin) error {
	if c.Empty() {
		return nil
	}
	p, err := planSteps(dir, old, new, c)
	if err != nil {
		return err
	}
	return p.run(ctx, files{dir: dir, admin: admin})
}

// A step is one file of the resource folder put in place: the subscription
// that reads it (kind), its text after the step (data) and before the
// change began (undo, what a put-back restores; nil when it was not
// there).
type step struct {
	kind       kind
	data, undo []byte
	// confirm: Envoy reads the file at once, and the step waits for its
	// answer. An added route's or secret's file is read when the listener
	// or cluster that names it arrives, whose step confirms it.
	confirm bool
	// warm: the listeners or clusters the step adds serve nothing until
	// they are warm, and the step waits until they are.
	warm bool
}

// carrier puts a step's file where Envoy reads it and, when the step says
// so, waits for Envoy's answer: nil when Envoy took it (and what it added
// is warm), else Envoy's reason. remove takes back a file that was not
// there before the change. It is the one piece that knows how resources
// reach Envoy (files, confirm.go).
type carrier interface {
	carry(ctx context.Context, s step) error
	remove(k kind)
}

// plan is a change as steps, in order, and the files left to remove once
// they all passed (the removed routes' and secrets').
type plan struct {
	steps    []step
	obsolete []kind
}

// planSteps orders the change c from old to new (resource files in dir) in
// two stages. First what existing listeners do not serve, which is what
// can fail on this host while Envoy's validation passed it: the files of
// added secrets and routes, the added clusters (warm: initialised), the
// added listeners (bound and warm). Then what existing listeners serve:
// the clusters updated, the secrets and routes updated, the listeners
// updated and removed, the clusters removed. A refusal in the first stage
// has served nothing of the new configuration on existing listeners. The
// order also never routes to a missing cluster nor names a missing file:
// a cluster is removed after the listeners that use it, a route or secret
// file is written before what names it and removed after.
func planSteps(dir string, old, new *Bootstrap, c Change) (*plan, error) {
	b := stepBuilder{dir: dir}
	routeOf := func(name string) kind { return routeKind(name, new.prefixes[name]) }
	// The files as they are, made only for what changes: encoding the
	// listener file of 1,000 listeners took 170 ms, most of a route
	// change's apply.
	oldCDS := b.once(func() ([]byte, error) { return old.cdsData(dir) })
	oldLDS := b.once(func() ([]byte, error) { return old.ldsData(dir) })

	// What existing listeners do not serve.
	for _, r := range pick(new.secrets, c.Secrets.Added) {
		b.add(step{kind: secretKind(r.name)}, b.file(secretData, r), nil)
	}
	for _, r := range pick(new.routes, c.Routes.Added) {
		b.add(step{kind: routeOf(r.name)}, b.file(routeData, r), nil)
	}
	if len(c.Clusters.Added) > 0 {
		b.add(step{kind: cds, confirm: true, warm: true}, b.resources(clusterType, between(old.clusters, new.clusters, c.Clusters.Updated, c.Clusters.Removed)), oldCDS)
	}
	if len(c.Listeners.Added) > 0 {
		b.add(step{kind: lds, confirm: true, warm: true}, b.resources(listenerType, between(old.listeners, new.listeners, c.Listeners.Updated, c.Listeners.Removed)), oldLDS)
	}

	// What existing listeners serve.
	if len(c.Clusters.Updated) > 0 {
		b.add(step{kind: cds, confirm: true}, b.resources(clusterType, between(old.clusters, new.clusters, nil, c.Clusters.Removed)), oldCDS)
	}
	// Secrets before routes: a route's filter may read one.
	for _, r := range pick(new.secrets, c.Secrets.Updated) {
		b.add(step{kind: secretKind(r.name), confirm: true}, b.file(secretData, r), b.file(secretData, pick(old.secrets, []string{r.name})[0]))
	}
	for _, r := range pick(new.routes, c.Routes.Updated) {
		b.add(step{kind: routeOf(r.name), confirm: true}, b.file(routeData, r), b.file(routeData, pick(old.routes, []string{r.name})[0]))
	}
	if len(c.Listeners.Updated)+len(c.Listeners.Removed) > 0 {
		b.add(step{kind: lds, confirm: true}, b.resources(listenerType, new.listeners), oldLDS)
	}
	if len(c.Clusters.Removed) > 0 {
		b.add(step{kind: cds, confirm: true}, b.resources(clusterType, new.clusters), oldCDS)
	}
	if b.err != nil {
		return nil, b.err
	}
	for _, name := range c.Routes.Removed {
		b.plan.obsolete = append(b.plan.obsolete, routeKind(name, ""))
	}
	for _, name := range c.Secrets.Removed {
		b.plan.obsolete = append(b.plan.obsolete, secretKind(name))
	}
	return &b.plan, nil
}

// stepBuilder makes a plan's files, keeping the first error.
type stepBuilder struct {
	dir  string
	plan plan
	err  error
}

// add appends s with the file data makes, and the file undo makes (nil:
// none) to put back.
func (b *stepBuilder) add(s step, data, undo func() ([]byte, error)) {
	if b.err != nil {
		return
	}
	if s.data, b.err = data(); b.err != nil {
		return
	}
	if undo != nil {
		s.undo, b.err = undo()
	}
	b.plan.steps = append(b.plan.steps, s)
}

// once is f, called at most once.
func (b *stepBuilder) once(f func() ([]byte, error)) func() ([]byte, error) {
	var data []byte
	var err error
	done := false
	return func() ([]byte, error) {
		if !done {
			data, err = f()
			done = true
		}
		return data, err
	}
}

// file is the file of one route configuration or secret.
func (b *stepBuilder) file(f func(resource, string) ([]byte, error), r resource) func() ([]byte, error) {
	return func() ([]byte, error) { return f(r, b.dir) }
}

// resources is the LDS or CDS file of rs.
func (b *stepBuilder) resources(typ string, rs []resource) func() ([]byte, error) {
	return func() ([]byte, error) { return resourceData(typ, rs, b.dir) }
}

// pick is the resources of rs named in names, in rs's order.
func pick(rs []resource, names []string) []resource {
	var out []resource
	for _, r := range rs {
		if slices.Contains(names, r.name) {
			out = append(out, r)
		}
	}
	return out
}

// between is the resources of new, those named in older as they are in
// old, then those of old named in gone: a state between old and new.
func between(old, new []resource, older, gone []string) []resource {
	out := make([]resource, 0, len(new)+len(gone))
	for _, r := range new {
		if slices.Contains(older, r.name) {
			r = pick(old, []string{r.name})[0]
		}
		out = append(out, r)
	}
	return append(out, pick(old, gone)...)
}

// run carries each step out through via, in order; when one fails, it puts
// back what the steps up to it changed (putBack). Once all passed, the
// obsolete files go.
func (p *plan) run(ctx context.Context, via carrier) error {
	for i, s := range p.steps {
		if err := via.carry(ctx, s); err != nil {
			return p.putBack(ctx, i, err, via)
		}
	}
	for _, k := range p.obsolete {
		via.remove(k) // a leftover is harmless: nothing reads it
	}
	return nil
}

// putBack restores, in reverse order, the file of each step up to the
// failed one as it was before the change (once per file; a file that was
// not there is removed), each confirmed as a step is. The error is a
// *RejectedError with why the step failed.
func (p *plan) putBack(ctx context.Context, failed int, why error, via carrier) error {
	rej := &RejectedError{Reason: why.Error(), Restored: true}
	ctx = context.WithoutCancel(ctx)
	done := map[string]bool{}
	for i := failed; i >= 0; i-- {
		s := p.steps[i]
		if done[s.kind.file] {
			continue
		}
		done[s.kind.file] = true
		if s.undo == nil {
			via.remove(s.kind)
			continue
		}
		if err := via.carry(ctx, step{kind: s.kind, data: s.undo, confirm: s.confirm}); err != nil {
			rej.Restored = false
			rej.Reason += "; putting back " + s.kind.file + ": " + err.Error()
		}
	}
	return rej
}

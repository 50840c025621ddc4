// A change carried out in a running Envoy: the steps planned, then run,
// and put back when Envoy rejects one.

package inplace

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"time"

	"github.com/envoy-agent/envoy-agent/envoy/xds/ads"
)

// RejectedError is a change Envoy refused; the previous resources were
// put back.
type RejectedError struct {
	Reason string
	// Restored is false when putting the previous resources back failed too.
	Restored bool
}

func (e *RejectedError) Error() string {
	if e.Restored {
		return "Envoy rejected the change, the previous resources were put back: " + e.Reason
	}
	return "Envoy rejected the change and the previous resources could not be put back: " + e.Reason
}

// applyTimeout bounds each wait for Envoy to take a step, and for what a
// step added to be warm.
const applyTimeout = 10 * time.Second

// Running is the Envoy epoch a change is carried out in, or checked: the
// folder of its resource files (Write), its admin API, and the agent's ADS
// server with the epoch's name there.
type Running struct {
	Dir   string
	Admin Admin
	ADS   ADS
	Epoch string
}

// ADS is the part of the agent's ADS server (envoy/xds.Server, as
// ads.Server) that Apply and Accepted use.
type ADS interface {
	Update(ctx context.Context, epoch string, t ads.Type, rs []ads.Resource, remove []string) (ads.Outcome, error)
	Status() map[string]ads.EpochStatus
}

// Apply carries c out in the Envoy epoch r, which runs old: c is what
// Compare(old, new) found, which the caller computed once. It plans the
// steps (planSteps) and runs them, each confirmed (carrier, confirm.go:
// Envoy's admin API for the listener and cluster files, its ACK for the
// route configurations and secrets over ADS): nil once Envoy took every
// one. When Envoy rejects a step, or what it added does not warm, what
// Envoy had before is put back and the error is a *RejectedError with
// Envoy's reason.
func Apply(ctx context.Context, r Running, old, new *Bootstrap, c Change) error {
	if c.Empty() {
		return nil
	}
	if !filepath.IsAbs(r.Dir) {
		return errors.New("reload in place: the resource folder is not an absolute path")
	}
	if !new.converted() {
		return errors.New("reload in place: the new bootstrap was parsed without converting its routes and secrets")
	}
	p, err := planSteps(old, new, c, r.Epoch)
	if err != nil {
		return err
	}
	return p.run(ctx, toEnvoy{r})
}

// A step is one change Envoy takes at once: a resource file (LDS, CDS)
// written, or route configurations or secrets put or removed over ADS.
// after is what the step puts in place, before what was there when the
// change began (what a put-back restores).
type step struct {
	kind          kind
	after, before payload
	// confirm: Envoy takes the step at once, and it waits for Envoy's
	// answer. An added route or secret is read when the listener or
	// cluster that names it arrives, whose step confirms it.
	confirm bool
	// warm: the listeners or clusters the step adds serve nothing until
	// they are warm, and the step waits until they are, and until Envoy
	// answered for the route configurations and secrets added before them
	// (watch) that it asks for: a rejection of one fails the step with
	// Envoy's reason.
	warm  bool
	watch []ads.Resource
}

// payload is what a step puts in place: a file's text (nil: no file), or
// resources put and names removed over ADS.
type payload struct {
	file   []byte
	put    []ads.Resource
	remove []string
}

// carrier carries a step out and, when the step says so, waits for Envoy's
// answer: nil when Envoy took it (and what it added is warm), else
// Envoy's reason. It is the one piece that knows how resources reach
// Envoy (toEnvoy, confirm.go).
type carrier interface {
	carry(ctx context.Context, s step) error
}

// plan is a change as steps, in order, and what is removed once they all
// passed (the route configurations and secrets no listener names any
// more).
type plan struct {
	steps    []step
	obsolete []step
}

// planSteps orders the change c from old to new, in the epoch named
// epoch, in two stages. First what
// existing listeners do not serve, which is what can fail on this host
// while Envoy's validation passed it: the added secrets and routes (put on
// the ADS server, which sends them when what names them subscribes), the
// added clusters (warm: initialised), the added listeners (bound and
// warm). Then what existing listeners serve: the clusters updated, the
// secrets and routes updated (each confirmed by Envoy's ACK), the
// listeners updated and removed, the clusters removed. A refusal in the
// first stage has served nothing of the new configuration on existing
// listeners. The order also never routes to a missing cluster nor names a
// missing route or secret: a cluster is removed after the listeners that
// use it, a route or secret is put before what names it and removed after.
func planSteps(old, new *Bootstrap, c Change, epoch string) (*plan, error) {
	b := stepBuilder{epoch: epoch}
	// The files as they are, made only for what changes: encoding the
	// listener file of 1,000 listeners took 170 ms, most of a route
	// change's apply.
	oldCDS := b.once(func() ([]byte, error) { return old.cdsData(epoch) })
	oldLDS := b.once(func() ([]byte, error) { return old.ldsData(epoch) })

	// What existing listeners do not serve.
	var watch []ads.Resource
	for _, k := range []struct {
		kind  kind
		delta Delta
		rs    []resource
	}{{secrets, c.Secrets, new.secrets}, {routes, c.Routes, new.routes}} {
		if added := pick(k.rs, k.delta.Added); len(added) > 0 {
			b.plan.steps = append(b.plan.steps, step{kind: k.kind, after: payload{put: served(added)}, before: payload{remove: k.delta.Added}})
			watch = append(watch, served(added)...)
		}
	}
	if len(c.Clusters.Added) > 0 {
		b.file(step{kind: cds, confirm: true, warm: true, watch: watch}, b.resources(clusterType, between(old.clusters, new.clusters, c.Clusters.Updated, c.Clusters.Removed)), oldCDS)
	}
	if len(c.Listeners.Added) > 0 {
		b.file(step{kind: lds, confirm: true, warm: true, watch: watch}, b.resources(listenerType, between(old.listeners, new.listeners, c.Listeners.Updated, c.Listeners.Removed)), oldLDS)
	}

	// What existing listeners serve.
	if len(c.Clusters.Updated) > 0 {
		b.file(step{kind: cds, confirm: true}, b.resources(clusterType, between(old.clusters, new.clusters, nil, c.Clusters.Removed)), oldCDS)
	}
	// Secrets before routes: a route's filter may read one. One step a
	// resource: Envoy applies the valid resources of a response it
	// rejects, so a step of several could not be put back as it was.
	for _, k := range []struct {
		kind     kind
		delta    Delta
		was, now []resource
	}{{secrets, c.Secrets, old.secrets, new.secrets}, {routes, c.Routes, old.routes, new.routes}} {
		for _, r := range pick(k.now, k.delta.Updated) {
			was := pick(k.was, []string{r.name})
			b.plan.steps = append(b.plan.steps, step{kind: k.kind, confirm: true, after: payload{put: served([]resource{r})}, before: payload{put: served(was)}})
		}
	}
	if len(c.Listeners.Updated)+len(c.Listeners.Removed) > 0 {
		b.file(step{kind: lds, confirm: true}, b.resources(listenerType, new.listeners), oldLDS)
	}
	if len(c.Clusters.Removed) > 0 {
		b.file(step{kind: cds, confirm: true}, b.resources(clusterType, new.clusters), oldCDS)
	}
	if b.err != nil {
		return nil, b.err
	}
	for _, k := range []struct {
		kind  kind
		names []string
	}{{routes, c.Routes.Removed}, {secrets, c.Secrets.Removed}} {
		if len(k.names) > 0 {
			b.plan.obsolete = append(b.plan.obsolete, step{kind: k.kind, after: payload{remove: k.names}})
		}
	}
	return &b.plan, nil
}

// stepBuilder makes a plan's file steps, keeping the first error.
type stepBuilder struct {
	epoch string
	plan  plan
	err   error
}

// file appends s with the file data makes, and the file undo makes to
// put back.
func (b *stepBuilder) file(s step, data, undo func() ([]byte, error)) {
	if b.err != nil {
		return
	}
	if s.after.file, b.err = data(); b.err != nil {
		return
	}
	s.before.file, b.err = undo()
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

// resources is the LDS or CDS file of rs.
func (b *stepBuilder) resources(typ string, rs []resource) func() ([]byte, error) {
	return func() ([]byte, error) { return resourceData(typ, rs, b.epoch) }
}

// served is what Envoy is served of rs over ADS.
func served(rs []resource) []ads.Resource {
	out := make([]ads.Resource, len(rs))
	for i, r := range rs {
		out[i] = r.served
	}
	return out
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
// obsolete resources go.
func (p *plan) run(ctx context.Context, via carrier) error {
	for i, s := range p.steps {
		if err := via.carry(ctx, s); err != nil {
			return p.putBack(ctx, i, err, via)
		}
	}
	for _, s := range p.obsolete {
		_ = via.carry(ctx, s) // a leftover is harmless: nothing names it
	}
	return nil
}

// putBack restores, in reverse order, what each step up to the failed one
// changed, as it was before the change (once per file or resource type),
// each confirmed as its step was. The error is a *RejectedError with why
// the step failed.
func (p *plan) putBack(ctx context.Context, failed int, why error, via carrier) error {
	rej := &RejectedError{Reason: why.Error(), Restored: true}
	ctx = context.WithoutCancel(ctx)
	done := map[string]bool{}
	for i := failed; i >= 0; i-- {
		s := p.steps[i]
		if s.kind.file != "" {
			if done[s.kind.file] {
				continue // the file's first step's before is the file before the change
			}
			done[s.kind.file] = true
		}
		if err := via.carry(ctx, step{kind: s.kind, after: s.before, confirm: s.confirm}); err != nil {
			rej.Restored = false
			rej.Reason += "; putting back " + s.kind.String() + ": " + err.Error()
		}
	}
	return rej
}

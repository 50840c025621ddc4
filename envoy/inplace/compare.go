// What a reload changes: two epoch copies compared, resource by resource.

package inplace

import (
	"crypto/sha256"
	"fmt"
	"slices"
	"strings"

	"github.com/envoy-agent/envoy-agent/internal/bootyaml"
)

// Delta is what changed in one kind of resource, by name.
type Delta struct {
	Added, Updated, Removed []string
}

func (d Delta) empty() bool { return len(d.Added)+len(d.Updated)+len(d.Removed) == 0 }

func (d Delta) describe(kind string) []string {
	var out []string
	for _, p := range []struct {
		verb  string
		names []string
	}{{"added", d.Added}, {"updated", d.Updated}, {"removed", d.Removed}} {
		if len(p.names) > 0 {
			out = append(out, fmt.Sprintf("%s %s %s", kind, p.verb, strings.Join(p.names, ", ")))
		}
	}
	return out
}

// Change is what a reload changes in place. A change of a connection
// manager's routes alone is in Routes, not Listeners, and a static
// secret's in Secrets: neither drains anything.
type Change struct {
	Listeners, Routes, Clusters, Secrets Delta
}

// Empty reports that nothing changed.
func (c Change) Empty() bool {
	return c.Listeners.empty() && c.Routes.empty() && c.Clusters.empty() && c.Secrets.empty()
}

// String says what changed ("listeners updated ingress; clusters added
// b"), or "nothing changed".
func (c Change) String() string {
	if c.Empty() {
		return "nothing changed"
	}
	return strings.Join(slices.Concat(c.Listeners.describe("listeners"), c.Routes.describe("routes"), c.Clusters.describe("clusters"), c.Secrets.describe("secrets")), "; ")
}

// RestartError is a change that cannot be made in place: Reason says what
// changed outside the listeners and clusters.
type RestartError struct{ Reason string }

func (e *RestartError) Error() string { return "a hot restart is needed: " + e.Reason }

// Compare says what changes from old to new, or, with a *RestartError,
// that the change is not one of listeners and clusters only.
func Compare(old, new *Bootstrap) (Change, error) {
	if old.restText != new.restText {
		return Change{}, &RestartError{Reason: restDiff(old, new)}
	}
	return Diff(old, new), nil
}

// Diff says which listeners, routes, clusters and secrets differ from old
// to new, whatever else differs: what a reload that cannot be made in
// place changes of them too (a dry run's plan).
func Diff(old, new *Bootstrap) Change {
	return Change{Listeners: delta(old.listeners, new.listeners), Routes: delta(old.routes, new.routes), Clusters: delta(old.clusters, new.clusters), Secrets: delta(old.secrets, new.secrets)}
}

// restDiff names the top-level keys (and kept clusters) that differ.
func restDiff(old, new *Bootstrap) string {
	keys := map[string]bool{}
	for _, b := range []*Bootstrap{old, new} {
		for i := 0; i+1 < len(b.rest.Content); i += 2 {
			keys[b.rest.Content[i].Value] = true
		}
	}
	var changed []string
	for k := range keys {
		a, b := bootyaml.Value(old.rest, k), bootyaml.Value(new.rest, k)
		var at, bt []byte
		if a != nil {
			at, _ = bootyaml.Encode(a, bootstrapFile)
		}
		if b != nil {
			bt, _ = bootyaml.Encode(b, bootstrapFile)
		}
		if string(at) != string(bt) {
			changed = append(changed, k)
		}
	}
	slices.Sort(changed)
	if kept := uniq(append(old.Kept(), new.kept...)); len(kept) > 0 && slices.Contains(changed, "static_resources") {
		return fmt.Sprintf("%s changed (clusters named outside the listeners and clusters stay static: %s)", strings.Join(changed, ", "), strings.Join(kept, ", "))
	}
	if len(changed) == 0 {
		return "the bootstrap changed outside its listeners and clusters"
	}
	return strings.Join(changed, ", ") + " changed"
}

func uniq(s []string) []string {
	slices.Sort(s)
	return slices.Compact(s)
}

func delta(old, new []resource) Delta {
	var d Delta
	was := map[string][sha256.Size]byte{}
	for _, r := range old {
		was[r.name] = r.sum
	}
	is := map[string]bool{}
	for _, r := range new {
		is[r.name] = true
		switch t, ok := was[r.name]; {
		case !ok:
			d.Added = append(d.Added, r.name)
		case t != r.sum:
			d.Updated = append(d.Updated, r.name)
		}
	}
	for _, r := range old {
		if !is[r.name] {
			d.Removed = append(d.Removed, r.name)
		}
	}
	return d
}

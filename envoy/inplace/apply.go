package inplace

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/envoy-agent/envoy-agent/envoy/output"
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
	return Change{Listeners: delta(old.listeners, new.listeners), Routes: delta(old.routes, new.routes), Clusters: delta(old.clusters, new.clusters), Secrets: delta(old.secrets, new.secrets)}, nil
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
		a, b := value(old.rest, k), value(new.rest, k)
		var at, bt string
		if a != nil {
			at, _ = encode(a)
		}
		if b != nil {
			bt, _ = encode(b)
		}
		if at != bt {
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

// Write puts b's resource files and the bootstrap to run into dir (made
// 0700 if missing) and returns that bootstrap's path. Every file is
// private: a bootstrap may hold secrets.
func Write(dir string, b *Bootstrap) (string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("resource folder: %w", err)
	}
	boot, err := b.Runnable(dir)
	if err != nil {
		return "", err
	}
	lds, err := b.ListenerFile(dir)
	if err != nil {
		return "", err
	}
	cds, err := b.ClusterFile(dir)
	if err != nil {
		return "", err
	}
	type file struct {
		name string
		data []byte
	}
	var files []file
	for _, r := range b.secrets {
		data, err := secretFile(r, dir)
		if err != nil {
			return "", err
		}
		files = append(files, file{SecretFile(r.name), data})
	}
	for _, r := range b.routes {
		data, err := routeFile(r, dir)
		if err != nil {
			return "", err
		}
		files = append(files, file{RouteFile(r.name), data})
	}
	for _, f := range append(files, file{ListenersFile, lds}, file{ClustersFile, cds}, file{BootstrapFile, boot}) {
		if err := replace(dir, f.name, f.data); err != nil {
			return "", err
		}
	}
	return filepath.Join(dir, BootstrapFile), nil
}

// replace writes data to dir/name by a rename into place (Envoy reads a
// path_config_source again when a file is moved onto it).
func replace(dir, name string, data []byte) error {
	f, err := os.CreateTemp(dir, "."+name+"-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	defer os.Remove(f.Name())
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), filepath.Join(dir, name))
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	return nil
}

// Admin is the part of Envoy's admin API that Apply uses: GET path,
// returning the body of a 200 answer.
type Admin interface {
	Get(ctx context.Context, path string) ([]byte, error)
}

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

// ApplyTimeout bounds each wait for Envoy to read a file.
const ApplyTimeout = 10 * time.Second

// Apply changes the Envoy that runs old from the files in dir into new, in
// an order that never routes to a missing cluster nor points a listener or
// cluster at a missing file: the secret and route files added first, then
// the clusters added and updated (the removed ones still there), then the
// secrets and routes updated, then the listeners, then the clusters, route
// files and secret files removed. Each file is confirmed through Envoy's
// lds, cds, rds and sds counters and versions; when Envoy rejects one, the
// files it had before are put back and the error is a *RejectedError with
// Envoy's reason. A *RestartError says the change is not one Apply can
// make.
func Apply(ctx context.Context, dir string, old, new *Bootstrap, admin Admin) (Change, error) {
	c, err := Compare(old, new)
	if err != nil || c.Empty() {
		return c, err
	}
	type step struct {
		kind       kind
		data, undo []byte
	}
	var steps []step
	// The files to put back, made only for what changes: encoding the
	// listener file of 1,000 listeners took 170 ms, most of a route
	// change's apply.
	var oldCDS, oldLDS []byte
	if !c.Clusters.empty() {
		if oldCDS, err = old.ClusterFile(dir); err != nil {
			return c, err
		}
	}
	if !c.Listeners.empty() {
		if oldLDS, err = old.ListenerFile(dir); err != nil {
			return c, err
		}
	}
	if len(c.Clusters.Added)+len(c.Clusters.Updated) > 0 {
		both := slices.Clone(new.clusters)
		for _, r := range old.clusters {
			if slices.Contains(c.Clusters.Removed, r.name) {
				both = append(both, r)
			}
		}
		data, err := resourceFile(clusterType, both, dir)
		if err != nil {
			return c, err
		}
		steps = append(steps, step{cds, data, oldCDS})
	}
	// An added secret's or route's file is read when the listener or
	// cluster that names it arrives: it is written, not confirmed, and
	// removed on a rejection.
	var added []string
	for _, f := range []struct {
		rs    []resource
		names []string
		file  func(string) string
		data  func(resource, string) ([]byte, error)
	}{{new.secrets, c.Secrets.Added, SecretFile, secretFile}, {new.routes, c.Routes.Added, RouteFile, routeFile}} {
		for _, r := range f.rs {
			if !slices.Contains(f.names, r.name) {
				continue
			}
			data, err := f.data(r, dir)
			if err == nil {
				err = replace(dir, f.file(r.name), data)
			}
			if err != nil {
				removeFiles(dir, added)
				return c, err
			}
			added = append(added, f.file(r.name))
		}
	}
	// An updated secret or route is one file each, confirmed: secrets
	// first, as a listener updated beside one reads it.
	updated := func(olds, news []resource, names []string, k func(string) kind, file func(resource, string) ([]byte, error)) error {
		for _, r := range news {
			if !slices.Contains(names, r.name) {
				continue
			}
			i := slices.IndexFunc(olds, func(o resource) bool { return o.name == r.name })
			data, err := file(r, dir)
			if err != nil {
				return err
			}
			undo, err := file(olds[i], dir)
			if err != nil {
				return err
			}
			steps = append(steps, step{k(r.name), data, undo})
		}
		return nil
	}
	if err := updated(old.secrets, new.secrets, c.Secrets.Updated, secretKind, secretFile); err != nil {
		removeFiles(dir, added)
		return c, err
	}
	routeOf := func(name string) kind { return routeKind(name, new.prefixes[name]) }
	if err := updated(old.routes, new.routes, c.Routes.Updated, routeOf, routeFile); err != nil {
		removeFiles(dir, added)
		return c, err
	}
	if !c.Listeners.empty() {
		data, err := new.ListenerFile(dir)
		if err != nil {
			return c, err
		}
		steps = append(steps, step{lds, data, oldLDS})
	}
	if len(c.Clusters.Removed) > 0 {
		data, err := new.ClusterFile(dir)
		if err != nil {
			return c, err
		}
		steps = append(steps, step{cds, data, oldCDS})
	}
	for i, s := range steps {
		err := update(ctx, dir, s.kind, s.data, admin)
		if err == nil {
			continue
		}
		rej := &RejectedError{Reason: err.Error(), Restored: true}
		undone := map[string]bool{}
		for j := i; j >= 0; j-- {
			if k := steps[j].kind; !undone[k.file] {
				undone[k.file] = true
				if uerr := update(context.WithoutCancel(ctx), dir, k, steps[j].undo, admin); uerr != nil {
					rej.Restored = false
					rej.Reason += "; putting back " + k.file + ": " + uerr.Error()
				}
			}
		}
		removeFiles(dir, added)
		return c, rej
	}
	var removed []string
	for _, name := range c.Routes.Removed {
		removed = append(removed, RouteFile(name))
	}
	for _, name := range c.Secrets.Removed {
		removed = append(removed, SecretFile(name))
	}
	removeFiles(dir, removed)
	return c, nil
}

// removeFiles removes route and secret files nothing names any more (a
// leftover is harmless: nothing reads it).
func removeFiles(dir string, files []string) {
	for _, f := range files {
		_ = os.Remove(filepath.Join(dir, f))
	}
}

// kind is LDS, CDS or one route configuration's RDS: its file, its
// counters' prefix (after the connection manager's stat prefix for RDS),
// the config_dump resources that hold its errors (none for RDS: Envoy's
// log says why it rejected routes).
type kind struct {
	file, stats, what string
	dump              []string
}

var (
	lds = kind{ListenersFile, "listener_manager.lds", "listener", []string{"dynamic_listeners"}}
	cds = kind{ClustersFile, "cluster_manager.cds", "cluster", []string{"dynamic_active_clusters", "dynamic_warming_clusters"}}
)

// state is what Envoy's stats say of a kind: its update counters and the
// version of the last file it took whole (version_text). A hot-restarted
// Envoy adds its parent's counters to its own (they are merged, at its
// start and at stats flushes while the parent runs), so only the version
// tells for sure that a file was taken; a rise of update_rejected is
// believed once config_dump shows the resource Envoy refused.
type state struct {
	attempt, rejected, failure uint64
	version                    string
}

func readState(ctx context.Context, admin Admin, k kind) (state, error) {
	body, err := admin.Get(ctx, "/stats?filter="+url.QueryEscape(`^`+regexp.QuoteMeta(k.stats)+`\.(update_(attempt|rejected|failure)|version_text)$`))
	if err != nil {
		return state{}, err
	}
	var st state
	seen := 0
	for line := range strings.Lines(string(body)) {
		name, v, ok := strings.Cut(strings.TrimSpace(line), ": ")
		if !ok {
			continue
		}
		name = strings.TrimPrefix(name, k.stats+".")
		if name == "version_text" {
			if u, err := strconv.Unquote(v); err == nil {
				st.version = u
			}
			continue
		}
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			continue
		}
		switch name {
		case "update_attempt":
			st.attempt, seen = n, seen+1
		case "update_rejected":
			st.rejected, seen = n, seen+1
		case "update_failure":
			st.failure, seen = n, seen+1
		}
	}
	if seen != 3 {
		return st, fmt.Errorf("envoy's admin has no %s.update_* counters: does it read %s?", k.stats, k.file)
	}
	return st, nil
}

// fileVersion is the version_info of a resource file resourceFile made
// (its first line).
func fileVersion(data []byte) string {
	line, _, _ := strings.Cut(string(data), "\n")
	v, err := strconv.Unquote(strings.TrimPrefix(line, "version_info: "))
	if err != nil {
		return ""
	}
	return v
}

// rejectedGrace is how long a rise of update_rejected or update_failure
// with no resource shown as refused in config_dump waits for the new
// version before it is taken as a rejection of the whole file.
const rejectedGrace = 200 * time.Millisecond

// update puts data in place as k's file and waits until Envoy read it:
// nil when it took every resource (its version_text is the file's, and it
// counted an attempt since), else its reason.
func update(ctx context.Context, dir string, k kind, data []byte, admin Admin) error {
	ctx, cancel := context.WithTimeout(ctx, ApplyTimeout)
	defer cancel()
	want := fileVersion(data)
	before, err := readState(ctx, admin, k)
	if err != nil {
		return err
	}
	written := time.Now()
	if err := replace(dir, k.file, data); err != nil {
		return err
	}
	poll := 500 * time.Microsecond
	var roseAt time.Time
	for {
		now, err := readState(ctx, admin, k)
		if err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("envoy did not read %s within %s", k.file, ApplyTimeout)
			}
			return err
		}
		// Envoy sets version_text only when it took a file whole; a rise
		// of the rejections may be the parent's, merged, unless the
		// version was the file's already (a put-back).
		taken := now.attempt > before.attempt && now.version == want
		rose := now.rejected > before.rejected || now.failure > before.failure
		switch {
		case taken && (!rose || before.version != want):
			return nil
		case rose:
			if reason, ok := rejection(ctx, admin, k, written); ok {
				return errors.New(reason)
			}
			if roseAt.IsZero() {
				roseAt = time.Now()
			}
			if time.Since(roseAt) > rejectedGrace {
				if now.version == want {
					return nil // the rise was the parent's, merged
				}
				return errors.New(genericRejection(k))
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("envoy did not take %s within %s (its version is %q, the file's %q)", k.file, ApplyTimeout, now.version, want)
		case <-time.After(poll):
		}
		poll = min(2*poll, 20*time.Millisecond)
	}
}

func genericRejection(k kind) string {
	return fmt.Sprintf("Envoy rejected %s (%s.update_rejected rose); its log says why", k.file, k.stats)
}

// rejection is Envoy's reason for rejecting k's file: the error_state
// details that config_dump gives for each resource it refused since
// written (never the failed configuration itself, which may hold secrets);
// false when config_dump shows none.
func rejection(ctx context.Context, admin Admin, k kind, written time.Time) (string, bool) {
	var reasons []string
	for _, res := range k.dump {
		body, err := admin.Get(ctx, "/config_dump?resource="+res)
		if err != nil {
			continue
		}
		var dump struct {
			Configs []struct {
				Name       string `json:"name"`
				ErrorState *struct {
					FailedConfiguration struct {
						Name string `json:"name"`
					} `json:"failed_configuration"`
					LastUpdateAttempt time.Time `json:"last_update_attempt"`
					Details           string    `json:"details"`
				} `json:"error_state"`
			} `json:"configs"`
		}
		if json.Unmarshal(body, &dump) != nil {
			continue
		}
		for _, c := range dump.Configs {
			e := c.ErrorState
			if e == nil || e.Details == "" || e.LastUpdateAttempt.Before(written.Add(-time.Second)) {
				continue
			}
			name := cmpOr(c.Name, e.FailedConfiguration.Name)
			r := fmt.Sprintf("%s %s: %s", k.what, name, redactDetails(e.Details))
			if !slices.Contains(reasons, r) {
				reasons = append(reasons, r)
			}
		}
	}
	return strings.Join(reasons, "; "), len(reasons) > 0
}

// redactDetails is the first line of Envoy's error details, without the
// configuration they may quote (a proto dump after "): ", which may hold
// a key; a PEM block), as the agent relays Envoy's log (envoy/output).
func redactDetails(d string) string {
	first, _, _ := strings.Cut(d, "\n")
	if i := strings.Index(first, "): "); i >= 0 {
		first = first[:i+2] + " <configuration left out>"
	}
	return output.RedactLine(first)
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// Accepted checks that an Envoy just started from the resource files in
// dir took every resource in them: Envoy reports LIVE with a listener it
// could not bind, or a cluster it rejected, left out. The error gives
// Envoy's reason.
func Accepted(ctx context.Context, dir string, admin Admin) error {
	files := map[string][]byte{}
	kinds := []kind{cds, lds}
	// Every file read once, and what each names from the folder: the
	// listener file's routes and secrets, the cluster file's secrets, the
	// route files' secrets.
	for i := 0; i < len(kinds); i++ {
		data, err := os.ReadFile(filepath.Join(dir, kinds[i].file))
		if err != nil {
			return err
		}
		files[kinds[i].file] = data
		if kinds[i].what == secretWhat {
			continue // a secret names nothing
		}
		subs, err := subscriptions(data, dir)
		if err != nil {
			return fmt.Errorf("%s: %w", kinds[i].file, err)
		}
		for _, k := range subs {
			if !slices.ContainsFunc(kinds, func(o kind) bool { return o.file == k.file }) {
				kinds = append(kinds, k)
			}
		}
	}
	var reasons []string
	for i, k := range kinds {
		if i >= 2 && len(reasons) > 0 {
			break // a listener or cluster refused has no route or secret subscription
		}
		st, err := readState(ctx, admin, k)
		if err != nil {
			return err
		}
		if want := fileVersion(files[k.file]); st.version != want {
			reason, ok := rejection(ctx, admin, k, time.Time{})
			if !ok {
				reason = fmt.Sprintf("Envoy has not taken %s whole (its version is %q, the file's %q; its log says why)", k.file, st.version, want)
			}
			reasons = append(reasons, reason)
		}
	}
	if len(reasons) > 0 {
		return fmt.Errorf("envoy rejected part of its configuration: %s", strings.Join(reasons, "; "))
	}
	return nil
}

// subscriptions are the route configurations and secrets that the
// resource file data reads from the resource folder dir: each connection
// manager's RDS source there (with its stat prefix) and each SDS source
// there, in the order the file names them.
func subscriptions(data []byte, dir string) ([]kind, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	var kinds []kind
	var walk func(*yaml.Node)
	walk = func(n *yaml.Node) {
		if n.Kind == yaml.MappingNode {
			rds := value(n, "rds")
			route := scalar(value(rds, "route_config_name"))
			path := scalar(value(value(value(rds, "config_source"), "path_config_source"), "path"))
			if prefix := scalar(value(n, "stat_prefix")); route != "" && prefix != "" && filepath.Dir(path) == dir {
				kinds = append(kinds, routeKind(route, prefix))
			}
			secret := scalar(value(n, "name"))
			path = scalar(value(value(value(n, "sds_config"), "path_config_source"), "path"))
			if secret != "" && path == dir+"/"+SecretFile(secret) {
				kinds = append(kinds, secretKind(secret))
			}
		}
		for _, c := range n.Content {
			walk(c)
		}
	}
	walk(&doc)
	return kinds, nil
}

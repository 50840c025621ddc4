// How a step's file is written and confirmed: the resource files of the
// folder, and Envoy's admin API read for what it did with each (its xDS
// counters and versions, config_dump's error state, and the gauges of what
// is still warming).

package inplace

import (
	"context"
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
	"github.com/envoy-agent/envoy-agent/internal/bootyaml"
)

// Admin is the part of Envoy's admin API that Apply uses: GET path,
// returning the body of a 200 answer.
type Admin interface {
	Get(ctx context.Context, path string) ([]byte, error)
}

// files carries steps as the resource files of the folder dir, each
// confirmed from Envoy's admin API (update).
type files struct {
	dir   string
	admin Admin
}

func (f files) carry(ctx context.Context, s step) error {
	if !s.confirm {
		return replace(f.dir, s.kind.file, s.data)
	}
	return update(ctx, f.dir, s, f.admin)
}

func (f files) remove(k kind) { _ = os.Remove(filepath.Join(f.dir, k.file)) }

// kind is one subscription of Envoy's to a resource file: LDS, CDS, one
// route configuration's RDS or one secret's SDS. It has its file, its
// counters' prefix (after the connection manager's stat prefix for RDS),
// what a resource of it is called, the config_dump resources that hold
// its errors (none for RDS and SDS: Envoy's log says why it rejected
// them), and the gauge of its resources still warming (LDS and CDS).
type kind struct {
	file, stats, what string
	dump              []string
	warming           string
}

var (
	lds = kind{ldsFile, "listener_manager.lds", "listener", []string{"dynamic_listeners"}, "listener_manager.total_listeners_warming"}
	cds = kind{cdsFile, "cluster_manager.cds", "cluster", []string{"dynamic_active_clusters", "dynamic_warming_clusters"}, "cluster_manager.warming_clusters"}
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

// fileVersion is the version_info of a resource file that resourceData
// (YAML, its first line) or SecretDocument (JSON, its first field) made.
func fileVersion(data []byte) string {
	if rest, ok := strings.CutPrefix(string(data), `{"version_info":"`); ok {
		v, _, _ := strings.Cut(rest, `"`)
		return v
	}
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

// update puts the step's data in place as its kind's file and waits until
// Envoy read it: nil when it took every resource (awaitTaken) and, for a
// step that warms, once what it added is warm (awaitWarm), else the
// reason.
func update(ctx context.Context, dir string, s step, admin Admin) error {
	ctx, cancel := context.WithTimeout(ctx, applyTimeout)
	defer cancel()
	before, err := readState(ctx, admin, s.kind)
	if err != nil {
		return err
	}
	var warming uint64
	if s.warm {
		if warming, err = readGauge(ctx, admin, s.kind.warming); err != nil {
			return err
		}
	}
	written := time.Now()
	if err := replace(dir, s.kind.file, s.data); err != nil {
		return err
	}
	if err := awaitTaken(ctx, admin, s.kind, before, fileVersion(s.data), written); err != nil || !s.warm {
		return err
	}
	return awaitWarm(ctx, admin, s.kind, warming, written)
}

// awaitTaken waits until Envoy took k's file of version want, written
// when its state was before: nil once its version_text is want and it
// counted an attempt since; else Envoy's reason for refusing it.
func awaitTaken(ctx context.Context, admin Admin, k kind, before state, want string, written time.Time) error {
	var now state
	var roseAt time.Time
	err := poll(ctx, func() (bool, error) {
		var err error
		if now, err = readState(ctx, admin, k); err != nil {
			return false, err
		}
		// Envoy sets version_text only when it took a file whole; a rise
		// of the rejections may be the parent's, merged, unless the
		// version was the file's already (a put-back).
		taken := now.attempt > before.attempt && now.version == want
		rose := now.rejected > before.rejected || now.failure > before.failure
		switch {
		case taken && (!rose || before.version != want):
			return true, nil
		case !rose:
			return false, nil
		}
		if reason, ok := rejection(ctx, admin, k, written); ok {
			return false, errors.New(reason)
		}
		if roseAt.IsZero() {
			roseAt = time.Now()
		}
		switch {
		case time.Since(roseAt) <= rejectedGrace:
			return false, nil
		case now.version == want:
			return true, nil // the rise was the parent's, merged
		}
		return false, errors.New(genericRejection(k))
	})
	if ctx.Err() != nil {
		return fmt.Errorf("envoy did not take %s within %s (its version is %q, the file's %q)", k.file, since(written), now.version, want)
	}
	return err
}

// awaitWarm waits until what a step of kind k added serves (a listener
// bound and initialised, a cluster initialised): the gauge of k's
// resources warming is back to where it was before the step.
func awaitWarm(ctx context.Context, admin Admin, k kind, before uint64, written time.Time) error {
	var n uint64
	err := poll(ctx, func() (bool, error) {
		var err error
		n, err = readGauge(ctx, admin, k.warming)
		return err == nil && n <= before, err
	})
	if ctx.Err() != nil {
		return fmt.Errorf("the %ss %s added were still warming %s after it was written (%s: %d)", k.what, k.file, since(written), k.warming, n)
	}
	return err
}

// Polls of Envoy's admin API while a file is taken (2 to 4 ms with Envoy
// 1.40.0): from firstPoll, doubling to at most lastPoll.
const (
	firstPoll = 500 * time.Microsecond
	lastPoll  = 20 * time.Millisecond
)

// poll calls check until it reports done or an error, at growing
// intervals, or until ctx ends (then its error is the context's, or
// check's if it failed as ctx ended).
func poll(ctx context.Context, check func() (done bool, err error)) error {
	wait := firstPoll
	for {
		done, err := check()
		switch {
		case done || (err != nil && ctx.Err() == nil):
			return err
		case ctx.Err() != nil:
			return ctx.Err()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, lastPoll)
	}
}

// since is the time since t, to the millisecond, for an error.
func since(t time.Time) time.Duration { return time.Since(t).Round(time.Millisecond) }

// readGauge is the value of Envoy's gauge name.
func readGauge(ctx context.Context, admin Admin, name string) (uint64, error) {
	body, err := admin.Get(ctx, "/stats?filter="+url.QueryEscape(`^`+regexp.QuoteMeta(name)+`$`))
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(body)) {
		if n, v, ok := strings.Cut(strings.TrimSpace(line), ": "); ok && n == name {
			return strconv.ParseUint(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("envoy's admin has no gauge %s", name)
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
			rds := bootyaml.Value(n, "rds")
			route := bootyaml.Text(bootyaml.Value(rds, "route_config_name"))
			path := bootyaml.Text(bootyaml.Value(bootyaml.Value(bootyaml.Value(rds, "config_source"), "path_config_source"), "path"))
			if prefix := bootyaml.Text(bootyaml.Value(n, "stat_prefix")); route != "" && prefix != "" && filepath.Dir(path) == dir {
				kinds = append(kinds, routeKind(route, prefix))
			}
			secret := bootyaml.Text(bootyaml.Value(n, "name"))
			path = bootyaml.Text(bootyaml.Value(bootyaml.Value(bootyaml.Value(n, "sds_config"), "path_config_source"), "path"))
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

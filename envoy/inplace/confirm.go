// How a step reaches Envoy and is confirmed: the listener and cluster files
// of the resource folder, with Envoy's admin API read for what it did with
// each (its xDS counters and versions, config_dump's error state, and the
// gauges of what is still warming); the route configurations and secrets
// over ADS, with Envoy's ACK or NACK.

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

	"github.com/envoy-agent/envoy-agent/envoy/output"
	"github.com/envoy-agent/envoy-agent/envoy/xds/ads"
)

// Admin is the part of Envoy's admin API that Apply uses: GET path,
// returning the body of a 200 answer.
type Admin interface {
	Get(ctx context.Context, path string) ([]byte, error)
}

// kind is one of the ways resources reach Envoy: the LDS or CDS file (its
// file, its counters' prefix, the config_dump resources that hold its
// errors and the gauge of its resources still warming), or route
// configurations or secrets over ADS (their type).
type kind struct {
	file, stats, what string
	dump              []string
	warming           string
	typ               ads.Type
}

var (
	lds     = kind{file: ldsFile, stats: "listener_manager.lds", what: "listener", dump: []string{"dynamic_listeners"}, warming: "listener_manager.total_listeners_warming"}
	cds     = kind{file: cdsFile, stats: "cluster_manager.cds", what: "cluster", dump: []string{"dynamic_active_clusters", "dynamic_warming_clusters"}, warming: "cluster_manager.warming_clusters"}
	routes  = kind{typ: ads.RouteType, what: ads.RouteType.Noun()}
	secrets = kind{typ: ads.SecretType, what: ads.SecretType.Noun()}
)

// String names the kind in an error: its file, or its resources.
func (k kind) String() string {
	if k.file != "" {
		return k.file
	}
	return "the " + k.what + "s"
}

// toEnvoy carries steps out in the Envoy epoch it runs: the LDS and CDS
// files of its resource folder, each confirmed from Envoy's admin API
// (update), and the route configurations and secrets over ADS, confirmed
// by Envoy's ACK.
type toEnvoy struct{ r Running }

func (c toEnvoy) carry(ctx context.Context, s step) error {
	if s.kind.typ != "" {
		return c.overADS(ctx, s)
	}
	if !s.confirm {
		if s.after.file == nil {
			_ = os.Remove(filepath.Join(c.r.Dir, s.kind.file))
			return nil
		}
		return replace(c.r.Dir, s.kind.file, s.after.file)
	}
	return update(ctx, c.r, s)
}

// overADS puts the step's resources on the ADS server and waits until
// Envoy acknowledged them, or rejected them (its reason, redacted), when
// it subscribes to them.
func (c toEnvoy) overADS(ctx context.Context, s step) error {
	ctx, cancel := context.WithTimeout(ctx, applyTimeout)
	defer cancel()
	_, err := c.r.ADS.Update(ctx, c.r.Epoch, s.kind.typ, s.after.put, s.after.remove)
	var rej *ads.RejectedError
	if errors.As(err, &rej) {
		var names []string
		for _, r := range s.after.put {
			names = append(names, r.Name)
		}
		return fmt.Errorf("%s %s: %s", s.kind.what, strings.Join(names, ", "), rej.Detail)
	}
	return err
}

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

// readVersions is the version Envoy holds of each of ks's files, read
// among Envoy's text readouts alone: a read of its counters matches every
// one against the filter (20 ms at 1,000 TLS filter chains, 27,000
// counters; 5 ms this way).
func readVersions(ctx context.Context, admin Admin, ks ...kind) ([]string, error) {
	prefixes := make([]string, len(ks))
	for i, k := range ks {
		prefixes[i] = regexp.QuoteMeta(k.stats)
	}
	body, err := admin.Get(ctx, "/stats?type=TextReadouts&filter="+url.QueryEscape(`^(`+strings.Join(prefixes, "|")+`)\.version_text$`))
	if err != nil {
		return nil, err
	}
	versions := make([]string, len(ks))
	seen := make([]bool, len(ks))
	for line := range strings.Lines(string(body)) {
		name, v, ok := strings.Cut(strings.TrimSpace(line), ": ")
		if !ok {
			continue
		}
		for i, k := range ks {
			if name == k.stats+".version_text" {
				versions[i], _ = strconv.Unquote(v)
				seen[i] = true
			}
		}
	}
	for i, k := range ks {
		if !seen[i] {
			return nil, fmt.Errorf("envoy's admin has no %s.version_text: does it read %s?", k.stats, k.file)
		}
	}
	return versions, nil
}

// fileVersion is the version_info of a resource file that resourceData
// made: the start of its second line in the flow style it is written in
// (`  "version_info": "…",`), or its first in the block style of the files
// of an agent before it (`version_info: "…"`), adopted by a live upgrade.
func fileVersion(data []byte) string {
	text := string(data)
	if rest, ok := strings.CutPrefix(text, "{\n"); ok {
		text = strings.TrimLeft(rest, " ")
	}
	line, _, _ := strings.Cut(text, "\n")
	line = strings.TrimSuffix(line, ",")
	for _, key := range []string{`"version_info": `, "version_info: "} {
		if v, ok := strings.CutPrefix(line, key); ok {
			if v, err := strconv.Unquote(v); err == nil {
				return v
			}
		}
	}
	return ""
}

// rejectedGrace is how long a rise of update_rejected or update_failure
// with no resource shown as refused in config_dump waits for the new
// version before it is taken as a rejection of the whole file.
const rejectedGrace = 200 * time.Millisecond

// update puts the step's file in place and waits until Envoy read it: nil
// when it took every resource (awaitTaken) and, for a step that warms,
// once what it added is warm (awaitWarm), else the reason.
func update(ctx context.Context, r Running, s step) error {
	ctx, cancel := context.WithTimeout(ctx, applyTimeout)
	defer cancel()
	before, err := readState(ctx, r.Admin, s.kind)
	if err != nil {
		return err
	}
	var warming uint64
	if s.warm {
		if warming, err = readGauge(ctx, r.Admin, s.kind.warming); err != nil {
			return err
		}
	}
	written := time.Now()
	if err := replace(r.Dir, s.kind.file, s.after.file); err != nil {
		return err
	}
	if err := awaitTaken(ctx, r.Admin, s.kind, before, fileVersion(s.after.file), written); err != nil || !s.warm {
		return err
	}
	return awaitWarm(ctx, r, s, warming, written)
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
		return false, fmt.Errorf("%s was rejected (%s.update_rejected rose); Envoy's log says why", k.file, k.stats)
	})
	if ctx.Err() != nil {
		return fmt.Errorf("envoy did not take %s within %s (its version is %q, the file's %q)", k.file, since(written), now.version, want)
	}
	return err
}

// awaitWarm waits until what the step added serves (a listener bound and
// initialised, a cluster initialised): the gauge of its kind's resources
// warming is back to where it was before the step; then until Envoy
// answered for the route configurations and secrets it watches (settled).
// Envoy marks a listener initialised when the first answer for its routes
// or secrets is one it rejected, and serves it without them: the
// rejection fails the step, with Envoy's reason, as soon as it is seen.
func awaitWarm(ctx context.Context, r Running, s step, before uint64, written time.Time) error {
	k := s.kind
	var n uint64
	err := poll(ctx, func() (bool, error) {
		if reason := rejectedOverADS(r, s.watch); reason != "" {
			return false, errors.New(reason)
		}
		var err error
		n, err = readGauge(ctx, r.Admin, k.warming)
		return err == nil && n <= before, err
	})
	if ctx.Err() != nil {
		return fmt.Errorf("the %ss %s added were still warming %s after it was written (%s: %d)", k.what, k.file, since(written), k.warming, n)
	}
	if err != nil {
		return err
	}
	return settled(ctx, r, s.watch)
}

// settled waits until Envoy answered for each of rs it asks for (the
// ADS server's Update of what it has already waits for that), and returns
// Envoy's reason when it rejected one.
func settled(ctx context.Context, r Running, rs []ads.Resource) error {
	for _, t := range []ads.Type{ads.SecretType, ads.RouteType} {
		var same []ads.Resource
		for _, res := range rs {
			if res.Type == t {
				same = append(same, res)
			}
		}
		if len(same) == 0 {
			continue
		}
		_, err := r.ADS.Update(ctx, r.Epoch, t, same, nil)
		var rej *ads.RejectedError
		if errors.As(err, &rej) {
			if reason := rejectedOverADS(r, same); reason != "" {
				return errors.New(reason) // with the names
			}
			return fmt.Errorf("%s: %s", t.Noun(), rej.Detail)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// rejectedOverADS is Envoy's reason for rejecting any of rs, route
// configurations or secrets of the epoch r; "" when it rejected none.
func rejectedOverADS(r Running, rs []ads.Resource) string {
	if len(rs) == 0 {
		return ""
	}
	var reasons []string
	for _, st := range r.ADS.Status()[r.Epoch].Streams {
		for t, ts := range st.Types {
			var hit []string
			for _, n := range ts.RejectedNames {
				if slices.ContainsFunc(rs, func(res ads.Resource) bool { return res.Type == t && res.Name == n }) {
					hit = append(hit, n)
				}
			}
			if len(hit) > 0 {
				reasons = append(reasons, fmt.Sprintf("%s %s: %s", t.Noun(), strings.Join(hit, ", "), ts.Rejected))
			}
		}
	}
	return strings.Join(reasons, "; ")
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
			r := fmt.Sprintf("%s %s: %s", k.what, name, output.RedactDetails(e.Details))
			if !slices.Contains(reasons, r) {
				reasons = append(reasons, r)
			}
		}
	}
	return strings.Join(reasons, "; "), len(reasons) > 0
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// Accepted checks that an Envoy epoch r just started took every resource:
// Envoy reports LIVE with a listener it could not bind, or a cluster, route
// configuration or secret it rejected, left out. It reads Envoy's counters
// for the listener and cluster files (when r runs from resource files) and
// the ADS server's status for the route configurations and secrets (when r
// reads over ADS): Envoy connected, subscribed to nothing the server does
// not have, and acknowledged every one. The error gives Envoy's reason.
func Accepted(ctx context.Context, r Running) error {
	var reasons []string
	if r.Dir != "" {
		kinds := []kind{cds, lds}
		versions, err := readVersions(ctx, r.Admin, kinds...)
		if err != nil {
			return err
		}
		for i, k := range kinds {
			data, err := os.ReadFile(filepath.Join(r.Dir, k.file))
			if err != nil {
				return err
			}
			if want := fileVersion(data); versions[i] != want {
				reason, ok := rejection(ctx, r.Admin, k, time.Time{})
				if !ok {
					reason = fmt.Sprintf("Envoy has not taken %s whole (its version is %q, the file's %q; its log says why)", k.file, versions[i], want)
				}
				reasons = append(reasons, reason)
			}
		}
	}
	if r.ADS != nil && len(reasons) == 0 { // a listener or cluster refused has no route or secret subscription
		if err := acceptedOverADS(ctx, r); err != nil {
			reasons = append(reasons, err.Error())
		}
	}
	if len(reasons) > 0 {
		return fmt.Errorf("envoy rejected part of its configuration: %s", strings.Join(reasons, "; "))
	}
	return nil
}

// acceptedOverADS waits, within ctx, until the epoch r's Envoy is connected
// and holds every route configuration and secret it subscribes to as the
// server has it; it fails at once for a name it rejected or the server
// does not have.
func acceptedOverADS(ctx context.Context, r Running) error {
	var why string
	err := poll(ctx, func() (bool, error) {
		es := r.ADS.Status()[r.Epoch]
		if len(es.Streams) == 0 {
			why = "Envoy has not connected to the agent's xDS server"
			return false, nil
		}
		why = ""
		for _, st := range es.Streams {
			for _, t := range []ads.Type{ads.SecretType, ads.RouteType} {
				ts := st.Types[t]
				switch {
				case len(ts.RejectedNames) > 0:
					return false, fmt.Errorf("%s %s: %s", t.Noun(), strings.Join(ts.RejectedNames, ", "), ts.Rejected)
				case len(ts.Unknown) > 0:
					return false, fmt.Errorf("the agent does not serve %s %s, which Envoy asks for", t.Noun(), strings.Join(ts.Unknown, ", "))
				case len(ts.Pending) > 0:
					why = fmt.Sprintf("Envoy has not acknowledged %s %s", t.Noun(), strings.Join(ts.Pending, ", "))
				}
			}
		}
		return why == "", nil
	})
	if ctx.Err() != nil && why != "" {
		return errors.New(why)
	}
	return err
}

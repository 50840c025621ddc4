package inplace

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/envoy-agent/envoy-agent/envoy/xds/ads"
)

// fakeEnvoy stands in for Envoy's admin API over a resource folder, and
// for the agent's ADS server with Envoy behind it, for the unit tier (a
// real Envoy and the real server run Apply in apply_test.go): it is no
// Envoy, only what Apply reads of one, as Envoy 1.40.0 showed it
// (docs/design.md, Reload in place). At each GET it reads the folder, as
// Envoy reads a file moved onto its path: a new text of a file counts an
// update_attempt; a text it takes sets version_text; a text with a
// resource it refuses (refuse) counts update_rejected, leaves the version,
// and shows the resource's error_state in config_dump (unless quiet). A
// listener or cluster a file adds is warming for warmReads reads of the
// warming gauge. An Update over ADS is taken, or NACKed when refuseADS
// says why. It logs every file it read and every Update, in order.
type fakeEnvoy struct {
	dir string
	// refuse says which resource of a file's text Envoy refuses, and why
	// ("" takes it).
	refuse    func(file string, data []byte) (resource, reason string)
	quiet     bool // refusals show no error_state
	warmReads int
	// refuseADS says why Envoy NACKs a route configuration or secret put
	// over ADS ("" takes it).
	refuseADS func(r ads.Resource) string

	mu      sync.Mutex
	read    map[string][]byte // each file's text as last read
	subs    map[string]*fakeSub
	errs    map[string]fakeError // the refused listeners and clusters, by name
	warming map[string]int       // gauge reads left, by gauge
	gauge   map[string]int       // the reads of each gauge
	log     []string             // "took lds.yaml web,other", "refused lds.yaml", "took routes web/0/0", in order
	history map[string][]string  // each text read of a file, in order
	served  map[ads.Type]map[string]ads.Resource
}

type fakeSub struct {
	attempt, rejected uint64
	version           string
	names             []string // the resources of the text it took
}

type fakeError struct {
	details string
	at      time.Time
}

func newFakeEnvoy(dir string) *fakeEnvoy {
	return &fakeEnvoy{dir: dir, read: map[string][]byte{}, subs: map[string]*fakeSub{}, errs: map[string]fakeError{},
		warming: map[string]int{}, gauge: map[string]int{}, history: map[string][]string{},
		served: map[ads.Type]map[string]ads.Resource{ads.RouteType: {}, ads.SecretType: {}}}
}

// fakeEpoch is the epoch the fake's ADS answers for.
const fakeEpoch = "epoch-0-1"

// running is the epoch the fake stands in for.
func (f *fakeEnvoy) running() Running {
	return Running{Dir: f.dir, Admin: f, ADS: f, Epoch: fakeEpoch}
}

// Update takes rs and removes remove, or NACKs the first of rs that
// refuseADS refuses (taking nothing).
func (f *fakeEnvoy) Update(_ context.Context, epoch string, t ads.Type, rs []ads.Resource, remove []string) (ads.Outcome, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if epoch != fakeEpoch {
		return ads.Outcome{}, fmt.Errorf("fake Envoy: no epoch %s", epoch)
	}
	var names []string
	for _, r := range rs {
		if r.Type != t || len(r.Body) == 0 {
			return ads.Outcome{}, fmt.Errorf("fake Envoy: %s is not a converted %s", r.Name, t.Noun())
		}
		if f.served[t][r.Name].Sum != r.Sum {
			names = append(names, r.Name) // what Envoy holds already is not sent again
		}
	}
	for _, r := range rs {
		if f.refuseADS != nil && slices.Contains(names, r.Name) {
			if why := f.refuseADS(r); why != "" {
				f.log = append(f.log, "refused "+t.Noun()+"s "+strings.Join(names, ","))
				return ads.Outcome{}, &ads.RejectedError{Epoch: epoch, Type: t, Detail: why}
			}
		}
	}
	for _, r := range rs {
		f.served[t][r.Name] = r
	}
	for _, n := range remove {
		delete(f.served[t], n)
	}
	if len(names) > 0 {
		f.log = append(f.log, "took "+t.Noun()+"s "+strings.Join(names, ","))
	}
	if len(remove) > 0 {
		f.log = append(f.log, "removed "+t.Noun()+"s "+strings.Join(remove, ","))
	}
	return ads.Outcome{}, nil
}

// Status is one stream that holds every resource served.
func (f *fakeEnvoy) Status() map[string]ads.EpochStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := ads.StreamStatus{Pid: 1, Types: map[ads.Type]ads.TypeStatus{}}
	for t, set := range f.served {
		var ts ads.TypeStatus
		for n := range set {
			ts.Subscribed = append(ts.Subscribed, n)
		}
		slices.Sort(ts.Subscribed)
		st.Types[t] = ts
	}
	return map[string]ads.EpochStatus{fakeEpoch: {Streams: []ads.StreamStatus{st}}}
}

// serve puts b's route configurations and secrets in the fake's ADS, as
// the agent sets them before an epoch starts.
func (f *fakeEnvoy) serve(b *Bootstrap) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, t := range []ads.Type{ads.RouteType, ads.SecretType} {
		for _, r := range b.Served(t) {
			f.served[t][r.Name] = r
		}
	}
}

var statsFilter = regexp.MustCompile(`^\^(.*?)(\\\.\(update_.*)?\$$`)

func (f *fakeEnvoy) Get(_ context.Context, path string) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.readFolder(); err != nil {
		return nil, err
	}
	u, err := url.Parse(path)
	if err != nil {
		return nil, err
	}
	switch u.Path {
	case "/stats":
		if u.Query().Get("type") == "TextReadouts" {
			var out []byte
			for _, k := range []kind{cds, lds} {
				if s, ok := f.subs[k.file]; ok && strings.Contains(u.Query().Get("filter"), regexp.QuoteMeta(k.stats)) {
					out = fmt.Appendf(out, "%s.version_text: %q\n", k.stats, s.version)
				}
			}
			return out, nil
		}
		m := statsFilter.FindStringSubmatch(u.Query().Get("filter"))
		if m == nil {
			return nil, fmt.Errorf("fake Envoy: stats filter %q", u.Query().Get("filter"))
		}
		name := strings.ReplaceAll(m[1], `\`, "")
		if m[2] == "" { // a gauge
			f.gauge[name]++
			n := 0
			if f.warming[name] > 0 {
				f.warming[name]--
				n = 1
			}
			return fmt.Appendf(nil, "%s: %d\n", name, n), nil
		}
		s, ok := f.subs[f.fileOf(name)]
		if !ok {
			return nil, nil // no such subscription
		}
		return fmt.Appendf(nil, "%[1]s.update_attempt: %[2]d\n%[1]s.update_failure: 0\n%[1]s.update_rejected: %[3]d\n%[1]s.version_text: %[4]q\n",
			name, s.attempt, s.rejected, s.version), nil
	case "/config_dump":
		type state struct {
			Details string    `json:"details"`
			At      time.Time `json:"last_update_attempt"`
		}
		type config struct {
			Name  string `json:"name"`
			Error state  `json:"error_state"`
		}
		var dump struct {
			Configs []config `json:"configs"`
		}
		for name, e := range f.errs {
			dump.Configs = append(dump.Configs, config{name, state{e.details, e.at}})
		}
		return json.Marshal(dump)
	}
	return nil, fmt.Errorf("fake Envoy: no %s", path)
}

// fileOf is the file of the subscription whose stats are under prefix.
func (f *fakeEnvoy) fileOf(prefix string) string {
	switch {
	case prefix == lds.stats:
		return ldsFile
	case prefix == cds.stats:
		return cdsFile
	}
	return ""
}

// readFolder reads each resource file whose text changed, in name order.
func (f *fakeEnvoy) readFolder() error {
	entries, err := os.ReadDir(f.dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") || name == bootstrapFile {
			continue
		}
		data, err := os.ReadFile(filepath.Join(f.dir, name))
		if err != nil {
			return err
		}
		if bytes.Equal(data, f.read[name]) {
			continue
		}
		f.read[name] = data
		f.take(name, data)
	}
	return nil
}

func (f *fakeEnvoy) take(file string, data []byte) {
	s := f.subs[file]
	if s == nil {
		s = &fakeSub{}
		f.subs[file] = s
	}
	s.attempt++
	f.history[file] = append(f.history[file], string(data))
	if f.refuse != nil {
		if res, why := f.refuse(file, data); why != "" {
			s.rejected++
			if !f.quiet {
				f.errs[res] = fakeError{why, time.Now()}
			}
			f.log = append(f.log, "refused "+file)
			return
		}
	}
	var doc struct {
		Version   string `yaml:"version_info"`
		Resources []struct {
			Name string `yaml:"name"`
		} `yaml:"resources"`
	}
	if err := yaml.Unmarshal(data, &doc); err != nil {
		s.rejected++
		f.log = append(f.log, "unreadable "+file)
		return
	}
	var names []string
	for _, r := range doc.Resources {
		names = append(names, r.Name)
	}
	if k := map[string]kind{ldsFile: lds, cdsFile: cds}[file]; k.warming != "" && slices.ContainsFunc(names, func(n string) bool { return !slices.Contains(s.names, n) }) {
		f.warming[k.warming] = f.warmReads
	}
	s.version, s.names = doc.Version, names
	f.log = append(f.log, "took "+file+" "+strings.Join(names, ","))
}

// reads is the log of what the fake read so far.
func (f *fakeEnvoy) reads() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.log)
}

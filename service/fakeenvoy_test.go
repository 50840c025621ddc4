//go:build linux

package service

import (
	"go.yaml.in/yaml/v3"

	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/envoy-agent/envoy-agent/envoy"
	"github.com/envoy-agent/envoy-agent/envoy/adminapi"
	"github.com/envoy-agent/envoy-agent/envoy/epochfiles"
	"github.com/envoy-agent/envoy-agent/envoy/inplace"
	"github.com/envoy-agent/envoy-agent/envoy/reexec"
	"github.com/envoy-agent/envoy-agent/internal/envoykit"
	"github.com/envoy-agent/envoy-agent/service/config"
	"github.com/envoy-agent/envoy-agent/service/control"
	"github.com/envoy-agent/envoy-agent/service/guard"
	"github.com/envoy-agent/envoy-agent/service/handover"
	"github.com/envoy-agent/envoy-agent/service/systemd"
)

// fakeEnvoy stands in for the Envoy the supervisor runs, its admin API and
// its binaries (the seam of proxy.go), so that a reload's logic is tested
// with no Envoy started: the bootstrap copies are real files, every other
// answer is what the test set, and every call that carries a reload out is
// recorded with the supervisor's phase at that moment.
type fakeEnvoy struct {
	runDir string
	copies epochfiles.Copier
	s      *supervisor // set once assembled, for the phase

	mu sync.Mutex
	// What the test sets.
	serving     string           // the serving Envoy's hot-restart version
	next        string           // the hot-restart version of the binary at binary_path
	validateErr error            // what `envoy --mode validate` says
	sameBinary  bool             // ServingBinaryIs
	inPlace     *epochfiles.Plan // PlanInPlace's plan
	inPlaceErr  error            // or why not (nil both: no resource files)
	reloadErr   error            // what Reload returns
	onReload    func()           // runs inside Reload
	draining    *envoy.DrainingEpoch
	failing     bool // every request Envoy counts from now on is a 5xx
	// What happened.
	statsReads          int    // reads of the reload guard's statistics
	completed, answered uint64 // the requests counted, and their 5xx answers
	epoch, pid          int
	reloads             []envoy.ReloadPlan
	phases              []phase // the supervisor's phase during each Reload
	planned             int     // PlanInPlace calls
	waits               int     // WaitForDrainingEpochs calls
	waitStarted         chan struct{}
	waitRelease         chan struct{}
}

func newFakeEnvoy(t *testing.T, site string) *fakeEnvoy {
	dir := filepath.Join(site, "run")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	return &fakeEnvoy{runDir: dir, serving: "11.120", next: "11.120", sameBinary: true, pid: 100,
		waitStarted: make(chan struct{}, 8), waitRelease: make(chan struct{})}
}

// The envoys side: the fake is the Envoy and the binaries.
func (f *fakeEnvoy) open(envoy.ProxyConfig, *handover.State) (envoyProcess, envoyAdmin, error) {
	return f, fakeAdmin{f}, nil
}

func (f *fakeEnvoy) HotRestartVersion(context.Context, string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.next, nil
}

func (f *fakeEnvoy) Validate(context.Context, *config.Config) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.validateErr
}

// envoy.Proxy: Run blocks until the Agent stops it.
func (f *fakeEnvoy) Run(abort <-chan error) error { return <-abort }
func (f *fakeEnvoy) Drain(bool) error             { return nil }
func (f *fakeEnvoy) Cleanup()                     {}
func (f *fakeEnvoy) UpdateConfig([]byte) error    { return nil }

// ActiveConnections makes the fake the count an Agent's drain reads.
func (f *fakeEnvoy) ActiveConnections(context.Context) (int, error) { return 0, nil }

func (f *fakeEnvoy) Pid() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pid
}

func (f *fakeEnvoy) Epoch() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.epoch
}

func (f *fakeEnvoy) Epochs() []envoy.EpochInfo                       { return nil }
func (f *fakeEnvoy) Timings() (time.Duration, time.Duration)         { return time.Second, 2 * time.Second }
func (f *fakeEnvoy) LastLines() []string                             { return nil }
func (f *fakeEnvoy) NamedListeners() []inplace.NamedListener         { return nil }
func (f *fakeEnvoy) ResourcesAccepted(context.Context) error         { return nil }
func (f *fakeEnvoy) ReopenLogs(context.Context) (int, error)         { return 1, nil }
func (f *fakeEnvoy) Handover(func(reexec.HandoverState) error) error { return errors.New("fake") }

func (f *fakeEnvoy) CopyBootstrap(path string) (*epochfiles.Copy, error) {
	return f.copies.Checked(f.runDir, path, f.Epoch()+1, nil)
}

func (f *fakeEnvoy) PlanInPlace(*epochfiles.Copy) (*epochfiles.Plan, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.planned++
	if f.inPlace == nil && f.inPlaceErr == nil {
		return nil, epochfiles.ErrNoResourceFiles
	}
	return f.inPlace, f.inPlaceErr
}

// CopyForPlan copies data as it is: the fake's bootstraps name no
// certificate.
func (f *fakeEnvoy) CopyForPlan(data []byte, original string, _ func(*yaml.Node, string) (bool, error)) (string, error) {
	return f.copies.CopyData(f.runDir, data, original, f.Epoch()+1, nil)
}

// DiffServing says one route changed: the fake has no bootstraps to compare.
func (f *fakeEnvoy) DiffServing(string) (inplace.Change, error) {
	return routesUpdated().Change, nil
}

// KeepServingCopy keeps a copy of a stand-in for the serving bootstrap.
func (f *fakeEnvoy) KeepServingCopy() (string, error) {
	return f.copies.CopyData(f.runDir, []byte("# the serving copy\n"), "envoy.yaml", f.Epoch()+1, nil)
}

// stats is the answer to the reload guard's read of the statistics: each
// read counts 100 more requests through one connection manager, all 5xx
// while failing.
func (f *fakeEnvoy) stats() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.statsReads++
	f.completed += 100
	if f.failing {
		f.answered += 100
	}
	return fmt.Sprintf("http.ingress.downstream_rq_completed: %d\nhttp.ingress.downstream_rq_5xx: %d\n", f.completed, f.answered)
}

func (f *fakeEnvoy) setFailing(on bool) {
	f.mu.Lock()
	f.failing = on
	f.mu.Unlock()
}

func (f *fakeEnvoy) ServingBinaryIs(string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sameBinary
}

// WaitForDrainingEpochs reports the draining epoch the test set, if any,
// and then waits until the test releases it or ctx ends.
func (f *fakeEnvoy) WaitForDrainingEpochs(ctx context.Context, report func(envoy.DrainingEpoch)) (time.Duration, error) {
	f.mu.Lock()
	f.waits++
	d := f.draining
	f.mu.Unlock()
	if d == nil {
		return 0, nil
	}
	start := time.Now()
	report(*d)
	f.waitStarted <- struct{}{}
	select {
	case <-f.waitRelease:
		return time.Since(start), nil
	case <-ctx.Done():
		return time.Since(start), ctx.Err()
	}
}

// Reload records the plan and the phase, and takes the plan's copy as a
// real Envoy does: the new epoch's, or removed on a failure.
func (f *fakeEnvoy) Reload(_ context.Context, plan envoy.ReloadPlan) (envoy.ReloadOutcome, error) {
	f.mu.Lock()
	f.reloads = append(f.reloads, plan)
	f.phases = append(f.phases, f.s.now())
	hook, err := f.onReload, f.reloadErr
	f.mu.Unlock()
	if hook != nil {
		hook()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err != nil {
		_ = os.Remove(plan.Copied)
	} else if plan.Path != envoy.InPlace {
		f.epoch, f.pid = f.epoch+1, f.pid+1
		if plan.Path == envoy.DrainRestart {
			f.epoch = 0
		}
	}
	return envoy.ReloadOutcome{Epoch: f.epoch, Pid: f.pid, Drained: time.Millisecond}, err
}

// copiesLeft lists the bootstrap copies in the run folder.
func (f *fakeEnvoy) copiesLeft(t *testing.T) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(f.runDir, "epoch-*"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// fakeAdmin is the fake Envoy's admin API: LIVE, of the serving version.
type fakeAdmin struct{ f *fakeEnvoy }

// Get answers the reload guard's read of the statistics (fakeEnvoy.stats);
// nothing else.
func (a fakeAdmin) Get(_ context.Context, path string) (*http.Response, error) {
	if path != guard.StatsPath {
		return nil, errors.New("fake admin: no such page")
	}
	body := a.f.stats()
	return &http.Response{StatusCode: http.StatusOK, Status: "200 OK", Body: io.NopCloser(strings.NewReader(body))}, nil
}

func (a fakeAdmin) Ready(context.Context) (adminapi.Ready, error) {
	return adminapi.Ready{State: "LIVE", Live: true}, nil
}

func (a fakeAdmin) ServerInfo(context.Context) (adminapi.ServerInfo, error) {
	a.f.mu.Lock()
	defer a.f.mu.Unlock()
	return adminapi.ServerInfo{Version: "fake/1.40.0", State: "LIVE", HotRestartVersion: a.f.serving}, nil
}

func (a fakeAdmin) ActiveConnections(context.Context) (int, error)         { return 0, nil }
func (a fakeAdmin) Listeners(context.Context) ([]adminapi.Listener, error) { return nil, nil }

// fakeSite is a supervisor assembled around a fake Envoy, LIVE, with its
// configuration file and bootstrap in a folder of its own and systemd's
// notify socket standing in.
type fakeSite struct {
	t      *testing.T
	dir    string
	config string // the TOML file
	s      *supervisor
	envoy  *fakeEnvoy
	ns     *envoykit.NotifySocket
	log    *envoykit.SyncBuffer
}

// startFake assembles the supervisor as Run does, with the fake Envoy and
// toml as the configuration file's text (%s is the folder), and makes it
// LIVE with the fake's hot-restart version.
func startFake(t *testing.T, toml string) *fakeSite {
	t.Helper()
	// Not t.TempDir: a subtest's name can make it too long for the run
	// folder's sockets.
	dir, err := os.MkdirTemp("", "svc-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	fs := &fakeSite{t: t, dir: dir, config: filepath.Join(dir, "config.toml"), envoy: newFakeEnvoy(t, dir), log: &envoykit.SyncBuffer{}}
	if err := os.WriteFile(filepath.Join(dir, "envoy"), []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	fs.writeBootstrap("v0")
	fs.writeConfig(toml)
	cfg, err := config.LoadConfig(fs.config)
	if err != nil {
		t.Fatal(err)
	}
	fs.ns = envoykit.NewNotifySocket(t)
	t.Setenv("NOTIFY_SOCKET", fs.ns.Path)
	log := systemd.NewLogger(fs.log, "debug", "text")
	s, err := newSupervisor(cfg, Options{Stderr: fs.log, Signals: &systemd.Signals{}}, nil, log, fs.envoy)
	if err != nil {
		t.Fatal(err)
	}
	fs.s, fs.envoy.s = s, s
	// The reload guard's reads run as in serve.
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go s.watch.Run(ctx)
	s.goLive()
	s.setHotRestartVersion(fs.envoy.serving)
	return fs
}

// baseConfig is a configuration's text before a test's own keys: %[1]s is
// the site's folder.
const baseConfig = `[envoy]
binary_path = "%[1]s/envoy"
config_path = "%[1]s/envoy.yaml"
admin_port = 19000
drain_duration = "1s"
parent_shutdown_duration = "200s"
[agent]
status_port = 19020
prometheus_port = 0
start_timeout = "3s"
termination_drain_duration = "7s"
min_drain_duration = "1s"
run_dir = "%[1]s/run"
`

func (fs *fakeSite) writeConfig(extra string) {
	fs.t.Helper()
	text := strings.ReplaceAll(baseConfig, "%[1]s", fs.dir)
	// extra's keys go into the table they name: "[agent] k = v" lines.
	for _, line := range strings.Split(extra, "\n") {
		table, kv, ok := strings.Cut(strings.TrimSpace(line), " ")
		if !ok {
			continue
		}
		text = strings.Replace(text, table+"\n", table+"\n"+kv+"\n", 1)
	}
	if err := os.WriteFile(fs.config, []byte(text), 0o600); err != nil {
		fs.t.Fatal(err)
	}
}

func (fs *fakeSite) writeBootstrap(body string) {
	fs.t.Helper()
	text := "admin: {address: {socket_address: {address: 127.0.0.1, port_value: 19000}}}\n# " + body + "\n"
	if err := os.WriteFile(filepath.Join(fs.dir, "envoy.yaml"), []byte(text), 0o600); err != nil {
		fs.t.Fatal(err)
	}
}

// reload asks for a reload as `envoy-agent reload` does and waits for it.
func (fs *fakeSite) reload() control.ReloadResult {
	fs.t.Helper()
	return fs.reloadWith(control.ReloadOptions{})
}

// reloadWith is reload with `envoy-agent reload`'s flags.
func (fs *fakeSite) reloadWith(opts control.ReloadOptions) control.ReloadResult {
	fs.t.Helper()
	ch := make(chan control.ReloadResult, 1)
	go func() { ch <- fs.s.requestReload(context.Background(), nil, opts) }()
	select {
	case r := <-ch:
		return r
	case <-time.After(30 * time.Second):
		fs.t.Fatal("no answer to the reload within 30 s")
		return control.ReloadResult{}
	}
}

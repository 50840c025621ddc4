//go:build linux

package control

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/envoy-agent/envoy-agent/envoy/versions"
	"github.com/envoy-agent/envoy-agent/internal/bootyaml"
	"github.com/envoy-agent/envoy-agent/internal/printable"
	"github.com/envoy-agent/envoy-agent/internal/safefile"
	"github.com/envoy-agent/envoy-agent/service/config"
)

// PlanReport is what a reload would do (`reload --dry-run`, `validate
// --plan`): the path with its reason, and the resources it would add,
// change or remove.
type PlanReport struct {
	// Path is PathInPlace, PathHotRestart or PathDrainRestart.
	Path string `json:"path"`
	// Why says why a new epoch (or a new Envoy) would be needed; "" in
	// place.
	Why string `json:"why,omitempty"`
	// Epoch and Pid are the serving Envoy's: what the reload would change
	// in place or replace.
	Epoch int `json:"epoch"`
	Pid   int `json:"pid"`
	// The resources, by name (listeners, routes, clusters, secrets as the
	// agent's resource files name them).
	Listeners ResourceChanges `json:"listeners"`
	Routes    ResourceChanges `json:"routes"`
	Clusters  ResourceChanges `json:"clusters"`
	Secrets   ResourceChanges `json:"secrets"`
	// ResourcesUnknown says why the resources could not be compared (a
	// bootstrap the agent does not split); "" when they were.
	ResourcesUnknown string `json:"resources_unknown,omitempty"`
}

// ResourceChanges are the names of one kind of resource a reload would
// add, change or remove.
type ResourceChanges struct {
	Added   []string `json:"added,omitempty"`
	Changed []string `json:"changed,omitempty"`
	Removed []string `json:"removed,omitempty"`
}

// Candidate is `validate --plan`'s files, sent to the running agent, which
// cannot read them (the role keeps them in a folder of root's): the
// configuration as the client loaded and checked it, the bootstrap's
// bytes, and the hot-restart version of the binary it names, which the
// client asked (the agent runs no binary a client names).
type Candidate struct {
	Config *config.Config `json:"config"`
	// ConfigSHA256 is the SHA-256 of the TOML's text (Config.Sum), which
	// its JSON does not carry: files the reload guard rolled back are
	// planned as a reload of them would be, refused unless forced.
	ConfigSHA256      string `json:"config_sha256"`
	Bootstrap         []byte `json:"bootstrap"`
	HotRestartVersion string `json:"hot_restart_version"`
}

// maxCandidateBody bounds POST /plan's body: the bootstrap's bytes (base64
// in JSON: 4 for 3) and the configuration.
const maxCandidateBody = bootyaml.MaxSize/3*4 + 1<<20

// LoadCandidate reads the candidate configuration at path and its
// bootstrap, and asks its binary for its hot-restart version, as `validate
// --plan` sends them.
func LoadCandidate(ctx context.Context, path string) (*Candidate, error) {
	cfg, err := config.LoadConfig(path)
	if err != nil {
		return nil, err
	}
	data, err := safefile.ReadRegular(cfg.Envoy.ConfigPath, bootyaml.MaxSize)
	if err != nil {
		return nil, config.Problemf(cfg, "envoy.config_path", "Envoy bootstrap %v", err)
	}
	v, err := new(versions.Cache).HotRestartVersion(ctx, cfg.Envoy.BinaryPath)
	if err != nil {
		return nil, config.Problemf(cfg, "envoy.binary_path", "%v", err)
	}
	return &Candidate{Config: cfg, ConfigSHA256: cfg.Sum(), Bootstrap: data, HotRestartVersion: v}, nil
}

// RequestPlan asks the running agent what a reload would do, and prints
// it; nothing changes. With candidate nil, it is `reload --dry-run`: the
// agent running the configuration at path plans its own files, found and
// believed as RequestReload finds and believes it. With a candidate (its
// configuration read from path), it is `validate --plan`: the agent on the
// candidate's control socket, whichever configuration it runs, plans the
// candidate's files; when none runs there, it says so and returns nil (a
// start would serve them). force plans files the reload guard rolled back
// as a forced reload would.
func RequestPlan(ctx context.Context, path string, candidate *Candidate, force bool, out io.Writer) error {
	var cfg *config.Config
	var body io.Reader
	if candidate == nil {
		var err error
		if cfg, err = config.LoadUnchecked(path); err != nil {
			return err
		}
	} else {
		cfg = candidate.Config
		data, err := json.Marshal(candidate)
		if err != nil {
			return err
		}
		body = bytes.NewReader(data)
	}
	sock := cfg.ControlSocketPath()
	ctx, cancel := context.WithTimeout(ctx, cfg.ReloadClientTimeout(false))
	defer cancel()
	route := "/plan"
	if force {
		route += "?" + queryForce + "=1"
	}
	resp, server, err := controlRequestBody(ctx, sock, http.MethodPost, route, body)
	if ue := (*config.UntrustedControlError)(nil); errors.As(err, &ue) {
		return fmt.Errorf("plan: %s: %w", sock, err)
	}
	if err != nil {
		if candidate != nil {
			fmt.Fprintf(out, "plan: %s\n", printable.String(fmt.Sprintf("no envoy-agent answers on %s: nothing to plan against (a start serves these files) (%v)", sock, err)))
			return nil
		}
		return fmt.Errorf("plan: cannot reach the agent on its control socket %s (is envoy-agent running with %s?): %w", sock, path, err)
	}
	defer resp.Body.Close()
	if candidate == nil {
		err = checkControlIdentity(resp, server, path)
	} else {
		err = checkControlPid(resp, server)
	}
	if err != nil {
		return fmt.Errorf("plan: %s: %w", sock, err)
	}
	if resp.StatusCode == http.StatusNotFound {
		return fmt.Errorf("plan: the agent at %s predates reload --dry-run and validate --plan (it answered %s): upgrade it (envoy-agent upgrade)", sock, resp.Status)
	}
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusConflict {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("plan: the agent at %s answered %s: %s", sock, resp.Status, firstLine(string(b)))
	}
	var res ReloadResult
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&res); err != nil {
		return fmt.Errorf("plan: the agent at %s answered %s, not a plan: %w", sock, resp.Status, err)
	}
	res.DryRun = true
	if candidate != nil {
		fmt.Fprintf(out, "plan: %s\n", printable.String(fmt.Sprintf("of %s, by the agent running %s (pid %s); nothing was changed",
			path, resp.Header.Get(controlConfigHeader), resp.Header.Get(controlPidHeader))))
	}
	if !res.OK || res.Plan == nil {
		if res.Error == "" {
			res.Error = "no reason given"
		}
		return &ReloadError{Result: res}
	}
	fmt.Fprint(out, FormatPlan(*res.Plan))
	return nil
}

// FormatPlan is a plan as `reload --dry-run` prints it: the path and why,
// then each kind of resource that would change, one line each.
func FormatPlan(p PlanReport) string {
	var b strings.Builder
	line := func(format string, args ...any) {
		fmt.Fprintf(&b, "%s\n", printable.String(fmt.Sprintf(format, args...)))
	}
	switch p.Path {
	case PathInPlace:
		line("plan: in place: epoch %d (pid %d) would keep serving, with no new Envoy and nothing drained", p.Epoch, p.Pid)
	case PathDrainRestart:
		line("plan: drain and restart: Envoy pid %d would be drained and stopped, then a new Envoy started (connections are closed): %s", p.Pid, p.Why)
	default:
		line("plan: hot restart: epoch %d would replace epoch %d (pid %d), which would drain: %s", p.Epoch+1, p.Epoch, p.Pid, p.Why)
	}
	if p.ResourcesUnknown != "" {
		line("  resources: not compared: %s", p.ResourcesUnknown)
		return b.String()
	}
	n := 0
	for _, k := range []struct {
		kind string
		c    ResourceChanges
	}{{"listeners", p.Listeners}, {"routes", p.Routes}, {"clusters", p.Clusters}, {"secrets", p.Secrets}} {
		var parts []string
		for _, v := range []struct {
			verb  string
			names []string
		}{{"added", k.c.Added}, {"changed", k.c.Changed}, {"removed", k.c.Removed}} {
			if len(v.names) > 0 {
				parts = append(parts, v.verb+" "+strings.Join(v.names, ", "))
				n += len(v.names)
			}
		}
		if len(parts) > 0 {
			line("  %-10s %s", k.kind+":", strings.Join(parts, "; "))
		}
	}
	if n == 0 {
		line("  resources: no listener, route, cluster or secret changes")
	}
	return b.String()
}

// candidateOf reads POST /plan's body: nil when empty (the agent's own
// files).
func candidateOf(r *http.Request) (*Candidate, error) {
	data, err := io.ReadAll(io.LimitReader(r.Body, maxCandidateBody+1))
	if err != nil {
		return nil, err
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, nil
	}
	if len(data) > maxCandidateBody {
		return nil, fmt.Errorf("the candidate is larger than %d bytes", maxCandidateBody)
	}
	var c Candidate
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("not a candidate: %w", err)
	}
	if c.Config == nil || len(c.Bootstrap) == 0 || c.HotRestartVersion == "" {
		return nil, errors.New("not a candidate: a configuration, a bootstrap and a hot-restart version are needed")
	}
	return &c, nil
}

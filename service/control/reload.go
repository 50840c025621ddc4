//go:build linux

package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/envoy-agent/envoy-agent/internal/printable"
	"github.com/envoy-agent/envoy-agent/service/config"
)

// ReloadError is a reload the running agent refused or that failed; the
// serving Envoy kept serving.
type ReloadError struct {
	Result ReloadResult
}

func (e *ReloadError) Error() string {
	if e.Result.DryRun {
		return fmt.Sprintf("a reload would be refused; epoch %d keeps serving: %s", e.Result.Epoch, printable.String(e.Result.Error))
	}
	return fmt.Sprintf("reload failed; epoch %d keeps serving: %s", e.Result.Epoch, printable.String(e.Result.Error))
}

// RolledBackError is a reload `reload --wait` waited for that the reload
// guard rolled back (or saw regress and failed to roll back: Rollback's
// Error says so).
type RolledBackError struct {
	Result ReloadResult
}

func (e *RolledBackError) Error() string {
	rb := e.Result.Rollback
	if rb == nil {
		return "the reload guard rolled the reload back"
	}
	if rb.Error != "" {
		return printable.String(fmt.Sprintf("the reload guard saw a regression at %s (%s) and its rollback FAILED: %s; the reloaded configuration serves (epoch %d)",
			rb.At, rb.Reason, firstLine(rb.Error), e.Result.Epoch))
	}
	return printable.String(fmt.Sprintf("the reload guard rolled the reload back at %s (%s in %d ms): %s; epoch %d serves the configuration from before, and the files on disk are not what it serves",
		rb.At, strings.ReplaceAll(rb.Path, "_", " "), rb.TookMs, rb.Reason, e.Result.Epoch))
}

// ReloadOptions are `envoy-agent reload`'s flags. Force and Wait are sent
// as POST /reload's query (reloadQuery); a dry run is POST /plan (plan.go),
// a route an agent that predates it answers 404 instead of reloading.
type ReloadOptions struct {
	// Force takes files the reload guard rolled back (otherwise refused).
	Force bool
	// Wait holds the answer until the reload guard's verdict.
	Wait bool
	// DryRun plans the reload and changes nothing.
	DryRun bool
}

// The reload request's query parameters (ReloadOptions).
const (
	queryForce = "force"
	queryWait  = "wait"
)

// reloadQuery is o's Force and Wait as a request's query.
func (o ReloadOptions) reloadQuery() string {
	v := url.Values{}
	if o.Force {
		v.Set(queryForce, "1")
	}
	if o.Wait {
		v.Set(queryWait, "1")
	}
	if len(v) == 0 {
		return ""
	}
	return "?" + v.Encode()
}

// reloadOptionsOf reads ReloadOptions from a request's query.
func reloadOptionsOf(r *http.Request) ReloadOptions {
	q := r.URL.Query()
	return ReloadOptions{Force: q.Get(queryForce) == "1", Wait: q.Get(queryWait) == "1"}
}

// RequestReload is `envoy-agent reload`: it asks the agent running with the
// configuration at path to reload, waits for the outcome and prints it. It
// reads only the control socket's place from the file; the agent itself
// re-reads and checks the whole file.
//
// It proves it reached that agent, not a process that took its place: the
// answer must name the same configuration file (controlConfigHeader) and a
// pid (controlPidHeader) that is the pid the kernel gives for the socket's
// server (SO_PEERCRED), which runs as root, the caller's user or the
// service user (controlRequest).
//
// With opts.DryRun it prints the plan instead (nothing changes); with
// opts.Wait it waits for the reload guard's verdict too, and returns a
// *RolledBackError when the guard rolled the reload back.
func RequestReload(ctx context.Context, path string, opts ReloadOptions, out io.Writer) error {
	if opts.DryRun {
		return RequestPlan(ctx, path, nil, opts.Force, out)
	}
	cfg, err := config.LoadUnchecked(path)
	if err != nil {
		return err
	}
	sock := cfg.ControlSocketPath()
	ctx, cancel := context.WithTimeout(ctx, cfg.ReloadClientTimeout(opts.Wait))
	defer cancel()
	resp, server, err := controlRequest(ctx, sock, http.MethodPost, "/reload"+opts.reloadQuery(), reloadProgressType)
	if ue := (*config.UntrustedControlError)(nil); errors.As(err, &ue) {
		return fmt.Errorf("reload: %s: %w", sock, err)
	}
	if err != nil {
		return fmt.Errorf("reload: cannot reach the agent on its control socket %s (is envoy-agent running with %s? if agent.run_dir or agent.control_socket was edited, the agent still listens on the old one: restart the service): %w", sock, path, err)
	}
	defer resp.Body.Close()
	if err := checkControlIdentity(resp, server, path); err != nil {
		return fmt.Errorf("reload: %s: %w", sock, err)
	}
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusConflict {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("reload: the agent at %s answered %s: %s", sock, resp.Status, firstLine(string(body)))
	}
	res, err := readReloadAnswer(resp, sock, out)
	if err != nil {
		return err
	}
	if !res.OK {
		if res.Error == "" {
			res.Error = "no reason given"
		}
		return &ReloadError{Result: res}
	}
	if opts.Wait && res.Outcome == "" {
		return fmt.Errorf("reload: the agent at %s predates --wait: it reloaded (epoch %d serves) and said nothing of a reload guard", sock, res.Epoch)
	}
	if res.Outcome == OutcomeRolledBack {
		return &RolledBackError{Result: res}
	}
	// What changed and the note name Envoy's resources and files: printed
	// with their control characters escaped.
	res.Changed, res.Note, res.Path = printable.String(res.Changed), printable.String(res.Note), printable.String(res.Path)
	switch {
	case res.Path == PathInPlace:
		fmt.Fprintf(out, "reloaded in place: %s; epoch %d keeps serving (%d ms)\n", res.Changed, res.Epoch, res.TookMs)
	case res.Path != "" && res.Changed != "":
		fmt.Fprintf(out, "reloaded: epoch %d is serving (%d ms); %s: %s\n", res.Epoch, res.TookMs, strings.ReplaceAll(res.Path, "_", " "), res.Changed)
	default:
		fmt.Fprintf(out, "reloaded: epoch %d is serving (%d ms)\n", res.Epoch, res.TookMs)
	}
	if res.Note != "" {
		fmt.Fprintf(out, "  (%s)\n", res.Note)
	}
	if g := printable.String(res.Guard); g != "" {
		fmt.Fprintf(out, "  reload guard: %s\n", g)
	}
	return nil
}

// readReloadAnswer reads a reload's answer: progress lines first (an
// agent that predates them sends none), each printed to out, then the
// result.
func readReloadAnswer(resp *http.Response, sock string, out io.Writer) (ReloadResult, error) {
	dec := json.NewDecoder(io.LimitReader(resp.Body, 1<<20))
	for {
		var line struct {
			ReloadResult
			Progress string `json:"progress"`
		}
		if err := dec.Decode(&line); err != nil {
			return ReloadResult{}, fmt.Errorf("reload: the agent at %s answered %s, not a reload result: %w", sock, resp.Status, err)
		}
		if line.Progress == "" {
			return line.ReloadResult, nil
		}
		fmt.Fprintf(out, "reload: %s\n", printable.String(line.Progress))
	}
}

// controlPost POSTs to route on the control socket at sock, and returns the
// answer with the credentials of the process serving the socket.
func controlPost(ctx context.Context, sock, route string) (*http.Response, peerCred, error) {
	return controlRequest(ctx, sock, http.MethodPost, route, "")
}

// controlRequest is controlPost with any method, and an Accept header
// unless accept is "".
func controlRequest(ctx context.Context, sock, method, route, accept string) (*http.Response, peerCred, error) {
	return controlDo(ctx, sock, method, route, accept, nil)
}

// controlRequestBody is controlRequest with a JSON body.
func controlRequestBody(ctx context.Context, sock, method, route string, body io.Reader) (*http.Response, peerCred, error) {
	return controlDo(ctx, sock, method, route, "", body)
}

// controlDo is controlRequest with a body (nil: none). The socket's folder must
// be one another user cannot have made or written (checkControlDir), and
// the process serving the socket must be root, the caller's own user or the
// folder's owner (SO_PEERCRED of the connection); anyone else's answer is
// an error, not believed.
func controlDo(ctx context.Context, sock, method, route, accept string, body io.Reader) (*http.Response, peerCred, error) {
	dir, err := config.CheckControlDir(sock)
	if err != nil {
		return nil, peerCred{}, err
	}
	var server peerCred
	var credErr error
	tr := &http.Transport{
		Proxy:             nil,
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, "unix", sock)
			if err != nil {
				return nil, err
			}
			server, credErr = readPeerCred(c.(*net.UnixConn))
			if credErr == nil {
				credErr = believes(dir, server)
			}
			if credErr != nil {
				c.Close()
				return nil, errNotBelieved
			}
			return c, nil
		},
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://envoy-agent"+route, body)
	if err != nil {
		return nil, server, err
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if credErr != nil {
		return nil, server, credErr
	}
	if err != nil {
		return nil, server, err
	}
	return resp, server, nil
}

// errNotBelieved ends a connection to a process the client does not
// believe; controlRequest returns the reason instead.
var errNotBelieved = errors.New("the process serving the control socket is not believed")

// checkControlIdentity checks that the answer came from the agent running
// the configuration at path: see RequestReload.
func checkControlIdentity(resp *http.Response, server peerCred, path string) error {
	if err := checkControlPid(resp, server); err != nil {
		return err
	}
	pid := resp.Header.Get(controlPidHeader)
	runs := resp.Header.Get(controlConfigHeader)
	if !sameFile(runs, path) {
		return fmt.Errorf("the agent there (pid %s) runs %q, not %s: is agent.control_socket shared by two configurations?", pid, runs, path)
	}
	return nil
}

// checkControlPid checks that the answer came from the process serving
// the socket, and that it says it is an agent (controlPidHeader): the
// half of checkControlIdentity that does not ask which configuration it
// runs (`validate --plan` asks whichever agent serves the socket).
func checkControlPid(resp *http.Response, server peerCred) error {
	pid, err := strconv.Atoi(resp.Header.Get(controlPidHeader))
	if err != nil {
		return fmt.Errorf("the process serving it (pid %d, uid %d) is not an envoy-agent (no %s in its answer %s)", server.Pid, server.UID, controlPidHeader, resp.Status)
	}
	if int32(pid) != server.Pid {
		return fmt.Errorf("the answer claims pid %d but the process serving the socket is pid %d: not the agent", pid, server.Pid)
	}
	return nil
}

// sameFile reports whether a and b name one configuration file: the same
// absolute path, or the same file through links.
func sameFile(a, b string) bool {
	if a == "" {
		return false
	}
	absB, err := filepath.Abs(b)
	if err == nil && filepath.Clean(a) == absB {
		return true
	}
	fa, errA := os.Stat(a)
	fb, errB := os.Stat(b)
	return errA == nil && errB == nil && os.SameFile(fa, fb)
}

// IsConfigReloadError reports whether err is a reload refused for the
// configuration itself (a bad file, a setting that needs a restart, files
// the reload guard rolled back).
func IsConfigReloadError(err error) bool {
	var re *ReloadError
	return errors.As(err, &re) && re.Result.Config
}

// IsRolledBack reports whether err is a reload the reload guard rolled
// back (`reload --wait`).
func IsRolledBack(err error) bool {
	var rb *RolledBackError
	return errors.As(err, &rb)
}

// ReloadResult is the outcome of one reload, as `envoy-agent reload` and
// the log report it.
type ReloadResult struct {
	OK     bool   `json:"ok"`
	Epoch  int    `json:"epoch"` // the serving epoch afterwards
	Error  string `json:"error,omitempty"`
	Config bool   `json:"config_error,omitempty"` // refused for the configuration itself
	TookMs int64  `json:"took_ms"`
	// WaitedMs is the part of TookMs spent waiting for the epoch a previous
	// reload replaced to finish its requests (see waitForDrainingEpochs).
	WaitedMs int64 `json:"waited_ms,omitempty"`
	// Note says what the reload waited for, for `envoy-agent reload`.
	Note string `json:"note,omitempty"`
	// Path is how the reload changed Envoy (PathInPlace, PathHotRestart,
	// PathDrainRestart); set with reload_method "auto" only.
	Path string `json:"path,omitempty"`
	// Changed says, in place, what changed ("listeners updated ingress",
	// "nothing changed"); for a new epoch, why one was needed.
	Changed string `json:"changed,omitempty"`

	// Outcome is the reload's outcome as the status report gives it
	// (ReloadStatus.Outcome): OutcomeGuarding when the reload guard
	// watches the reload until GuardEnds; with `reload --wait`, the guard's
	// verdict: OutcomeOK or OutcomeRolledBack, with Rollback.
	Outcome   string          `json:"outcome,omitempty"`
	GuardEnds string          `json:"guard_ends,omitempty"`
	Rollback  *RollbackStatus `json:"rollback,omitempty"`
	// Guard says what the reload guard judged (`reload --wait`): no
	// regression over the window, or why it stopped watching.
	Guard string `json:"guard,omitempty"`
	// GuardWindow names, inside the agent, the reload guard's window of
	// this reload, for `reload --wait`; 0 for none. Not on the wire.
	GuardWindow uint64 `json:"-"`

	// DryRun: the answer of `reload --dry-run` or `validate --plan`, which
	// changed nothing; Plan is what a reload would do (nil when it would be
	// refused: Error says why).
	DryRun bool        `json:"dry_run,omitempty"`
	Plan   *PlanReport `json:"plan,omitempty"`
}

// The paths of a reload (ReloadResult.Path).
const (
	PathInPlace      = "in_place"
	PathHotRestart   = "hot_restart"
	PathDrainRestart = "drain_restart"
)

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
	return fmt.Sprintf("reload failed; epoch %d keeps serving: %s", e.Result.Epoch, printable.String(e.Result.Error))
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
func RequestReload(ctx context.Context, path string, out io.Writer) error {
	cfg, err := config.LoadUnchecked(path)
	if err != nil {
		return err
	}
	sock := cfg.ControlSocketPath()
	ctx, cancel := context.WithTimeout(ctx, cfg.ReloadClientTimeout())
	defer cancel()
	resp, server, err := controlRequest(ctx, sock, http.MethodPost, "/reload", reloadProgressType)
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
	// Progress lines first (an agent that predates them sends none), then
	// the result.
	dec := json.NewDecoder(io.LimitReader(resp.Body, 1<<20))
	var res ReloadResult
	for {
		var line struct {
			ReloadResult
			Progress string `json:"progress"`
		}
		if err := dec.Decode(&line); err != nil {
			return fmt.Errorf("reload: the agent at %s answered %s, not a reload result: %w", sock, resp.Status, err)
		}
		if line.Progress == "" {
			res = line.ReloadResult
			break
		}
		fmt.Fprintf(out, "reload: %s\n", printable.String(line.Progress))
	}
	if !res.OK {
		if res.Error == "" {
			res.Error = "no reason given"
		}
		return &ReloadError{Result: res}
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
	return nil
}

// controlPost POSTs to route on the control socket at sock, and returns the
// answer with the credentials of the process serving the socket.
func controlPost(ctx context.Context, sock, route string) (*http.Response, peerCred, error) {
	return controlRequest(ctx, sock, http.MethodPost, route, "")
}

// controlRequest is controlPost with any method, and an Accept header
// unless accept is "". The socket's folder must
// be one another user cannot have made or written (checkControlDir), and
// the process serving the socket must be root, the caller's own user or the
// folder's owner (SO_PEERCRED of the connection); anyone else's answer is
// an error, not believed.
func controlRequest(ctx context.Context, sock, method, route, accept string) (*http.Response, peerCred, error) {
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
	req, err := http.NewRequestWithContext(ctx, method, "http://envoy-agent"+route, nil)
	if err != nil {
		return nil, server, err
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
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
	pid, err := strconv.Atoi(resp.Header.Get(controlPidHeader))
	if err != nil {
		return fmt.Errorf("the process serving it (pid %d, uid %d) is not an envoy-agent (no %s in its answer %s)", server.Pid, server.UID, controlPidHeader, resp.Status)
	}
	if int32(pid) != server.Pid {
		return fmt.Errorf("the answer claims pid %d but the process serving the socket is pid %d: not the agent", pid, server.Pid)
	}
	runs := resp.Header.Get(controlConfigHeader)
	if !sameFile(runs, path) {
		return fmt.Errorf("the agent there (pid %d) runs %q, not %s: is agent.control_socket shared by two configurations?", pid, runs, path)
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
// configuration itself (a bad file, a setting that needs a restart).
func IsConfigReloadError(err error) bool {
	var re *ReloadError
	return errors.As(err, &re) && re.Result.Config
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
}

// The paths of a reload (ReloadResult.Path).
const (
	PathInPlace      = "in_place"
	PathHotRestart   = "hot_restart"
	PathDrainRestart = "drain_restart"
)

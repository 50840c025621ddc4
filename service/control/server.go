//go:build linux

package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"
)

// The control API is the agent's operator interface, on a unix socket
// (agent.control_socket, default <run_dir>/control.sock) that only root, the
// service user and the service group can use: the file is 0660 and owned by
// the service user and group, and every connection's peer credentials
// (SO_PEERCRED, SO_PEERGROUPS) are checked against controlPolicy, so that a
// loosened file mode still lets nobody else in.
//
// Every answer carries the agent's identity (controlConfigHeader,
// controlPidHeader), so that a client can prove it reached the agent that
// runs the configuration it names (see RequestReload).

const (
	// controlConfigHeader is the absolute path of the configuration file
	// the agent runs.
	controlConfigHeader = "Envoy-Agent-Config"
	// controlPidHeader is the agent's process id.
	controlPidHeader = "Envoy-Agent-Pid"
	// controlSocketMode lets root, the owner (the service user) and the
	// service group connect; connecting to a unix socket needs write
	// permission on it.
	controlSocketMode = 0o660
)

// Server serves the control routes. Its handlers take the peer's
// credentials, already checked, for the log.
type Server struct {
	Log        *logrus.Logger
	Policy     controlPolicy
	ConfigPath string // the absolute path of the configuration file
	Quit       func()
	Drain      func()
	Reload     func(context.Context, func(string), ReloadOptions) ReloadResult
	Plan       func(context.Context, *Candidate, bool) ReloadResult // POST /plan: a candidate (nil: the agent's own files), forced
	Report     http.HandlerFunc                                     // GET /status (statusreport.go)
	Reopen     func(context.Context) ReopenResult                   // POST /reopen_logs (reopenlogs.go)
	Upgrade    http.Handler                                         // GET and POST /upgrade (upgrade.go)
}

// controlRoute is one route of the control API: a net/http ServeMux pattern
// with its method ("POST /reload"), which gives 405 for other methods.
type controlRoute struct {
	pattern string
	handle  func(w http.ResponseWriter, r *http.Request, peer peerCred)
}

// routes is the control API. A route is one line here and one handler.
func (c *Server) routes() []controlRoute {
	return []controlRoute{
		{"POST /quitquitquit", c.handleQuit},
		{"POST /drain", c.handleDrain},
		{"POST /reload", c.handleReload},
		{"POST /plan", c.handlePlan},
		{"GET /status", c.handleStatus},
		{"POST /reopen_logs", c.handleReopenLogs},
		{"GET /upgrade", c.handleUpgrade},
		{"POST /upgrade", c.handleUpgrade},
	}
}

// Handler is the control API: peer check, then cross-origin check, then
// the routes.
func (c *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	for _, rt := range c.routes() {
		mux.HandleFunc(rt.pattern, func(w http.ResponseWriter, r *http.Request) {
			peer, _ := peerFrom(r.Context())
			rt.handle(w, r, peer)
		})
	}
	// A browser on the host cannot reach a unix socket, but a local proxy
	// might relay one: refuse cross-origin POSTs (Sec-Fetch-Site, Origin).
	return c.guard(http.NewCrossOriginProtection().Handler(mux))
}

// guard answers 403 to peers controlPolicy refuses, and stamps every answer
// with the agent's identity.
func (c *Server) guard(h http.Handler) http.Handler {
	pid := strconv.Itoa(os.Getpid())
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(controlConfigHeader, c.ConfigPath)
		w.Header().Set(controlPidHeader, pid)
		peer, ok := peerFrom(r.Context())
		if !ok {
			http.Error(w, "forbidden: the peer's credentials are unknown", http.StatusForbidden)
			return
		}
		if allowed, why := c.Policy.allows(peer); !allowed {
			c.Log.WithFields(logrus.Fields{"peer_pid": peer.Pid, "peer_uid": peer.UID}).Warnf("control: refused %s %s: %s", r.Method, r.URL.Path, why)
			http.Error(w, "forbidden: "+why, http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	})
}

func (c *Server) peerLog(peer peerCred) *logrus.Entry {
	return c.Log.WithFields(logrus.Fields{"peer_pid": peer.Pid, "peer_uid": peer.UID, "peer_gid": peer.GID})
}

func (c *Server) handleQuit(w http.ResponseWriter, _ *http.Request, peer peerCred) {
	c.peerLog(peer).Infof("/quitquitquit from %s: stopping envoy without a drain; the agent exits 0", peer)
	fmt.Fprintln(w, "OK")
	c.Quit()
}

func (c *Server) handleDrain(w http.ResponseWriter, _ *http.Request, peer peerCred) {
	c.peerLog(peer).Infof("/drain from %s: draining envoy with no end; the next stop exits at once", peer)
	c.Drain()
	fmt.Fprintln(w, "OK")
}

func (c *Server) handleReload(w http.ResponseWriter, r *http.Request, peer peerCred) {
	opts := reloadOptionsOf(r)
	c.peerLog(peer).WithFields(logrus.Fields{"force": opts.Force, "wait": opts.Wait}).Infof("/reload from %s", peer)
	if r.Header.Get("Accept") != reloadProgressType {
		res := c.Reload(r.Context(), nil, opts)
		w.Header().Set("Content-Type", "application/json")
		if !res.OK {
			w.WriteHeader(http.StatusConflict)
		}
		_ = json.NewEncoder(w).Encode(res)
		return
	}
	// A client that asks for progress (envoy-agent reload) hears at once
	// what the reload waits for, one JSON line each, then the result.
	w.Header().Set("Content-Type", reloadProgressType)
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	_ = rc.Flush()
	var mu sync.Mutex // progress comes from the reloader's goroutine
	enc := json.NewEncoder(w)
	done := false
	res := c.Reload(r.Context(), func(msg string) {
		mu.Lock()
		defer mu.Unlock()
		if !done {
			_ = enc.Encode(reloadProgress{Progress: msg})
			_ = rc.Flush()
		}
	}, opts)
	mu.Lock()
	done = true
	_ = enc.Encode(res)
	mu.Unlock()
}

// reloadProgressType is the Accept header with which a reload request asks
// for progress lines before the result (JSON objects, one a line).
const reloadProgressType = "application/x-ndjson"

// reloadProgress is one progress line of a reload's answer.
type reloadProgress struct {
	Progress string `json:"progress"`
}

// handlePlan is POST /plan: what a reload would do, of the agent's own
// files or of a candidate's (the body); nothing changes.
func (c *Server) handlePlan(w http.ResponseWriter, r *http.Request, peer peerCred) {
	candidate, err := candidateOf(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	force := reloadOptionsOf(r).Force
	what := "the agent's files"
	if candidate != nil {
		what = "the candidate " + candidate.Config.File
	}
	c.peerLog(peer).WithField("force", force).Infof("/plan of %s from %s", what, peer)
	res := c.Plan(r.Context(), candidate, force)
	w.Header().Set("Content-Type", "application/json")
	if !res.OK {
		w.WriteHeader(http.StatusConflict)
	}
	_ = json.NewEncoder(w).Encode(res)
}

func (c *Server) handleStatus(w http.ResponseWriter, r *http.Request, _ peerCred) {
	c.Report(w, r)
}

func (c *Server) handleUpgrade(w http.ResponseWriter, r *http.Request, peer peerCred) {
	if r.Method == http.MethodPost {
		c.peerLog(peer).Infof("/upgrade from %s", peer)
	}
	c.Upgrade.ServeHTTP(w, r)
}

func (c *Server) handleReopenLogs(w http.ResponseWriter, r *http.Request, peer peerCred) {
	c.peerLog(peer).Infof("/reopen_logs from %s", peer)
	res := c.Reopen(r.Context())
	w.Header().Set("Content-Type", "application/json")
	if !res.OK {
		w.WriteHeader(http.StatusConflict)
	}
	_ = json.NewEncoder(w).Encode(res)
}

// controlDialTimeout bounds the probe of a control socket left behind: a
// live agent accepts at once.
const controlDialTimeout = time.Second

// Listen binds the control socket at path with controlSocketMode. A
// socket file left by an agent that died is replaced; one that a live
// process answers on is an error (two agents on one run_dir), and so is any
// other kind of file there.
func Listen(path string) (*net.UnixListener, error) {
	addr := &net.UnixAddr{Name: path, Net: "unix"}
	ln, err := net.ListenUnix("unix", addr)
	if errors.Is(err, syscall.EADDRINUSE) {
		fi, lerr := os.Lstat(path)
		if lerr != nil || fi.Mode().Type() != os.ModeSocket {
			return nil, fmt.Errorf("%s exists and is not a socket: %w", path, err)
		}
		c, derr := net.DialTimeout("unix", path, controlDialTimeout)
		if derr == nil {
			c.Close()
			return nil, fmt.Errorf("%s: another process serves it (another envoy-agent with the same run_dir?): %w", path, err)
		}
		if !isConnRefused(derr) {
			return nil, fmt.Errorf("%s: %w (and it does not answer: %v)", path, err, derr)
		}
		// Left behind by an agent that is gone: nobody listens on it.
		if rerr := os.Remove(path); rerr != nil {
			return nil, fmt.Errorf("remove the stale control socket: %w", rerr)
		}
		ln, err = net.ListenUnix("unix", addr)
	}
	if err != nil {
		return nil, err
	}
	// The umask decided the mode at bind time; the peer check covers the
	// moment before this chmod.
	if err := os.Chmod(path, controlSocketMode); err != nil {
		ln.Close()
		return nil, fmt.Errorf("chmod %s: %w", path, err)
	}
	return ln, nil
}

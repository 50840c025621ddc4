//go:build linux

package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/envoy-agent/envoy-agent/envoy"
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

// controlServer serves the control routes. Its handlers take the peer's
// credentials, already checked, for the log.
type controlServer struct {
	log     *logrus.Logger
	policy  controlPolicy
	config  string // the absolute path of the configuration file
	quit    func()
	drain   func()
	reload  func(context.Context) ReloadResult
	report  http.HandlerFunc                   // GET /status (statusreport.go)
	reopen  func(context.Context) ReopenResult // POST /reopen_logs (reopenlogs.go)
	upgrade http.Handler                       // GET and POST /upgrade (upgrade.go)
}

// controlRoute is one route of the control API: a net/http ServeMux pattern
// with its method ("POST /reload"), which gives 405 for other methods.
type controlRoute struct {
	pattern string
	handle  func(w http.ResponseWriter, r *http.Request, peer peerCred)
}

// routes is the control API. A route is one line here and one handler.
func (c *controlServer) routes() []controlRoute {
	return []controlRoute{
		{"POST /quitquitquit", c.handleQuit},
		{"POST /drain", c.handleDrain},
		{"POST /reload", c.handleReload},
		{"GET /status", c.handleStatus},
		{"POST /reopen_logs", c.handleReopenLogs},
		{"GET /upgrade", c.handleUpgrade},
		{"POST /upgrade", c.handleUpgrade},
	}
}

// handler is the control API: peer check, then cross-origin check, then
// the routes.
func (c *controlServer) handler() http.Handler {
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
func (c *controlServer) guard(h http.Handler) http.Handler {
	pid := strconv.Itoa(os.Getpid())
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(controlConfigHeader, c.config)
		w.Header().Set(controlPidHeader, pid)
		peer, ok := peerFrom(r.Context())
		if !ok {
			http.Error(w, "forbidden: the peer's credentials are unknown", http.StatusForbidden)
			return
		}
		if allowed, why := c.policy.allows(peer); !allowed {
			c.log.WithFields(logrus.Fields{"peer_pid": peer.Pid, "peer_uid": peer.UID}).Warnf("control: refused %s %s: %s", r.Method, r.URL.Path, why)
			http.Error(w, "forbidden: "+why, http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	})
}

func (c *controlServer) peerLog(peer peerCred) *logrus.Entry {
	return c.log.WithFields(logrus.Fields{"peer_pid": peer.Pid, "peer_uid": peer.UID, "peer_gid": peer.GID})
}

func (c *controlServer) handleQuit(w http.ResponseWriter, _ *http.Request, peer peerCred) {
	c.peerLog(peer).Infof("/quitquitquit from %s: stopping envoy without a drain; the agent exits 0", peer)
	fmt.Fprintln(w, "OK")
	c.quit()
}

func (c *controlServer) handleDrain(w http.ResponseWriter, _ *http.Request, peer peerCred) {
	c.peerLog(peer).Infof("/drain from %s: draining envoy with no end; the next stop exits at once", peer)
	c.drain()
	fmt.Fprintln(w, "OK")
}

func (c *controlServer) handleReload(w http.ResponseWriter, r *http.Request, peer peerCred) {
	c.peerLog(peer).Infof("/reload from %s", peer)
	res := c.reload(r.Context())
	w.Header().Set("Content-Type", "application/json")
	if !res.OK {
		w.WriteHeader(http.StatusConflict)
	}
	_ = json.NewEncoder(w).Encode(res)
}

func (c *controlServer) handleStatus(w http.ResponseWriter, r *http.Request, _ peerCred) {
	c.report(w, r)
}

func (c *controlServer) handleUpgrade(w http.ResponseWriter, r *http.Request, peer peerCred) {
	if r.Method == http.MethodPost {
		c.peerLog(peer).Infof("/upgrade from %s", peer)
	}
	c.upgrade.ServeHTTP(w, r)
}

func (c *controlServer) handleReopenLogs(w http.ResponseWriter, r *http.Request, peer peerCred) {
	c.peerLog(peer).Infof("/reopen_logs from %s", peer)
	res := c.reopen(r.Context())
	w.Header().Set("Content-Type", "application/json")
	if !res.OK {
		w.WriteHeader(http.StatusConflict)
	}
	_ = json.NewEncoder(w).Encode(res)
}

// controlDialTimeout bounds the probe of a control socket left behind: a
// live agent accepts at once.
const controlDialTimeout = time.Second

// listenControl binds the control socket at path with controlSocketMode. A
// socket file left by an agent that died is replaced; one that a live
// process answers on is an error (two agents on one run_dir), and so is any
// other kind of file there.
func listenControl(path string) (*net.UnixListener, error) {
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

// newControl binds the control socket of the running configuration; the
// caller sets quit.
func (s *supervisor) newControl() (*controlServer, *net.UnixListener, error) {
	cfg := s.config()
	path := cfg.controlSocket()
	key := "agent.control_socket"
	if cfg.Agent.ControlSocket == "" {
		key = "agent.run_dir"
	}
	abs, err := filepath.Abs(cfg.File)
	if err != nil {
		return nil, nil, fmt.Errorf("the configuration's path: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, nil, fmt.Errorf("%s: the control socket's folder: %w", key, err)
	}
	// As run_dir: only the agent's user or root may own the folder.
	if err := envoy.CheckRunDir(filepath.Dir(path)); err != nil {
		return nil, nil, fmt.Errorf("%s: the control socket's folder: %w", key, err)
	}
	ln, err := listenControl(path)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: the control socket: %w", key, err)
	}
	c := &controlServer{log: s.log, policy: ownControlPolicy(), config: abs, drain: s.drainNow, reload: s.requestReload}
	return c, ln, nil
}

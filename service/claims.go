//go:build linux

package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/envoy-agent/envoy-agent/internal/hostfiles"
	"github.com/envoy-agent/envoy-agent/service/config"
)

// Several agents on one host (envoy-agent@.service) must not share a base_id
// (Envoy's shared memory) or a port. An agent holds what it uses through
// locks on files in the claims directory (claimsdir.go): base-id-N and
// port-P, each locked (an open file description lock, F_OFD_SETLK) for as
// long as the agent lives; the kernel drops the lock when it dies, so
// nothing goes stale, and the lock's fd is handed over across a live
// upgrade, so there is no moment without it. The holder writes who it is
// (JSON) into the file, so a clash names the other instance. Only root and
// the service's user can write in that directory: another local user can
// neither take a claim first nor fake an answer (the abstract sockets used
// before could be bound by anyone). The base id claim is exclusive: a
// second agent refuses to start. Port claims only name the holder once the
// real bind has failed.

// EnvInstance is the variable through which envoy-agent@.service tells the
// agent its instance name (Environment=ENVOY_AGENT_INSTANCE=%i).
const EnvInstance = "ENVOY_AGENT_INSTANCE"

// claimAnswerMax bounds what is read of a claim file.
const claimAnswerMax = 4096

// agentIdentity is what a claim's holder writes into its claim file.
type agentIdentity struct {
	Pid      int    `json:"pid"`
	Config   string `json:"config"`
	Instance string `json:"instance,omitempty"`
	Uid      int    `json:"-"` // the claim file's owner
}

func selfIdentity(cfg *config.Config) agentIdentity {
	return agentIdentity{Pid: os.Getpid(), Config: absPath(cfg.File), Instance: os.Getenv(EnvInstance)}
}

// absPath is p made absolute, or p when that fails.
func absPath(p string) string {
	if abs, err := filepath.Abs(p); err == nil {
		return abs
	}
	return p
}

func (id agentIdentity) String() string {
	if id.Pid == 0 {
		return fmt.Sprintf("an unknown process of uid %d", id.Uid)
	}
	if id.Instance != "" {
		return fmt.Sprintf("envoy-agent@%s (pid %d, %s)", id.Instance, id.Pid, id.Config)
	}
	return fmt.Sprintf("the envoy-agent running with %s (pid %d)", id.Config, id.Pid)
}

// claims are the claim files one agent holds locked.
type claims struct {
	files []*os.File
}

// Close releases every claim.
func (c *claims) Close() {
	for _, f := range c.files {
		f.Close()
	}
}

func baseIDClaim(id uint32) string      { return "base-id-" + strconv.FormatUint(uint64(id), 10) }
func portClaim(port config.Port) string { return "port-" + strconv.Itoa(int(port)) }

// claimResources takes this agent's base id (exclusively: a clash is an
// error naming the other instance and the key to change) and its ports (for
// naming only), before anything binds or Envoy starts. An agent adopting a
// running Envoy (a live upgrade) takes over the claims handed to it.
func claimResources(cfg *config.Config, log *logrus.Logger, handed []claimFD) (*claims, error) {
	self := selfIdentity(cfg)
	dir, err := claimsDir()
	if err != nil {
		return nil, fmt.Errorf("claims: %w", err)
	}
	c := &claims{}
	if len(handed) > 0 {
		for _, h := range handed {
			f, err := adoptClaim(h)
			if err != nil {
				c.Close()
				return nil, err
			}
			writeIdentity(f, self)
			c.files = append(c.files, f)
		}
		return c, nil
	}
	f, holder, err := lockClaim(dir, baseIDClaim(cfg.Envoy.BaseID))
	if err != nil {
		return nil, fmt.Errorf("envoy.base_id: hold base_id %d: %w", cfg.Envoy.BaseID, err)
	}
	if f == nil {
		return nil, config.Problemf(cfg, "envoy.base_id", "base_id %d is already used by %s; two Envoys on one host need different base_ids: set envoy.base_id here to another value (%d is free)",
			cfg.Envoy.BaseID, holder, freeBaseID(cfg.Envoy.BaseID))
	}
	writeIdentity(f, self)
	c.files = append(c.files, f)
	// No probe of Envoy's default abstract hot-restart sockets
	// (@envoy_domain_socket_parent_N): any local user can bind those names,
	// and the agent's Envoys use --socket-path. An Envoy that no agent runs
	// and that shares this base id's shared memory is found where it
	// clashes, before epoch 0 starts (hostfiles.ClearLeftovers: the pid and
	// uid that map the region), as a run-time failure.
	for _, p := range []config.Port{cfg.Envoy.AdminPort, cfg.Agent.StatusPort, cfg.Agent.PrometheusPort} {
		if p == 0 {
			continue
		}
		f, holder, err := lockClaim(dir, portClaim(p))
		switch {
		case err != nil:
			log.Debugf("port %d: claim: %v", p, err)
		case f == nil:
			log.Debugf("port %d: claimed by %s", p, holder)
		default:
			writeIdentity(f, self)
			c.files = append(c.files, f)
		}
	}
	return c, nil
}

// ofdLock is a write lock on a whole file, owned by the open file
// description: it survives execve with the fd, and ends when the last fd
// of the description is closed (or the holder dies).
func ofdLock(typ int16) *unix.Flock_t {
	return &unix.Flock_t{Type: typ, Whence: io.SeekStart}
}

// lockClaim opens dir/name and locks it. It returns the locked file, or
// nil and the holder when another process holds it.
func lockClaim(dir, name string) (*os.File, agentIdentity, error) {
	path := filepath.Join(dir, name)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, agentIdentity{}, err
	}
	if err := unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, ofdLock(unix.F_WRLCK)); err != nil {
		f.Close()
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EACCES) {
			holder, _ := readClaim(dir, name)
			return nil, holder, nil
		}
		return nil, agentIdentity{}, fmt.Errorf("lock %s: %w", path, err)
	}
	return f, agentIdentity{}, nil
}

// writeIdentity writes self into a locked claim file.
func writeIdentity(f *os.File, self agentIdentity) {
	b, _ := json.Marshal(self)
	if f.Truncate(0) == nil {
		_, _ = f.WriteAt(append(b, '\n'), 0)
	}
}

// readClaim returns the holder of claim name, and whether one holds it: a
// file nobody has locked is a claim whose holder has gone.
func readClaim(dir, name string) (agentIdentity, bool) {
	var id agentIdentity
	f, err := os.OpenFile(filepath.Join(dir, name), os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return id, false
	}
	defer f.Close()
	lk := ofdLock(unix.F_RDLCK)
	if err := unix.FcntlFlock(f.Fd(), unix.F_OFD_GETLK, lk); err != nil || lk.Type == unix.F_UNLCK {
		return id, false
	}
	if fi, err := f.Stat(); err == nil {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			id.Uid = int(st.Uid)
		}
	}
	b, _ := io.ReadAll(io.LimitReader(f, claimAnswerMax))
	if json.Unmarshal(b, &id) != nil {
		id.Pid = 0
	}
	return id, true
}

// askClaim names the holder of claim name, if one holds it.
func askClaim(name string) (agentIdentity, bool) {
	dir, err := claimsDir()
	if err != nil {
		return agentIdentity{}, false
	}
	return readClaim(dir, name)
}

// agentOnPort names the envoy-agent that holds port, if one does.
func agentOnPort(port config.Port) (agentIdentity, bool) {
	id, ok := askClaim(portClaim(port))
	return id, ok && id.Pid != os.Getpid()
}

// freeBaseID suggests the lowest base id above 0 that no agent and no Envoy
// holds now.
func freeBaseID(taken uint32) uint32 {
	for id := uint32(1); id < 1000; id++ {
		if id == taken {
			continue
		}
		if _, held := askClaim(baseIDClaim(id)); held {
			continue
		}
		if _, err := os.Lstat(hostfiles.SharedMemoryPath(id)); err == nil {
			continue
		}
		return id
	}
	return taken + 1
}

// adminPortDialTimeout bounds the connect that finds Envoy's admin port
// taken: a local listener answers at once.
const adminPortDialTimeout = time.Second

// checkAdminPortFree fails when something already listens on Envoy's admin
// port. Envoy would fail to bind it, but only after the agent's readiness
// probe, which asks that port, took the other Envoy's LIVE for its own (seen
// with two agents given one admin_port). It names the envoy-agent whose port
// it is when it can.
func checkAdminPortFree(ctx context.Context, cfg *config.Config) error {
	addr := net.JoinHostPort(cfg.Agent.Localhost, strconv.Itoa(int(cfg.Envoy.AdminPort)))
	d := net.Dialer{Timeout: adminPortDialTimeout}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil
	}
	conn.Close()
	if holder, ok := agentOnPort(cfg.Envoy.AdminPort); ok {
		return config.Problemf(cfg, "envoy.admin_port", "port %d (Envoy's admin) is already used by %s: give this instance an admin_port of its own, and the same port in its bootstrap's admin address (%s)",
			cfg.Envoy.AdminPort, holder, cfg.Envoy.ConfigPath)
	}
	return fmt.Errorf("envoy.admin_port: cannot bind %s for Envoy's admin API: another process already listens there; stop it, or change envoy.admin_port in %s and the admin address in %s to a free port", addr, cfg.File, cfg.Envoy.ConfigPath)
}

// portInUse wraps the error of binding one of the agent's own ports; when
// another envoy-agent holds the port, it is a configuration error naming it.
func portInUse(cfg *config.Config, key string, port config.Port, err error) error {
	if errors.Is(err, syscall.EADDRINUSE) {
		if holder, ok := agentOnPort(port); ok {
			return config.Problemf(cfg, key, "port %d is already used by %s: give this instance a %s of its own", port, holder, key)
		}
	}
	return err
}

//go:build linux

package claims

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

// claimAnswerMax bounds what is read of a claim file.
const claimAnswerMax = 4096

// agentIdentity is what a claim's holder writes into its claim file.
type agentIdentity struct {
	Pid      int    `json:"pid"`
	Config   string `json:"config"`
	Instance string `json:"instance,omitempty"`
	Uid      int    `json:"-"` // the claim file's owner
}

// String names the holder as a clash reports it.
func (id agentIdentity) String() string {
	if id.Pid == 0 {
		return fmt.Sprintf("an unknown process of uid %d", id.Uid)
	}
	if id.Instance != "" {
		return fmt.Sprintf("envoy-agent@%s (pid %d, %s)", id.Instance, id.Pid, id.Config)
	}
	return fmt.Sprintf("the envoy-agent running with %s (pid %d)", id.Config, id.Pid)
}

// Self names this agent in the claim files it holds, so that another
// agent's clash says which one holds the base id or port.
type Self struct {
	Config   string // the configuration file, absolute
	Instance string // NAME of envoy-agent@NAME, "" outside the template unit
}

// identity is what this agent writes into its claim files.
func (s Self) identity() agentIdentity {
	return agentIdentity{Pid: os.Getpid(), Config: s.Config, Instance: s.Instance}
}

// Held is the claim files one agent holds locked.
type Held struct {
	files []*os.File
}

// Close releases every claim.
func (c *Held) Close() {
	for _, f := range c.files {
		f.Close()
	}
}

func baseIDClaim(id uint32) string      { return "base-id-" + strconv.FormatUint(uint64(id), 10) }
func portClaim(port config.Port) string { return "port-" + strconv.Itoa(int(port)) }

// Take takes this agent's base id (exclusively: a clash is an error naming
// the other instance and the key to change) and its ports (for naming only),
// before anything binds or Envoy starts; cfg gives the base id and ports,
// self is written into each claim file. An agent adopting a running Envoy
// (a live upgrade) takes over the claims handed to it instead.
func Take(cfg *config.Config, self Self, log *logrus.Logger, handed []FD) (*Held, error) {
	id := self.identity()
	dir, err := claimsDir()
	if err != nil {
		// No folder of this user's: a configuration to fix (exit 3), which
		// no restart mends.
		return nil, config.Problemf(cfg, "", "claims: %v", err)
	}
	c := &Held{}
	if len(handed) > 0 {
		for _, h := range handed {
			f, err := adoptClaim(h)
			if err != nil {
				c.Close()
				return nil, err
			}
			writeIdentity(f, id)
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
			cfg.Envoy.BaseID, holder, FreeBaseID(cfg.Envoy.BaseID))
	}
	writeIdentity(f, id)
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
			writeIdentity(f, id)
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

// otherAgent is the holder of claim name when one holds it and it is not
// this agent. The package's config.Problemf calls pass the holder itself,
// not its String: Problemf shortens string arguments (values echoed from
// the file) to 64 bytes, and a holder's name is not one.
func otherAgent(name string) (agentIdentity, bool) {
	id, ok := askClaim(name)
	return id, ok && id.Pid != os.Getpid()
}

// named is holder's name when ok, for the exported look-ups.
func named(holder agentIdentity, ok bool) (string, bool) {
	if !ok {
		return "", false
	}
	return holder.String(), true
}

// AgentOnPort names the envoy-agent other than this one that holds port,
// if one does.
func AgentOnPort(port config.Port) (string, bool) {
	return named(otherAgent(portClaim(port)))
}

// AgentOnBaseID names the envoy-agent other than this one that holds base
// id id, if one does.
func AgentOnBaseID(id uint32) (string, bool) {
	return named(otherAgent(baseIDClaim(id)))
}

// FreeBaseID suggests the lowest base id above 0, other than taken, that no
// agent and no Envoy holds now.
func FreeBaseID(taken uint32) uint32 {
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

// CheckAdminPortFree fails when something already listens on Envoy's admin
// port. Envoy would fail to bind it, but only after the agent's readiness
// probe, which asks that port, took the other Envoy's LIVE for its own (seen
// with two agents given one admin_port). It names the envoy-agent whose port
// it is when it can.
func CheckAdminPortFree(ctx context.Context, cfg *config.Config) error {
	addr := net.JoinHostPort(cfg.Agent.Localhost, strconv.Itoa(int(cfg.Envoy.AdminPort)))
	d := net.Dialer{Timeout: adminPortDialTimeout}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil
	}
	conn.Close()
	if holder, ok := otherAgent(portClaim(cfg.Envoy.AdminPort)); ok {
		return config.Problemf(cfg, "envoy.admin_port", "port %d (Envoy's admin) is already used by %s: give this instance an admin_port of its own, and the same port in its bootstrap's admin address (%s)",
			cfg.Envoy.AdminPort, holder, cfg.Envoy.ConfigPath)
	}
	return fmt.Errorf("envoy.admin_port: cannot bind %s for Envoy's admin API: another process already listens there; stop it, or change envoy.admin_port in %s and the admin address in %s to a free port", addr, cfg.File, cfg.Envoy.ConfigPath)
}

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
	"strings"
	"syscall"
	"time"

	"github.com/envoy-agent/envoy-agent/service/config"

	"github.com/sirupsen/logrus"
)

// Several agents on one host (envoy-agent@.service) must not share a base_id
// (Envoy's hot-restart sockets and shared memory) or a port. An agent holds
// what it uses through abstract unix sockets named claimPrefix + "base-id/N"
// and claimPrefix + "port/P": they live exactly as long as the agent (the
// kernel releases them when it dies, so nothing goes stale) and they are
// per network namespace, as Envoy's own hot-restart sockets are. Whoever
// connects to one reads the holder's identity (JSON), so a clash names the
// other instance. The base id claim is exclusive: a second agent refuses to
// start. Port claims only name the holder once the real bind has failed.
const claimPrefix = "@envoy-agent/"

// EnvInstance is the variable through which envoy-agent@.service tells the
// agent its instance name (Environment=ENVOY_AGENT_INSTANCE=%i).
const EnvInstance = "ENVOY_AGENT_INSTANCE"

// claimAskTimeout bounds asking a claim's holder who it is: a live agent
// answers from a goroutine at once; a wedged one must not stall our start.
const claimAskTimeout = time.Second

// envoyBaseIDScale is Envoy's multiplier from --base-id to the numbers in its
// hot-restart socket names (and shared memory name); each base id owns the
// ten numbers from base_id*10.
const envoyBaseIDScale = 10

// agentIdentity is what a claim's holder tells whoever asks.
type agentIdentity struct {
	Pid      int    `json:"pid"`
	Config   string `json:"config"`
	Instance string `json:"instance,omitempty"`
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
	if id.Instance != "" {
		return fmt.Sprintf("envoy-agent@%s (pid %d, %s)", id.Instance, id.Pid, id.Config)
	}
	return fmt.Sprintf("the envoy-agent running with %s (pid %d)", id.Config, id.Pid)
}

// claims are the abstract sockets one agent holds.
type claims struct {
	lns []net.Listener
}

// Close releases every claim.
func (c *claims) Close() {
	for _, ln := range c.lns {
		ln.Close()
	}
}

func baseIDClaim(id uint32) string {
	return claimPrefix + "base-id/" + strconv.FormatUint(uint64(id), 10)
}
func portClaim(port config.Port) string { return claimPrefix + "port/" + strconv.Itoa(int(port)) }

// claimResources takes this agent's base id (exclusively: a clash is an
// error naming the other instance and the key to change) and its ports (for
// naming only), before anything binds or Envoy starts.
func claimResources(cfg *config.Config, log *logrus.Logger, adopting bool) (*claims, error) {
	self := selfIdentity(cfg)
	c := &claims{}
	ln, err := listenClaim(baseIDClaim(cfg.Envoy.BaseID), self)
	if err != nil {
		if !errors.Is(err, syscall.EADDRINUSE) {
			return nil, fmt.Errorf("envoy.base_id: hold base_id %d: %w", cfg.Envoy.BaseID, err)
		}
		holder, askErr := askClaim(baseIDClaim(cfg.Envoy.BaseID))
		if askErr != nil {
			return nil, fmt.Errorf("envoy.base_id: base_id %d is held by another envoy-agent on this host, which did not say who it is (%v): give this one a base_id of its own in %s", cfg.Envoy.BaseID, askErr, cfg.File)
		}
		return nil, config.Problemf(cfg, "envoy.base_id", "base_id %d is already used by %s; two Envoys on one host need different base_ids: set envoy.base_id here to another value (%d is free)",
			cfg.Envoy.BaseID, holder, freeBaseID(cfg.Envoy.BaseID))
	}
	c.lns = append(c.lns, ln)
	// An agent adopting a running Envoy (a live upgrade) finds that Envoy's
	// own hot-restart socket bound: it is not a stranger's.
	if sock, busy := envoyHotRestartSocketBusy(cfg.Envoy.BaseID); busy && !adopting {
		c.Close()
		return nil, config.Problemf(cfg, "envoy.base_id", "base_id %d is already used by an Envoy on this host that no envoy-agent runs (its hot-restart socket %s is bound): set envoy.base_id here to another value (%d is free)",
			cfg.Envoy.BaseID, sock, freeBaseID(cfg.Envoy.BaseID))
	}
	for _, p := range []config.Port{cfg.Envoy.AdminPort, cfg.Agent.StatusPort, cfg.Agent.PrometheusPort} {
		if p == 0 {
			continue
		}
		if ln, err := listenClaim(portClaim(p), self); err == nil {
			c.lns = append(c.lns, ln)
		} else {
			log.Debugf("port %d: claim %s: %v", p, portClaim(p), err)
		}
	}
	return c, nil
}

// listenClaim binds the abstract socket name and answers every connection
// with self.
func listenClaim(name string, self agentIdentity) (net.Listener, error) {
	ln, err := net.Listen("unix", name)
	if err != nil {
		return nil, err
	}
	answer, _ := json.Marshal(self)
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			_ = conn.SetWriteDeadline(time.Now().Add(claimAskTimeout))
			_, _ = conn.Write(append(answer, '\n'))
			conn.Close()
		}
	}()
	return ln, nil
}

// askClaim asks the holder of the claim name who it is.
func askClaim(name string) (agentIdentity, error) {
	var id agentIdentity
	conn, err := net.DialTimeout("unix", name, claimAskTimeout)
	if err != nil {
		return id, err
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(claimAskTimeout))
	b, err := io.ReadAll(io.LimitReader(conn, 4096))
	if err != nil {
		return id, err
	}
	if err := json.Unmarshal(b, &id); err != nil {
		return id, fmt.Errorf("not an envoy-agent's answer: %w", err)
	}
	return id, nil
}

// agentOnPort names the envoy-agent that holds port, if one does.
func agentOnPort(port config.Port) (agentIdentity, bool) {
	id, err := askClaim(portClaim(port))
	return id, err == nil && id.Pid != os.Getpid()
}

// envoyHotRestartSocketBusy probes the abstract datagram sockets Envoy binds
// for a base id (`envoy_domain_socket_parent_<base_id*10+n>` and `_child_`;
// Envoy pads the name to the full sun_path with NULs, and abstract names
// match byte for byte). Connecting to a datagram socket sends nothing.
func envoyHotRestartSocketBusy(baseID uint32) (string, bool) {
	for n := range uint64(envoyBaseIDScale) {
		for _, role := range []string{"parent", "child"} {
			name := "envoy_domain_socket_" + role + "_" + strconv.FormatUint(uint64(baseID)*envoyBaseIDScale+n, 10)
			if unixgramBound("@" + name + strings.Repeat("\x00", envoySunPathLen-1-len(name))) {
				return "@" + name, true
			}
		}
	}
	return "", false
}

// envoySunPathLen is sizeof(sockaddr_un.sun_path) on Linux, which Envoy
// uses as the length of every hot-restart socket address.
const envoySunPathLen = 108

func unixgramBound(name string) bool {
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer syscall.Close(fd)
	return syscall.Connect(fd, &syscall.SockaddrUnix{Name: name}) == nil
}

// freeBaseID suggests the lowest base id above 0 that no agent and no Envoy
// holds now.
func freeBaseID(taken uint32) uint32 {
	for id := uint32(1); id < 1000; id++ {
		if id == taken {
			continue
		}
		if _, err := askClaim(baseIDClaim(id)); err == nil {
			continue
		}
		if _, busy := envoyHotRestartSocketBusy(id); busy {
			continue
		}
		return id
	}
	return taken + 1
}

// checkAdminPortFree fails when something already listens on Envoy's admin
// port. Envoy would fail to bind it, but only after the agent's readiness
// probe, which asks that port, took the other Envoy's LIVE for its own (seen
// with two agents given one admin_port). It names the envoy-agent whose port
// it is when it can.
func checkAdminPortFree(ctx context.Context, cfg *config.Config) error {
	addr := net.JoinHostPort(cfg.Agent.Localhost, strconv.Itoa(int(cfg.Envoy.AdminPort)))
	d := net.Dialer{Timeout: claimAskTimeout}
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

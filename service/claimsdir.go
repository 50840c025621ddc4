//go:build linux

package service

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/envoy-agent/envoy-agent/envoy"
	"github.com/envoy-agent/envoy-agent/envoy/hostfiles"
)

// EnvClaimsDir overrides where the agents of a host keep their claims
// (clash.go). Every agent that is to see the others' claims must use the
// same directory.
const EnvClaimsDir = "ENVOY_AGENT_CLAIMS_DIR"

// rootClaimsDir is the claims directory of agents run by root outside the
// units.
const rootClaimsDir = "/run/envoy-agent-claims"

// claimsDir is the directory of the claim files, made if missing (0700),
// refused when anyone but root or the agent's user could write in it:
//
//   - $ENVOY_AGENT_CLAIMS_DIR when set;
//   - under the units, $STATE_DIRECTORY/claims (StateDirectory=envoy-agent:
//     /var/lib/envoy-agent, shared by envoy-agent.service and every
//     envoy-agent@ instance, owned by the service's user and never removed
//     when a unit stops, unlike a shared RuntimeDirectory=);
//   - for root, /run/envoy-agent-claims;
//   - for another user, $XDG_RUNTIME_DIR/envoy-agent-claims, else
//     envoy-agent-claims-UID in the temporary directory.
func claimsDir() (string, error) {
	dir := os.Getenv(EnvClaimsDir)
	switch {
	case dir != "":
	case os.Getenv("STATE_DIRECTORY") != "":
		// systemd lists one path per StateDirectory=, colon-separated.
		first, _, _ := strings.Cut(os.Getenv("STATE_DIRECTORY"), ":")
		dir = filepath.Join(first, "claims")
	case os.Geteuid() == 0:
		dir = rootClaimsDir
	case os.Getenv("XDG_RUNTIME_DIR") != "":
		dir = filepath.Join(os.Getenv("XDG_RUNTIME_DIR"), "envoy-agent-claims")
	default:
		dir = filepath.Join(os.TempDir(), "envoy-agent-claims-"+strconv.Itoa(os.Geteuid()))
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return "", err
	}
	if err := hostfiles.CheckRunDir(dir); err != nil {
		return "", fmt.Errorf("claims directory (set %s to another): %w", EnvClaimsDir, err)
	}
	return dir, nil
}

// claimFD is a locked claim file handed over across a live upgrade: the
// lock belongs to the open file, which the exec keeps.
type claimFD struct {
	Name string `json:"name"`
	FD   int    `json:"fd"`
}

// adoptClaim takes over a claim file inherited through the exec.
func adoptClaim(h claimFD) (*os.File, error) {
	f := os.NewFile(uintptr(h.FD), h.Name)
	if f == nil {
		return nil, fmt.Errorf("claim %s: bad inherited fd %d", h.Name, h.FD)
	}
	if _, err := envoy.Inheritable(f, false); err != nil {
		f.Close()
		return nil, fmt.Errorf("claim %s: inherited fd %d: %w", h.Name, h.FD, err)
	}
	return f, nil
}

// handOver makes every claim file inheritable and lists them; undo makes
// them close-on-exec again (the exec failed).
func (c *claims) handOver() (handed []claimFD, undo func(), err error) {
	undo = func() {
		for _, f := range c.files {
			_, _ = envoy.Inheritable(f, false)
		}
	}
	for _, f := range c.files {
		fd, err := envoy.Inheritable(f, true)
		if err != nil {
			undo()
			return nil, func() {}, fmt.Errorf("keep claim %s across the exec: %w", filepath.Base(f.Name()), err)
		}
		handed = append(handed, claimFD{Name: filepath.Base(f.Name()), FD: fd})
	}
	return handed, undo, nil
}

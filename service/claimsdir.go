//go:build linux

package service

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/envoy-agent/envoy-agent/envoy/reexec"
	"github.com/envoy-agent/envoy-agent/internal/hostfiles"
)

// EnvClaimsDir overrides where the agents of a host keep their claims
// (claims.go). Every agent that is to see the others' claims must use the
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
//     envoy-agent-claims-UID in the temporary directory, unless another
//     user made that first (any local user can, in a shared /tmp): then
//     envoy-agent-claims in the user's cache folder (~/.cache), which every
//     agent of that user then finds the same way.
func claimsDir() (string, error) {
	var dirs []string
	switch dir := os.Getenv(EnvClaimsDir); {
	case dir != "":
		dirs = []string{dir}
	case os.Getenv("STATE_DIRECTORY") != "":
		// systemd lists one path per StateDirectory=, colon-separated.
		first, _, _ := strings.Cut(os.Getenv("STATE_DIRECTORY"), ":")
		dirs = []string{filepath.Join(first, "claims")}
	case os.Geteuid() == 0:
		dirs = []string{rootClaimsDir}
	case os.Getenv("XDG_RUNTIME_DIR") != "":
		dirs = []string{filepath.Join(os.Getenv("XDG_RUNTIME_DIR"), "envoy-agent-claims")}
	default:
		dirs = []string{filepath.Join(os.TempDir(), "envoy-agent-claims-"+strconv.Itoa(os.Geteuid()))}
		if cache, err := os.UserCacheDir(); err == nil {
			dirs = append(dirs, filepath.Join(cache, "envoy-agent-claims"))
		}
	}
	var first error
	for _, dir := range dirs {
		err := os.MkdirAll(dir, 0o700)
		if err == nil {
			err = hostfiles.CheckRunDir(dir)
		}
		if err == nil {
			return dir, nil
		}
		if first == nil {
			first = err
		}
	}
	return "", fmt.Errorf("claims directory (set %s to another): %w", EnvClaimsDir, first)
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
	if _, err := reexec.Inheritable(f, false); err != nil {
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
			_, _ = reexec.Inheritable(f, false)
		}
	}
	for _, f := range c.files {
		fd, err := reexec.Inheritable(f, true)
		if err != nil {
			undo()
			return nil, func() {}, fmt.Errorf("keep claim %s across the exec: %w", filepath.Base(f.Name()), err)
		}
		handed = append(handed, claimFD{Name: filepath.Base(f.Name()), FD: fd})
	}
	return handed, undo, nil
}

//go:build linux

package claims

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/envoy-agent/envoy-agent/internal/hostfiles"
)

// EnvDir is the variable that overrides where the agents of a host keep
// their claims. Every agent that is to see the others' claims must use the
// same directory.
const EnvDir = "ENVOY_AGENT_CLAIMS_DIR"

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
	switch dir := os.Getenv(EnvDir); {
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
	return "", fmt.Errorf("claims directory (set %s to another): %w", EnvDir, first)
}

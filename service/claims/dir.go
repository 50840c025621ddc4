//go:build linux

package claims

import (
	"fmt"
	"os"
	"path/filepath"
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

// unitStateDir is the units' StateDirectory=envoy-agent, the service's
// user's: outside the units, that user (whose home is /nonexistent) keeps
// its claims there too, beside those of its agents under the units.
const unitStateDir = "/var/lib/envoy-agent"

// claimsDirName is the claims folder's name in a folder of the user's.
const claimsDirName = "envoy-agent-claims"

// claimsDir is the directory of the claim files, made if missing (0700):
// the first of claimsDirs that only root and the agent's user can write in,
// replace or make first (hostfiles.CheckRunDir, and every folder above it).
// None is in the temporary folder, where any local user can make any name
// first. An error names each folder tried and why it was refused.
func claimsDir() (string, error) {
	dirs := claimsDirs(os.Getenv, os.Geteuid())
	var why []string
	for _, dir := range dirs {
		err := hostfiles.CheckNewRunDir(dir, true)
		if err == nil {
			err = os.MkdirAll(dir, 0o700)
		}
		if err == nil {
			err = hostfiles.CheckRunDir(dir)
		}
		if err == nil {
			return dir, nil
		}
		why = append(why, err.Error())
	}
	return "", &dirError{Tried: why}
}

// dirError is no folder for the claims: each one tried, refused.
type dirError struct {
	Tried []string
}

func (e *dirError) Error() string {
	return fmt.Sprintf("no folder for the claims of agents (set %s to a folder only root and uid %d can write): %s", EnvDir, os.Geteuid(), strings.Join(e.Tried, "; "))
}

// claimsDirs lists where the claims may be kept, in order:
//
//   - $ENVOY_AGENT_CLAIMS_DIR when set, alone;
//   - under the units, $STATE_DIRECTORY/claims (StateDirectory=envoy-agent:
//     /var/lib/envoy-agent, shared by envoy-agent.service and every
//     envoy-agent@ instance, owned by the service's user and never removed
//     when a unit stops, unlike a shared RuntimeDirectory=), alone;
//   - for root, /run/envoy-agent-claims;
//   - for another user, $XDG_RUNTIME_DIR/envoy-agent-claims when set, then
//     /var/lib/envoy-agent/claims (the service's user outside the units;
//     refused for any other user, whom that folder does not belong to), then
//     envoy-agent-claims in the user's cache folder ($XDG_CACHE_HOME or
//     ~/.cache; none for a home such as /nonexistent).
func claimsDirs(getenv func(string) string, euid int) []string {
	switch {
	case getenv(EnvDir) != "":
		return []string{getenv(EnvDir)}
	case getenv("STATE_DIRECTORY") != "":
		// systemd lists one path per StateDirectory=, colon-separated.
		first, _, _ := strings.Cut(getenv("STATE_DIRECTORY"), ":")
		return []string{filepath.Join(first, "claims")}
	case euid == 0:
		return []string{rootClaimsDir}
	}
	var dirs []string
	if xdg := getenv("XDG_RUNTIME_DIR"); filepath.IsAbs(xdg) {
		dirs = append(dirs, filepath.Join(xdg, claimsDirName))
	}
	dirs = append(dirs, filepath.Join(unitStateDir, "claims"))
	cache := getenv("XDG_CACHE_HOME")
	if !filepath.IsAbs(cache) {
		if home := getenv("HOME"); filepath.IsAbs(home) {
			cache = filepath.Join(home, ".cache")
		}
	}
	if filepath.IsAbs(cache) {
		dirs = append(dirs, filepath.Join(cache, claimsDirName))
	}
	return dirs
}

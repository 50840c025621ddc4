//go:build linux

// The reload guard's keys: agent.reload_guard, its URL and thresholds.

package config

import (
	"fmt"
	"net/url"

	"github.com/envoy-agent/envoy-agent/service/guard"
)

// Ratio is a share from 0 to 1 in a TOML file (0.1; 0 and 1 may be
// written as integers).
type Ratio float64

// UnmarshalTOML takes a number from 0 to 1.
func (r *Ratio) UnmarshalTOML(v any) error {
	var f float64
	switch n := v.(type) {
	case float64:
		f = n
	case int64:
		f = float64(n)
	default:
		return fmt.Errorf("wrong type: want a number from 0 to 1 such as 0.1, got %s", tomlType(v))
	}
	if !(f >= 0 && f <= 1) {
		return fmt.Errorf("%v is not a share: want a number from 0 to 1 such as 0.1", v)
	}
	*r = Ratio(f)
	return nil
}

// maxGuardMinRequests bounds agent.reload_guard_min_requests: more than any
// window sees, so that a larger number could only mean a mistake.
const maxGuardMinRequests = 1_000_000_000

// GuardThresholds are the guard's thresholds as the file sets them.
func (a AgentConfig) GuardThresholds() guard.Thresholds {
	return guard.Thresholds{ErrorRise: float64(a.ReloadGuardErrorRise), MinRequests: uint64(max(a.ReloadGuardMinRequests, 0)),
		HealthyShare: float64(a.ReloadGuardHealthyShare)}
}

// checkGuard adds a problem for each guard key out of its range, and warns
// of a URL with the guard off.
func (c *Config) checkGuard(ps *problems) {
	a := c.Agent
	if g := a.ReloadGuard.D(); g > 0 && g < guard.MinWindow {
		ps.add("agent.reload_guard", "%s is too short to judge anything: at least %s (a regression is %d reads a second apart), or \"0s\" to turn the guard off",
			g, guard.MinWindow, guard.FailuresInARow)
	}
	if a.ReloadGuardURL != "" {
		if why := guardURLProblem(a.ReloadGuardURL); why != "" {
			ps.add("agent.reload_guard_url", "%s", why)
		} else if a.ReloadGuard == 0 {
			c.warnf("%s: agent.reload_guard_url: has no effect while agent.reload_guard is \"0s\" (the guard is off)", c.File)
		}
	}
	if a.ReloadGuardErrorRise <= 0 {
		ps.add("agent.reload_guard_error_rise", "must be more than 0: a rise of 0 would roll back any reload after a single failure")
	}
	if a.ReloadGuardMinRequests < 1 || a.ReloadGuardMinRequests > maxGuardMinRequests {
		ps.add("agent.reload_guard_min_requests", "must be from 1 to %d, got %d", maxGuardMinRequests, a.ReloadGuardMinRequests)
	}
}

// guardURLProblem says what is wrong with agent.reload_guard_url, or "".
// It names no user or password: the URL is in the log and the status.
func guardURLProblem(raw string) string {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		// url.Parse's error repeats the URL, a password included.
		return "is not a URL: want one such as http://127.0.0.1:8080/healthz"
	case u.User != nil:
		return "must not hold a user or password: the URL is written to the log and the status"
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Sprintf("%q: want an http:// or https:// URL, such as http://127.0.0.1:8080/healthz", raw)
	case u.Host == "":
		return fmt.Sprintf("%q has no host", raw)
	}
	return ""
}

//go:build linux

package control

import (
	"context"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// unitQueryTimeout bounds the systemctl call of `envoy-agent status`.
const unitQueryTimeout = 2 * time.Second

// runSystemctl runs systemctl with args and returns its standard output; a
// variable for the test of the parsing.
var runSystemctl = func(ctx context.Context, args ...string) ([]byte, error) {
	return exec.CommandContext(ctx, "systemctl", args...).Output()
}

// unitRestarts asks systemd, as the operator who runs `envoy-agent status`,
// how often it has restarted unit (its NRestarts). It returns nil when it
// cannot say: no unit, no systemctl, no systemd, or an answer that is not a
// count, so that status degrades quietly outside systemd.
func unitRestarts(ctx context.Context, unit string) *int {
	if unit == "" || strings.HasPrefix(unit, "-") {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, unitQueryTimeout)
	defer cancel()
	out, err := runSystemctl(ctx, "show", "--property=NRestarts", "--value", "--", unit)
	if err != nil {
		return nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil || n < 0 {
		return nil
	}
	return &n
}

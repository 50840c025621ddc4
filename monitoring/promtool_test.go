package monitoring

import (
	"os/exec"
	"strings"
	"testing"
)

// promtool finds Debian's promtool (`make promtool` installs it); the tests
// that need it skip only when it cannot be had.
func promtool(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool is not installed (make promtool installs Debian's prometheus package)")
	}
	return path
}

func TestRulesCheck(t *testing.T) {
	out, err := exec.Command(promtool(t), "check", "rules", "envoy-agent.rules.yml").CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
	// promtool's lint also passes: no warnings in its output.
	if strings.Contains(strings.ToLower(string(out)), "warn") {
		t.Errorf("promtool check rules warns:\n%s", out)
	}
}

func TestRulesUnitTests(t *testing.T) {
	out, err := exec.Command(promtool(t), "test", "rules", "envoy-agent.rules.test.yml").CombinedOutput()
	if err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
}

// TestEveryAlertUnitTested: each alert in the rules has a unit test in which it
// fires (exp_alerts) and one in which it does not (no exp_alerts).
func TestEveryAlertUnitTested(t *testing.T) {
	rules := loadRules(t)
	tests := loadRuleTests(t)
	for _, alert := range rules.alerts() {
		fires, silent := false, false
		for _, tc := range tests.Tests {
			for _, at := range tc.AlertRuleTest {
				if at.Alertname != alert {
					continue
				}
				if len(at.ExpAlerts) > 0 {
					fires = true
				} else {
					silent = true
				}
			}
		}
		if !fires || !silent {
			t.Errorf("alert %s: unit test where it fires %v, where it stays silent %v; want both", alert, fires, silent)
		}
	}
}

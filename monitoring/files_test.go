package monitoring

import (
	"os"
	"regexp"
	"testing"

	"go.yaml.in/yaml/v3"
)

const (
	rulesFile     = "envoy-agent.rules.yml"
	ruleTestsFile = "envoy-agent.rules.test.yml"
	dashboardFile = "envoy-agent.dashboard.json"
)

type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Record string            `yaml:"record"`
			Alert  string            `yaml:"alert"`
			Expr   string            `yaml:"expr"`
			For    string            `yaml:"for"`
			Labels map[string]string `yaml:"labels"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

func (r ruleFile) alerts() []string {
	var out []string
	for _, g := range r.Groups {
		for _, rule := range g.Rules {
			if rule.Alert != "" {
				out = append(out, rule.Alert)
			}
		}
	}
	return out
}

func (r ruleFile) records() map[string]string {
	out := map[string]string{}
	for _, g := range r.Groups {
		for _, rule := range g.Rules {
			if rule.Record != "" {
				out[rule.Record] = rule.Expr
			}
		}
	}
	return out
}

type ruleTests struct {
	Tests []struct {
		AlertRuleTest []struct {
			Alertname string `yaml:"alertname"`
			ExpAlerts []any  `yaml:"exp_alerts"`
		} `yaml:"alert_rule_test"`
	} `yaml:"tests"`
}

func loadYAML(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func loadRules(t *testing.T) ruleFile {
	var r ruleFile
	loadYAML(t, rulesFile, &r)
	return r
}

func loadRuleTests(t *testing.T) ruleTests {
	var r ruleTests
	loadYAML(t, ruleTestsFile, &r)
	return r
}

// Prometheus' naming conventions: snake_case names; alerts in CamelCase with
// a severity; recording rules named level:metric:operations.
var (
	alertNameRE  = regexp.MustCompile(`^(EnvoyAgent|Envoy)[A-Z][A-Za-z0-9]+$`)
	recordNameRE = regexp.MustCompile(`^[a-z_]+:[a-z0-9_]+:[a-z0-9_]+$`)
)

func TestRuleNames(t *testing.T) {
	for _, g := range loadRules(t).Groups {
		for _, rule := range g.Rules {
			switch {
			case rule.Alert != "":
				if !alertNameRE.MatchString(rule.Alert) {
					t.Errorf("alert %q is not CamelCase with an Envoy prefix", rule.Alert)
				}
				if s := rule.Labels["severity"]; s != "critical" && s != "warning" {
					t.Errorf("alert %s: severity %q, want critical or warning", rule.Alert, s)
				}
			case !recordNameRE.MatchString(rule.Record):
				t.Errorf("recording rule %q is not level:metric:operations", rule.Record)
			}
		}
	}
}

package monitoring

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

type dashboard struct {
	Panels []struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

func dashboardExprs(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	var out []string
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			out = append(out, tg.Expr)
		}
	}
	return out
}

// dashboardMetrics is every metric name the dashboard's expressions query.
func dashboardMetrics(t *testing.T) []string {
	var names []string
	for _, e := range dashboardExprs(t) {
		names = append(names, exprMetrics(e)...)
	}
	slices.Sort(names)
	return slices.Compact(names)
}

var (
	promStringRE   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	promMatchersRE = regexp.MustCompile(`\{[^}]*\}`)
	promRangeRE    = regexp.MustCompile(`\[[^\]]*\]`)
	promGroupingRE = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promVarRE      = regexp.MustCompile(`\$\{?\w+\}?`)
	promNumberRE   = regexp.MustCompile(`\b[0-9][0-9.]*[a-z]*\b`) // numbers and durations (5m)
	promIdentRE    = regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*(\s*\()?`)
	promKeywords   = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true, "inf": true, "nan": true}
)

// exprMetrics is the metric names in a PromQL expression: its identifiers
// once strings, label matchers, ranges, grouping clauses, Grafana
// variables and numbers are removed, less functions (an identifier before "(") and
// keywords.
func exprMetrics(expr string) []string {
	s := promStringRE.ReplaceAllString(expr, " ")
	s = promMatchersRE.ReplaceAllString(s, " ")
	s = promRangeRE.ReplaceAllString(s, " ")
	s = promGroupingRE.ReplaceAllString(s, " ")
	s = promVarRE.ReplaceAllString(s, " ")
	s = promNumberRE.ReplaceAllString(s, " ")
	var out []string
	for _, m := range promIdentRE.FindAllString(s, -1) {
		if strings.HasSuffix(m, "(") || promKeywords[strings.ToLower(m)] {
			continue
		}
		out = append(out, m)
	}
	return out
}

// scrapedNames is the metric names in a Prometheus text exposition.
func scrapedNames(body string) map[string]bool {
	names := map[string]bool{}
	for line := range strings.Lines(body) {
		if line == "" || line[0] == '#' {
			continue
		}
		if i := strings.IndexAny(line, "{ "); i > 0 {
			names[line[:i]] = true
		}
	}
	return names
}

func TestExprMetrics(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want []string
	}{
		{`envoy_agent_envoy_live{job="$job", instance=~"$instance"}`, []string{"envoy_agent_envoy_live"}},
		{`sum by (path, outcome) (increase(envoy_agent_reloads_total{job="x"}[$__rate_interval]))`, []string{"envoy_agent_reloads_total"}},
		{`histogram_quantile(0.99, sum by (le) (rate(a_bucket[5m])))`, []string{"a_bucket"}},
		{`(a - time()) / 86400 or on (job) b offset 5m unless c{x="and or"} > bool 1`, []string{"a", "b", "c"}},
		{`x:y:z{job="j"}`, []string{"x:y:z"}},
	} {
		if got := exprMetrics(tc.expr); !slices.Equal(got, tc.want) {
			t.Errorf("exprMetrics(%q) = %v, want %v", tc.expr, got, tc.want)
		}
	}
}

// TestDashboardRecordingRules: every recording rule the dashboard queries is
// defined in the shipped rules, and every agent metric it queries is one
// service/metrics.go declares.
func TestDashboardRecordingRules(t *testing.T) {
	records := loadRules(t).records()
	src, err := os.ReadFile("../service/metrics.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range dashboardMetrics(t) {
		switch {
		case strings.Contains(name, ":"):
			if records[name] == "" {
				t.Errorf("dashboard queries %s, which no recording rule defines", name)
			}
		case strings.HasPrefix(name, "envoy_agent_"):
			if !strings.Contains(string(src), `"`+name) && !strings.Contains(string(src), "`"+name) {
				t.Errorf("dashboard queries %s, which service/metrics.go does not declare", name)
			}
		}
	}
}

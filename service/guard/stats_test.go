package guard

import (
	"maps"
	"net/url"
	"regexp"
	"strings"
	"testing"
)

func TestParseStats(t *testing.T) {
	got, err := ParseStats([]byte("cluster.web.upstream_rq_5xx: 3\nhttp.ingress.downstream_rq_completed: 120\n\ncluster.web.version_text: \"7\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]uint64{"cluster.web.upstream_rq_5xx": 3, "http.ingress.downstream_rq_completed": 120}
	if !maps.Equal(got, want) {
		t.Errorf("ParseStats = %v, want %v", got, want)
	}
	if _, err := ParseStats([]byte("no colon here\n")); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("a line without \"name: value\": %v, want an error naming line 1", err)
	}
}

// TestStatsFilter: the filter sent to Envoy takes every statistic the
// History reads and leaves the others out.
func TestStatsFilter(t *testing.T) {
	q, err := url.ParseQuery(strings.TrimPrefix(StatsPath, "/stats?"))
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(q.Get("filter"))
	for _, name := range []string{
		"http.ingress.downstream_rq_5xx", "http.ingress.downstream_rq_completed",
		"cluster.a.b.upstream_rq_5xx", "cluster.web.upstream_rq_completed", "cluster.web.upstream_rq_timeout",
		"cluster.web.upstream_rq_per_try_timeout", "cluster.web.upstream_cx_total", "cluster.web.upstream_cx_connect_fail",
		"cluster.web.upstream_cx_connect_timeout", "cluster.web.membership_healthy", "cluster.web.membership_total",
		"listener.127.0.0.1_10000.downstream_cx_total", "listener.127.0.0.1_10000.no_filter_chain_match",
		"listener.127.0.0.1_10000.downstream_cx_overflow", "listener.127.0.0.1_10000.downstream_global_cx_overflow",
	} {
		if !re.MatchString(name) {
			t.Errorf("the filter leaves out %s", name)
		}
	}
	for _, name := range []string{"http.ingress.downstream_rq_2xx", "cluster.web.upstream_rq_200", "server.live",
		"listener.127.0.0.1_10000.downstream_cx_active", "listener_manager.total_listeners_active"} {
		if re.MatchString(name) {
			t.Errorf("the filter takes %s", name)
		}
	}
}

func TestListenerStatKey(t *testing.T) {
	for addr, want := range map[string]string{"127.0.0.1:10000": "127.0.0.1_10000", "[::1]:80": "[__1]_80", "0.0.0.0:443": "0.0.0.0_443"} {
		if got := listenerStatKey(addr); got != want {
			t.Errorf("listenerStatKey(%q) = %q, want %q", addr, got, want)
		}
	}
}

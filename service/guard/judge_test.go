package guard

import (
	"strings"
	"testing"
	"time"
)

func TestJudge(t *testing.T) {
	th := DefaultThresholds()
	web := func(bad, of uint64) map[string]Cluster {
		return map[string]Cluster{"web": {Answers: Share{bad, of}, Healthy: 2, Hosts: 2}}
	}
	listening := func(conns uint64, on bool) map[string]Listener {
		return map[string]Listener{"127.0.0.1_80": {Address: "127.0.0.1:80", Listening: on, Refused: Share{0, conns}}}
	}
	for _, tc := range []struct {
		name          string
		before, after Figures
		want          []Signal
		subject       string // of the first finding
	}{
		{name: "no change",
			before: Figures{Downstream: Share{10, 1000}, Clusters: web(10, 1000)},
			after:  Figures{Downstream: Share{1, 100}, Clusters: web(1, 100)}},
		{name: "every answer 5xx",
			before: Figures{Downstream: Share{10, 1000}, Clusters: web(10, 1000)},
			after:  Figures{Downstream: Share{100, 100}, Clusters: web(100, 100)},
			want:   []Signal{Downstream5xx, Upstream5xx}, subject: ""},
		{name: "too few requests after",
			before: Figures{Downstream: Share{0, 1000}},
			after:  Figures{Downstream: Share{49, 49}}},
		{name: "rise under the threshold",
			before: Figures{Downstream: Share{200, 1000}},
			after:  Figures{Downstream: Share{29, 100}}},
		{name: "rise at the threshold",
			before: Figures{Downstream: Share{200, 1000}},
			after:  Figures{Downstream: Share{30, 100}},
			want:   []Signal{Downstream5xx}},
		{name: "too few before to compare: taken as 0",
			before: Figures{Downstream: Share{20, 20}},
			after:  Figures{Downstream: Share{10, 100}},
			want:   []Signal{Downstream5xx}},
		{name: "a new cluster failing its connections",
			after: Figures{Clusters: map[string]Cluster{"dead": {Answers: Share{60, 60}, Connects: Share{60, 60}}}},
			want:  []Signal{Upstream5xx, ConnectFailures}, subject: "dead"},
		{name: "timeouts",
			before: Figures{Clusters: map[string]Cluster{"slow": {Timeouts: Share{0, 500}}}},
			after:  Figures{Clusters: map[string]Cluster{"slow": {Timeouts: Share{80, 100}}}},
			want:   []Signal{Timeouts}, subject: "slow"},
		{name: "every healthy host lost",
			before: Figures{Clusters: map[string]Cluster{"web": {Healthy: 1, Hosts: 1}}},
			after:  Figures{Clusters: map[string]Cluster{"web": {Healthy: 0, Hosts: 1}}},
			want:   []Signal{HealthyHosts}, subject: "web"},
		{name: "half the healthy hosts kept",
			before: Figures{Clusters: map[string]Cluster{"web": {Healthy: 2, Hosts: 2}}},
			after:  Figures{Clusters: map[string]Cluster{"web": {Healthy: 1, Hosts: 2}}}},
		{name: "a cluster with no healthy host before",
			before: Figures{Clusters: map[string]Cluster{"web": {Healthy: 0, Hosts: 2}}},
			after:  Figures{Clusters: map[string]Cluster{"web": {Healthy: 0, Hosts: 2}}}},
		{name: "a cluster removed",
			before: Figures{Clusters: map[string]Cluster{"old": {Healthy: 2, Hosts: 2}}},
			after:  Figures{Clusters: map[string]Cluster{}}},
		{name: "a busy listener gone",
			before: Figures{Listeners: listening(500, true)},
			after:  Figures{Listeners: listening(0, false)},
			want:   []Signal{ListenerGone}, subject: "127.0.0.1:80"},
		{name: "a quiet listener gone",
			before: Figures{Listeners: listening(10, true)},
			after:  Figures{Listeners: listening(0, false)}},
		{name: "a listener whose stat_prefix hides its address",
			before: Figures{Listeners: map[string]Listener{"edge": {Address: "edge", Refused: Share{0, 500}}}},
			after:  Figures{Listeners: map[string]Listener{}}},
		{name: "a listener closing what it accepts",
			before: Figures{Listeners: listening(500, true)},
			after:  Figures{Listeners: map[string]Listener{"127.0.0.1_80": {Address: "127.0.0.1:80", Listening: true, Refused: Share{90, 100}}}},
			want:   []Signal{ListenerRefused}, subject: "127.0.0.1:80"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Judge(th, tc.before, tc.after)
			var signals []Signal
			for _, f := range got {
				signals = append(signals, f.Signal)
			}
			if len(signals) != len(tc.want) {
				t.Fatalf("Judge = %v, want %v", got, tc.want)
			}
			for i := range signals {
				if signals[i] != tc.want[i] {
					t.Fatalf("Judge = %v, want %v", got, tc.want)
				}
			}
			if len(got) > 0 && got[0].Subject != tc.subject {
				t.Errorf("first finding's subject %q, want %q", got[0].Subject, tc.subject)
			}
		})
	}
}

func TestFindingText(t *testing.T) {
	th := DefaultThresholds()
	got := Judge(th, Figures{Span: 5 * time.Minute, Clusters: map[string]Cluster{"dead": {Answers: Share{4, 1000}}}},
		Figures{Clusters: map[string]Cluster{"dead": {Answers: Share{212, 212}}}})
	if len(got) != 1 {
		t.Fatalf("Judge = %v", got)
	}
	want := "cluster dead: 5xx answers: 0.4% of 1000 requests before the reload, 100% of 212 requests after"
	if got[0].String() != want {
		t.Errorf("finding %q, want %q", got[0], want)
	}
	few := Judge(th, Figures{}, Figures{Downstream: Share{60, 60}})
	if len(few) != 1 || !strings.Contains(few[0].Before, "too few to compare") {
		t.Errorf("with no baseline: %v, want the before figures to say too few to compare", few)
	}
}

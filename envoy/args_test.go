//go:build linux

package envoy

import (
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
)

func TestArgs(t *testing.T) {
	base := ProxyConfig{ConfigPath: "/etc/envoy/envoy.yaml", BaseID: 7}
	tests := []struct {
		name   string
		cfg    func(c *ProxyConfig)
		epoch  int
		want   []string // must appear, in this order, as adjacent pairs or flags
		absent []string
	}{
		{name: "defaults", cfg: func(c *ProxyConfig) {},
			want: []string{"-c /etc/envoy/envoy.yaml", "--drain-time-s 45", "--drain-strategy immediate",
				"--local-address-ip-version v4", "--file-flush-interval-msec 1000", "--base-id 7", "--restart-epoch 0",
				"--parent-shutdown-time-s 60", "--socket-path /run/x/hot-restart", "--socket-mode 600"},
			absent: []string{"--concurrency", "--log-format", "-l", "--component-log-level", "--disable-hot-restart"}},
		{name: "drain and parent shutdown, fractions round up", cfg: func(c *ProxyConfig) {
			c.DrainDuration = durationpb.New(2500 * time.Millisecond)
			c.ParentShutdownDuration = durationpb.New(90 * time.Second)
		}, want: []string{"--drain-time-s 3", "--parent-shutdown-time-s 90"}},
		{name: "epoch", cfg: func(c *ProxyConfig) {}, epoch: 3, want: []string{"--restart-epoch 3"}},
		{name: "ipv6 only when every node ip is v6", cfg: func(c *ProxyConfig) { c.NodeIPs = []string{"fd00::1", "::1"} },
			want: []string{"--local-address-ip-version v6"}},
		{name: "mixed node ips stay v4", cfg: func(c *ProxyConfig) { c.NodeIPs = []string{"fd00::1", "10.0.0.1"} },
			want: []string{"--local-address-ip-version v4"}},
		{name: "log level", cfg: func(c *ProxyConfig) { c.LogLevel = "debug" }, want: []string{"-l debug"}},
		{name: "component log level", cfg: func(c *ProxyConfig) { c.ComponentLogLevel = "upstream:debug,connection:trace" },
			want: []string{"--component-log-level upstream:debug,connection:trace"}},
		{name: "istio-style levels win over component_log_level", cfg: func(c *ProxyConfig) {
			c.LogLevel = "warning,http:trace"
			c.ComponentLogLevel = "upstream:debug"
		}, want: []string{"-l warning", "--component-log-level http:trace"}},
		{name: "json logs", cfg: func(c *ProxyConfig) { c.LogAsJSON = true }, want: []string{"--log-format " + jsonLogFormat}},
		{name: "concurrency", cfg: func(c *ProxyConfig) { c.Concurrency = 2 }, want: []string{"--concurrency 2"}},
		{name: "hot restart off", cfg: func(c *ProxyConfig) { c.DisableHotRestart = true },
			want: []string{"--disable-hot-restart"}, absent: []string{"--base-id", "--restart-epoch", "--parent-shutdown-time-s", "--socket-path", "--socket-mode"}},
		{name: "extra args last", cfg: func(c *ProxyConfig) { c.ExtraArgs = []string{"--service-cluster", "edge"}; c.Concurrency = 1 },
			want: []string{"--concurrency 1", "--service-cluster edge"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := base
			tt.cfg(&c)
			args := c.args(tt.epoch, "/run/x/admin", "/run/x/hot-restart")
			joined := strings.Join(args, " ")
			pos := -1
			for _, w := range tt.want {
				i := strings.Index(joined, w)
				if i < 0 {
					t.Fatalf("args %q lack %q", joined, w)
				}
				if i < pos {
					t.Errorf("%q is out of order in %q", w, joined)
				}
				pos = i
			}
			for _, a := range tt.absent {
				if slices.Contains(args, a) {
					t.Errorf("args %q have %q", joined, a)
				}
			}
			if !strings.Contains(joined, "--admin-address-path /run/x/admin") {
				t.Errorf("args %q lack --admin-address-path", joined)
			}
			if len(c.ExtraArgs) > 0 && !slices.Equal(args[len(args)-len(c.ExtraArgs):], c.ExtraArgs) {
				t.Errorf("extra args are not last: %q", joined)
			}
		})
	}
}

// An epoch run from resource files reads them as strictly as a static
// bootstrap, unless the operator's extra_args chose either way.
func TestStrictResources(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-c", "b.yaml"}, "-c b.yaml --reject-unknown-dynamic-fields"},
		{[]string{"-c", "b.yaml", "--ignore-unknown-dynamic-fields"}, "-c b.yaml --ignore-unknown-dynamic-fields"},
		{[]string{"-c", "b.yaml", "--reject-unknown-dynamic-fields"}, "-c b.yaml --reject-unknown-dynamic-fields"},
	} {
		if got := strings.Join(strictResources(tc.args), " "); got != tc.want {
			t.Errorf("strictResources(%q) = %q, want %q", tc.args, got, tc.want)
		}
	}
}

// Istio's fields that have no effect here (the package doc, Istio
// compatibility) change neither Envoy's command line nor what a reload
// compares: OutlierLogPath feeds a bootstrap Istio generates, TestOnly and
// AgentIsRoot its own process handling.
func TestIstioFieldsWithoutEffect(t *testing.T) {
	base := ProxyConfig{ConfigPath: "/etc/envoy/envoy.yaml", BaseID: 7, LogLevel: "info"}
	for _, tc := range []struct {
		name string
		set  func(c *ProxyConfig)
	}{
		{"OutlierLogPath", func(c *ProxyConfig) { c.OutlierLogPath = "/var/log/envoy/outlier.log" }},
		{"TestOnly", func(c *ProxyConfig) { c.TestOnly = true }},
		{"AgentIsRoot", func(c *ProxyConfig) { c.AgentIsRoot = true }},
	} {
		c := base
		tc.set(&c)
		if got, want := strings.Join(c.args(1, "/run/x/a", "/run/x/hot-restart"), " "), strings.Join(base.args(1, "/run/x/a", "/run/x/hot-restart"), " "); got != want {
			t.Errorf("%s changes Envoy's command line:\n%s\nwant\n%s", tc.name, got, want)
		}
		if !SameCommandLine(base, c) {
			t.Errorf("%s makes a reload see another command line", tc.name)
		}
	}
}

//go:build linux

package httpserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
)

// fakeAdmin answers GET /stats/prometheus with body and status, or fails with err.
type fakeAdmin struct {
	status int
	body   string
	err    error
	paths  chan string
}

func (a *fakeAdmin) Get(_ context.Context, path string) (*http.Response, error) {
	if a.paths != nil {
		a.paths <- path
	}
	if a.err != nil {
		return nil, a.err
	}
	return &http.Response{StatusCode: a.status, Body: io.NopCloser(strings.NewReader(a.body))}, nil
}

func quietLogger() *logrus.Logger {
	l := logrus.New()
	l.SetOutput(io.Discard)
	return l
}

// TestMetricsHandler: a scrape is Envoy's /stats/prometheus followed by the
// agent's own metrics, in the Prometheus text format; when Envoy's admin
// fails or answers other than 200, the agent's own still come; only GET
// and HEAD are served.
func TestMetricsHandler(t *testing.T) {
	agent := func(w io.Writer) { fmt.Fprintln(w, "envoy_agent_envoy_live 1") }
	tests := []struct {
		name   string
		method string
		admin  *fakeAdmin
		code   int
		body   string
	}{
		{"envoy's then the agent's", "GET", &fakeAdmin{status: 200, body: "envoy_up 1\n"}, 200, "envoy_up 1\nenvoy_agent_envoy_live 1\n"},
		{"admin down: the agent's only", "GET", &fakeAdmin{err: errors.New("refused")}, 200, "envoy_agent_envoy_live 1\n"},
		{"admin 503: the agent's only", "GET", &fakeAdmin{status: 503, body: "envoy_up 1\n"}, 200, "envoy_agent_envoy_live 1\n"},
		{"HEAD", "HEAD", &fakeAdmin{status: 200, body: "envoy_up 1\n"}, 200, ""},
		{"POST refused", "POST", &fakeAdmin{status: 200}, 405, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.admin.paths = make(chan string, 1)
			h := (&Metrics{Log: quietLogger(), Admin: tt.admin, Agent: agent}).Handler()
			req := httptest.NewRequest(tt.method, "/metrics", nil)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tt.code {
				t.Fatalf("%s = %d, want %d (%s)", tt.method, rec.Code, tt.code, rec.Body)
			}
			if tt.code != 200 {
				if allow := rec.Header().Get("Allow"); allow != "GET, HEAD" {
					t.Fatalf("Allow = %q, want %q", allow, "GET, HEAD")
				}
				return
			}
			if ct := rec.Header().Get("Content-Type"); ct != "text/plain; version=0.0.4; charset=utf-8" {
				t.Fatalf("Content-Type = %q", ct)
			}
			if tt.method == "GET" && rec.Body.String() != tt.body {
				t.Fatalf("body = %q, want %q", rec.Body, tt.body)
			}
			if p := <-tt.admin.paths; p != "/stats/prometheus" {
				t.Fatalf("asked Envoy's admin for %s, want /stats/prometheus", p)
			}
		})
	}
}

// TestEnvoyStatsBudget: a scrape waits for Envoy for four fifths of what
// Prometheus says its scrape may take, never more than metricsScrapeTimeout.
func TestEnvoyStatsBudget(t *testing.T) {
	for _, tc := range []struct {
		header string
		want   time.Duration
	}{
		{"", metricsScrapeTimeout},
		{"5", 4 * time.Second},
		{"60", metricsScrapeTimeout},
		{"0", metricsScrapeTimeout},
		{"-1", metricsScrapeTimeout},
		{"NaN", metricsScrapeTimeout},
		{"+Inf", metricsScrapeTimeout},
		{"soon", metricsScrapeTimeout},
	} {
		h := http.Header{}
		if tc.header != "" {
			h.Set("X-Prometheus-Scrape-Timeout-Seconds", tc.header)
		}
		if got := envoyStatsBudget(h); got != tc.want {
			t.Errorf("envoyStatsBudget(%q) = %s, want %s", tc.header, got, tc.want)
		}
	}
}

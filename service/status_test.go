package service

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestStatusServer(t *testing.T) {
	tests := []struct {
		name, method, path, peer string
		ready                    bool
		code                     int
		quits, drains            int // what this one request must have called
	}{
		{"ready while live", "GET", "/healthz/ready", "127.0.0.1:5000", true, 200, 0, 0},
		{"not ready while draining", "GET", "/healthz/ready", "127.0.0.1:5000", false, 503, 0, 0},
		{"ready over ipv6 loopback", "GET", "/healthz/ready", "[::1]:5000", true, 200, 0, 0},
		{"remote peer forbidden", "GET", "/healthz/ready", "10.1.2.3:5000", true, 403, 0, 0},
		{"quit needs POST", "GET", "/quitquitquit", "127.0.0.1:5000", true, 405, 0, 0},
		{"drain needs POST", "PUT", "/drain", "127.0.0.1:5000", true, 405, 0, 0},
		{"remote quit forbidden", "POST", "/quitquitquit", "192.168.1.9:5000", true, 403, 0, 0},
		{"remote drain forbidden", "POST", "/drain", "[2001:db8::1]:5000", true, 403, 0, 0},
		{"quit", "POST", "/quitquitquit", "127.0.0.1:5000", true, 200, 1, 0},
		{"drain", "POST", "/drain", "127.0.0.1:5000", true, 200, 0, 1},
		{"unknown path", "GET", "/nope", "127.0.0.1:5000", true, 404, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// A server of its own: each case runs alone too (-run 'TestStatusServer/^drain$').
			var quits, drains int
			s := &statusServer{
				log: testLogger(),
				ready: func(context.Context) (bool, string) {
					return tt.ready, map[bool]string{true: "LIVE", false: "draining"}[tt.ready]
				},
				quit:  func() { quits++ },
				drain: func() { drains++ },
			}
			req := httptest.NewRequest(tt.method, tt.path, nil)
			req.RemoteAddr = tt.peer
			rec := httptest.NewRecorder()
			s.handler().ServeHTTP(rec, req)
			if rec.Code != tt.code {
				t.Fatalf("%s %s from %s = %d, want %d (%s)", tt.method, tt.path, tt.peer, rec.Code, tt.code, rec.Body)
			}
			if rec.Code == http.StatusMethodNotAllowed && rec.Header().Get("Allow") != "POST" {
				t.Errorf("405 without Allow: POST")
			}
			if quits != tt.quits || drains != tt.drains {
				t.Fatalf("quits %d drains %d, want %d %d", quits, drains, tt.quits, tt.drains)
			}
		})
	}
}

package xds

import (
	"context"
	"errors"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/envoy-agent/envoy-agent/internal/envoykit"
)

// fakeEnvoy is an ADS client driven step by step: the fast tier's
// stand-in for the SotW exchanges a real Envoy has (TestScale and the
// others run the real one).
type fakeEnvoy struct {
	t      *testing.T
	stream discovery.AggregatedDiscoveryService_StreamAggregatedResourcesClient
}

func dialFake(t *testing.T, s *Server, epoch string) *fakeEnvoy {
	conn, err := grpc.NewClient("unix://"+s.Path(), grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithAuthority(epoch))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	st, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return &fakeEnvoy{t: t, stream: st}
}

func (f *fakeEnvoy) send(names []string, version, nonce string, nack string) {
	req := &discovery.DiscoveryRequest{TypeUrl: string(RouteType), ResourceNames: names, VersionInfo: version, ResponseNonce: nonce}
	if nack != "" {
		req.ErrorDetail = &rpcstatus.Status{Code: 3, Message: nack}
	}
	if err := f.stream.Send(req); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fakeEnvoy) recv() *discovery.DiscoveryResponse {
	r, err := f.stream.Recv()
	if err != nil {
		f.t.Fatal(err)
	}
	return r
}

func TestStreamStateOfTheWorld(t *testing.T) {
	s := listen(t, testLog{t})
	a, b := route(t, routeYAML(1, "a")), route(t, routeYAML(2, "b"))
	if err := s.Set("e0", RouteType, []Resource{a, b}); err != nil {
		t.Fatal(err)
	}
	f := dialFake(t, s, "e0")
	f.send([]string{"r1", "r2"}, "", "", "")
	r := f.recv()
	if len(r.Resources) != 2 || r.VersionInfo == "" {
		t.Fatalf("first response: %d resources, version %q", len(r.Resources), r.VersionInfo)
	}
	f.send([]string{"r1", "r2"}, r.VersionInfo, r.Nonce, "")

	// r2 leaves the set while still subscribed: nothing changes for Envoy
	// (a response without it would tell Envoy it was removed).
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := s.Update(ctx, "e0", RouteType, nil, []string{"r2"})
	if err != nil || out.Version != r.VersionInfo {
		t.Fatalf("removing a subscribed name: %+v %v", out, err)
	}
	// Envoy drops r2: it is sent r1 alone.
	f.send([]string{"r1"}, r.VersionInfo, r.Nonce, "")
	r2 := f.recv()
	if len(r2.Resources) != 1 || r2.VersionInfo == r.VersionInfo {
		t.Fatalf("after the unsubscription: %d resources, version %q", len(r2.Resources), r2.VersionInfo)
	}
	f.send([]string{"r1"}, r2.VersionInfo, r2.Nonce, "")
	// Envoy asks for r2 again, which the set no longer has: it is unknown.
	f.send([]string{"r1", "r2"}, r2.VersionInfo, r2.Nonce, "")
	if !envoykit.Eventually(5*time.Second, func() bool {
		ts := s.Status()["e0"].Streams
		return len(ts) == 1 && len(ts[0].Types[RouteType].Unknown) == 1
	}) {
		t.Fatalf("status: %+v", s.Status())
	}
	// It comes back: both are sent, and the update waits for the ACK.
	done := make(chan error, 1)
	go func() { _, err := s.Update(ctx, "e0", RouteType, []Resource{b}, nil); done <- err }()
	r3 := f.recv()
	if len(r3.Resources) != 2 {
		t.Fatalf("after r2 came back: %d resources", len(r3.Resources))
	}
	select {
	case err := <-done:
		t.Fatalf("Update returned before the ACK: %v", err)
	default:
	}
	f.send([]string{"r1", "r2"}, r3.VersionInfo, r3.Nonce, "")
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// A NACK carries Envoy's reason to Update, and nothing is sent again
	// until the set changes.
	go func() {
		_, err := s.Update(ctx, "e0", RouteType, []Resource{route(t, routeYAML(1, "a2"))}, nil)
		done <- err
	}()
	r4 := f.recv()
	f.send([]string{"r1", "r2"}, r3.VersionInfo, r4.Nonce, "bad route")
	var rej *RejectedError
	if err := <-done; !errors.As(err, &rej) || rej.Detail != "bad route" {
		t.Fatalf("NACK: %v", err)
	}
	if ts := s.Status()["e0"].Streams[0].Types[RouteType]; ts.Acked != r3.VersionInfo || ts.Rejected != "bad route" {
		t.Fatalf("status after the NACK: %+v", ts)
	}
}

// TestStreamNeedsAnEpoch: a stream whose :authority names no epoch is
// refused.
func TestStreamNeedsAnEpoch(t *testing.T) {
	s := listen(t, testLog{t})
	f := dialFake(t, s, "epoch:1")
	_ = f.stream.Send(&discovery.DiscoveryRequest{TypeUrl: string(RouteType), ResourceNames: []string{"r1"}}) // the server may have ended the stream already
	if _, err := f.stream.Recv(); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a stream with a bad :authority: %v", err)
	}
}

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
	if !envoykit.Eventually(5*time.Second, func() bool {
		ts := s.Status()["e0"].Streams
		return len(ts) == 1 && ts[0].Types[RouteType].Acked == r.VersionInfo
	}) {
		t.Fatalf("the ACK: %+v", s.Status())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	// r2 leaves the set while still subscribed: nothing is sent (Envoy
	// keeps it), and there is nothing to wait for.
	if out, err := s.Update(ctx, "e0", RouteType, nil, []string{"r2"}); err != nil || out.Version != r.VersionInfo {
		t.Fatalf("removing a subscribed name: %+v %v", out, err)
	}
	// Envoy drops r2, then asks for it again: it is unknown now.
	f.send([]string{"r1"}, r.VersionInfo, r.Nonce, "")
	f.send([]string{"r1", "r2"}, r.VersionInfo, r.Nonce, "")
	if !envoykit.Eventually(5*time.Second, func() bool {
		ts := s.Status()["e0"].Streams
		return len(ts) == 1 && ts[0].Types[RouteType].Requests == 4 && len(ts[0].Types[RouteType].Unknown) == 1
	}) {
		t.Fatalf("status: %+v", s.Status())
	}
	// It comes back: only it is sent, and the update waits for the ACK.
	done := make(chan error, 1)
	go func() { _, err := s.Update(ctx, "e0", RouteType, []Resource{b}, nil); done <- err }()
	r2 := f.recv()
	if len(r2.Resources) != 1 || r2.VersionInfo != r.VersionInfo {
		t.Fatalf("after r2 came back: %d resources, version %q (Envoy then holds what it held first: %q)", len(r2.Resources), r2.VersionInfo, r.VersionInfo)
	}
	select {
	case err := <-done:
		t.Fatalf("Update returned before the ACK: %v", err)
	default:
	}
	f.send([]string{"r1", "r2"}, r2.VersionInfo, r2.Nonce, "")
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// A NACK carries Envoy's reason to Update; the refused resource is not
	// sent again until it changes.
	bad := route(t, routeYAML(1, "a2"))
	go func() { _, err := s.Update(ctx, "e0", RouteType, []Resource{bad}, nil); done <- err }()
	r3 := f.recv()
	if len(r3.Resources) != 1 {
		t.Fatalf("the change of r1: %d resources", len(r3.Resources))
	}
	f.send([]string{"r1", "r2"}, r2.VersionInfo, r3.Nonce, "bad route")
	var rej *RejectedError
	if err := <-done; !errors.As(err, &rej) || rej.Detail != "bad route" {
		t.Fatalf("NACK: %v", err)
	}
	if ts := s.Status()["e0"].Streams[0].Types[RouteType]; ts.Acked != r2.VersionInfo || ts.Rejected != "bad route" {
		t.Fatalf("status after the NACK: %+v", ts)
	}
	if _, err := s.Update(ctx, "e0", RouteType, []Resource{bad}, nil); !errors.As(err, &rej) {
		t.Fatalf("the same refused resource again: %v", err)
	}
	go func() {
		_, err := s.Update(ctx, "e0", RouteType, []Resource{route(t, routeYAML(1, "a3"))}, nil)
		done <- err
	}()
	r4 := f.recv()
	f.send([]string{"r1", "r2"}, r4.VersionInfo, r4.Nonce, "")
	if err := <-done; err != nil || len(r4.Resources) != 1 {
		t.Fatalf("a fixed r1: %d resources, %v", len(r4.Resources), err)
	}
	if ts := s.Status()["e0"].Streams[0].Types[RouteType]; ts.Acked != r4.VersionInfo || ts.Rejected != "" {
		t.Fatalf("status after the fix: %+v", ts)
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

// sendSecrets asks for the secrets names, acknowledging version and nonce
// (or rejecting them with nack).
func (f *fakeEnvoy) sendSecrets(names []string, version, nonce, nack string) {
	req := &discovery.DiscoveryRequest{TypeUrl: string(SecretType), ResourceNames: names, VersionInfo: version, ResponseNonce: nonce}
	if nack != "" {
		req.ErrorDetail = &rpcstatus.Status{Code: 3, Message: nack}
	}
	if err := f.stream.Send(req); err != nil {
		f.t.Fatal(err)
	}
}

// The secrets UpdateSecret serves are every epoch's: an epoch whose set
// was never given them, or that starts after them, is served them (a
// renewal between an epoch's copy and its start is not lost); a renewal
// waits for the Envoys that ask for it; Status says what each Envoy holds,
// has pending or rejected.
func TestSharedSecrets(t *testing.T) {
	s := listen(t, testLog{t})
	secret := func(v string) Resource {
		r, err := ConvertYAML(SecretType, []byte(`{name: s, generic_secret: {secret: {inline_string: "`+v+`"}}}`))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	ctx := withTimeout(t, 10*time.Second)
	if out, err := s.UpdateSecret(ctx, secret("v1")); err != nil || len(out) != 0 {
		t.Fatalf("UpdateSecret with no epoch: %v %v", out, err)
	}
	if err := s.Set("e1", RouteType, nil); err != nil {
		t.Fatal(err)
	}
	f := dialFake(t, s, "e1")
	f.sendSecrets([]string{"s"}, "", "", "")
	r := f.recv()
	if len(r.Resources) != 1 {
		t.Fatalf("first response: %d secrets, want the one served to every epoch", len(r.Resources))
	}
	if ts := s.Status()["e1"].Streams[0].Types[SecretType]; len(ts.Pending) != 1 || len(ts.Unknown) != 0 {
		t.Fatalf("before the ACK: %+v; want s pending", ts)
	}
	f.sendSecrets([]string{"s"}, r.VersionInfo, r.Nonce, "")
	done := make(chan error, 1)
	go func() { _, err := s.UpdateSecret(ctx, secret("v2")); done <- err }()
	r = f.recv() // the renewal
	f.sendSecrets([]string{"s"}, r.VersionInfo, r.Nonce, "")
	if err := <-done; err != nil {
		t.Fatalf("the renewal: %v", err)
	}
	if ts := s.Status()["e1"].Streams[0].Types[SecretType]; len(ts.Pending)+len(ts.Unknown)+len(ts.RejectedNames) != 0 || ts.Acked != r.VersionInfo {
		t.Fatalf("after the ACK: %+v", ts)
	}
	// A renewal Envoy rejects: UpdateSecret says so with its reason, and
	// Status names the secret.
	go func() { _, err := s.UpdateSecret(ctx, secret("v3")); done <- err }()
	r = f.recv()
	f.sendSecrets([]string{"s"}, "", r.Nonce, "bad key")
	var rej *RejectedError
	if err := <-done; !errors.As(err, &rej) || rej.Detail != "bad key" {
		t.Fatalf("the rejected renewal: %v", err)
	}
	if ts := s.Status()["e1"].Streams[0].Types[SecretType]; len(ts.RejectedNames) != 1 || ts.Rejected != "bad key" {
		t.Fatalf("after the NACK: %+v", ts)
	}
}

// TestSharedSecretsAtOnce: UpdateSecrets serves many secrets in one
// response to an Envoy subscribed to them, and one acknowledgement of it
// ends the wait; a secret no Envoy asks for is served to later epochs.
func TestSharedSecretsAtOnce(t *testing.T) {
	s := listen(t, testLog{t})
	secret := func(name, v string) Resource {
		r, err := ConvertYAML(SecretType, []byte(`{name: `+name+`, generic_secret: {secret: {inline_string: "`+v+`"}}}`))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	ctx := withTimeout(t, 10*time.Second)
	if _, err := s.UpdateSecrets(ctx, []Resource{secret("a", "v1"), secret("b", "v1")}); err != nil {
		t.Fatal(err)
	}
	if err := s.Set("e1", RouteType, nil); err != nil {
		t.Fatal(err)
	}
	f := dialFake(t, s, "e1")
	f.sendSecrets([]string{"a", "b"}, "", "", "")
	r := f.recv()
	if len(r.Resources) != 2 {
		t.Fatalf("first response: %d secrets, want a and b", len(r.Resources))
	}
	f.sendSecrets([]string{"a", "b"}, r.VersionInfo, r.Nonce, "")
	done := make(chan error, 1)
	go func() {
		_, err := s.UpdateSecrets(ctx, []Resource{secret("a", "v2"), secret("b", "v2"), secret("c", "v1")})
		done <- err
	}()
	r = f.recv() // both renewals in one response
	if len(r.Resources) != 2 {
		t.Fatalf("the renewals: %d secrets in the response, want a and b at once", len(r.Resources))
	}
	f.sendSecrets([]string{"a", "b"}, r.VersionInfo, r.Nonce, "")
	if err := <-done; err != nil {
		t.Fatalf("the renewals: %v", err)
	}
	if _, err := s.UpdateSecrets(ctx, []Resource{{Type: RouteType, Name: "r"}}); err == nil {
		t.Fatal("UpdateSecrets took a route configuration")
	}
}

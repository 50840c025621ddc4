// One ADS stream: an Envoy process's requests (subscriptions, ACKs, NACKs)
// and the responses it is sent. Route configurations and secrets are
// subscribed to by name, and for them Envoy 1.40 reads a state-of-the-world
// response that leaves out a subscribed resource as "unchanged", not as
// "removed": measured, a response without one of two subscribed secrets (or
// route configurations) was acknowledged and the one left out went on
// serving. So a response carries only what Envoy does not hold yet (all it
// subscribes to on a new stream; after that, what changed), and a push costs
// what it changes, not the size of the set. Its version is a digest of all
// Envoy will hold once it takes the response, so the same resources have the
// same version in any agent. A resource Envoy rejected is not sent again
// until it changes. One response of a type is in flight at a time: Envoy
// subscribes to each secret with a request of its own (1,002 requests at
// the start of TestScale), and answering each resent the secrets so far
// (O(n²): one start took 11 s); requests that arrive while a response is in
// flight update the subscription, and the next response, once Envoy has
// answered, carries all of it.

package xds

import (
	"crypto/sha256"
	"errors"
	"io"
	"slices"
	"strconv"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	secret "github.com/envoyproxy/go-control-plane/envoy/service/secret/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	grpcpeer "google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/envoy-agent/envoy-agent/envoy/output"
	"github.com/envoy-agent/envoy-agent/envoy/xds/ads"
)

// stream is one ADS stream; its types are guarded by the server's mu.
type stream struct {
	srv   *Server
	epoch string
	pid   int32
	wake  chan struct{}
	types map[Type]*typeState
	// warned are the unknown names logged already.
	warned map[string]bool
}

// digest identifies a resource's content.
type digest = [sha256.Size]byte

// typeState is one type of a stream.
type typeState struct {
	names map[string]bool // subscribed
	// held is what Envoy acknowledged of each name; offered what the
	// response in flight carries; rejected what Envoy refused last, with
	// its reason (until that name is taken).
	held, offered, rejected map[string]digest
	reason                  string
	version                 string // of the last response
	nonce                   string // of the last response
	acked                   string // the version Envoy acknowledged last
	inFlight                bool   // a response awaits Envoy's answer
	// requests and responses count the stream's requests and responses
	// of the type.
	requests, responses int
}

func newTypeState() *typeState {
	return &typeState{names: map[string]bool{}, held: map[string]digest{}, offered: map[string]digest{}, rejected: map[string]digest{}}
}

func (st *stream) kick() {
	select {
	case st.wake <- struct{}{}:
	default:
	}
}

func (st *stream) subscribesLocked(t Type, name string) bool {
	ts := st.types[t]
	return ts != nil && ts.names[name]
}

// resourceLocked is the resource name of type t the stream's epoch
// serves (none once forgotten).
func (st *stream) resourceLocked(t Type, name string) (Resource, bool) {
	if e := st.srv.epochs[st.epoch]; e != nil {
		return st.srv.resourceLocked(e, t, name)
	}
	return Resource{}, false
}

// StreamAggregatedResources serves one Envoy's ADS stream. The epoch is
// the stream's :authority (Bootstrap sets it per epoch); the peer's
// credentials were checked in the handshake (peercred.go).
func (s *Server) StreamAggregatedResources(ss discovery.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	ctx := ss.Context()
	md, _ := metadata.FromIncomingContext(ctx)
	auth := md.Get(":authority")
	if len(auth) != 1 || ads.CheckEpoch(auth[0]) != nil {
		return status.Errorf(codes.InvalidArgument, "xds: the stream's :authority must name an epoch (%q)", auth)
	}
	st := &stream{srv: s, epoch: auth[0], wake: make(chan struct{}, 1), types: map[Type]*typeState{}, warned: map[string]bool{}}
	if p, ok := grpcpeer.FromContext(ctx); ok {
		if pi, ok := p.AuthInfo.(peer); ok {
			st.pid = pi.pid
		}
	}
	s.mu.Lock()
	s.epochLocked(st.epoch).streams[st] = true
	s.notifyLocked()
	s.mu.Unlock()
	s.log.Infof("xds: Envoy pid %d (epoch %s) connected", st.pid, st.epoch)
	defer func() {
		s.mu.Lock()
		if e := s.epochs[st.epoch]; e != nil {
			delete(e.streams, st)
		}
		s.notifyLocked()
		s.mu.Unlock()
	}()
	errc := make(chan error, 1)
	go func() { errc <- st.receive(ss) }()
	for {
		select {
		case err := <-errc:
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		case <-ctx.Done():
			return ctx.Err()
		case <-st.wake:
			for _, t := range []Type{SecretType, RouteType} {
				if resp := st.prepare(t); resp != nil {
					if err := ss.Send(resp); err != nil {
						return err
					}
				}
			}
		}
	}
}

// sds serves a secret's own gRPC stream (SecretDiscoveryService), which a
// bootstrap with an ads_config of its own (the operator's control plane)
// uses for the agent's secrets (ads.SecretSource): the same state of the
// world as an ADS stream, for one type.
type sds struct {
	secret.UnimplementedSecretDiscoveryServiceServer
	s *Server
}

func (d sds) StreamSecrets(ss secret.SecretDiscoveryService_StreamSecretsServer) error {
	return d.s.StreamAggregatedResources(ss)
}

// prepare is the response of type t the stream is to be sent now: the
// subscribed resources of the set that Envoy neither holds nor rejected as
// they are; nil when there are none, or a response is in flight.
func (st *stream) prepare(t Type) *discovery.DiscoveryResponse {
	s := st.srv
	s.mu.Lock()
	defer s.mu.Unlock()
	ts := st.types[t]
	if ts == nil || ts.inFlight {
		return nil
	}
	names := make([]string, 0, len(ts.names))
	for n := range ts.names {
		names = append(names, n)
	}
	slices.Sort(names)
	var send []Resource
	whole := make([]Resource, 0, len(names)) // what Envoy holds once it takes the response
	for _, n := range names {
		r, ok := st.resourceLocked(t, n)
		if !ok {
			if d, held := ts.held[n]; held {
				whole = append(whole, Resource{Name: n, Sum: d})
			}
			continue
		}
		whole = append(whole, r)
		if d, held := ts.held[n]; held && d == r.Sum {
			continue
		}
		if d, refused := ts.rejected[n]; refused && d == r.Sum {
			continue
		}
		send = append(send, r)
	}
	if len(send) == 0 {
		return nil
	}
	s.nonce++
	resp := &discovery.DiscoveryResponse{VersionInfo: version(whole), TypeUrl: string(t), Nonce: strconv.FormatUint(s.nonce, 10)}
	clear(ts.offered)
	for _, r := range send {
		resp.Resources = append(resp.Resources, &anypb.Any{TypeUrl: string(t), Value: r.Body})
		ts.offered[r.Name] = r.Sum
	}
	ts.version, ts.nonce, ts.inFlight = resp.VersionInfo, resp.Nonce, true
	ts.responses++
	return resp
}

// receive reads the stream's requests until it ends.
func (st *stream) receive(ss discovery.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	s := st.srv
	for {
		req, err := ss.Recv()
		if err != nil {
			return err
		}
		t := Type(req.GetTypeUrl())
		if t != RouteType && t != SecretType {
			s.log.Warnf("xds: Envoy pid %d (epoch %s) asks for %s, which the agent does not serve over ADS", st.pid, st.epoch, t)
			continue
		}
		s.mu.Lock()
		ts := st.types[t]
		if ts == nil {
			ts = newTypeState()
			st.types[t] = ts
		}
		ts.requests++
		if req.GetResponseNonce() != "" && req.GetResponseNonce() == ts.nonce && ts.inFlight {
			ts.inFlight = false
			if d := req.GetErrorDetail(); d != nil {
				ts.reason = output.RedactDetails(d.GetMessage()) // never the configuration it may quote
				if ts.reason == "" {
					ts.reason = "(Envoy gave no reason)"
				}
				for n, sum := range ts.offered {
					ts.rejected[n] = sum
				}
				s.log.Warnf("xds: Envoy pid %d (epoch %s) rejected %ss version %s: %s", st.pid, st.epoch, t.Noun(), ts.version, ts.reason)
			} else {
				ts.acked = ts.version
				for n, sum := range ts.offered {
					ts.held[n] = sum
					delete(ts.rejected, n)
				}
			}
			clear(ts.offered)
		}
		clear(ts.names)
		for _, n := range req.GetResourceNames() {
			ts.names[n] = true
			if _, ok := st.resourceLocked(t, n); !ok && !st.warned[string(t)+"\x00"+n] {
				st.warned[string(t)+"\x00"+n] = true
				s.log.Warnf("xds: Envoy pid %d (epoch %s) asks for %s %q, which its set does not have: Envoy waits for it", st.pid, st.epoch, t.Noun(), n)
			}
		}
		for n := range ts.held {
			if !ts.names[n] {
				delete(ts.held, n) // unsubscribed: Envoy dropped it
			}
		}
		for n := range ts.rejected {
			if !ts.names[n] {
				delete(ts.rejected, n) // unsubscribed: nothing is rejected of it any more
			}
		}
		s.notifyLocked()
		s.mu.Unlock()
		st.kick()
	}
}

// One ADS stream: an Envoy process's requests (subscriptions, ACKs, NACKs)
// and the responses it is sent, state of the world: each response of a
// type carries every resource of that type the stream subscribes to and the
// epoch's set has. Envoy's SotW client treats a subscribed resource missing
// from a response as removed (an SDS subscription then rejects the update),
// so a response is never partial, and it is sent only when what it would
// carry changed: after a NACK, nothing is sent again until the set changes.
// One response of a type is in flight at a time: Envoy subscribes to each
// route configuration and secret with a request of its own (1,000
// listeners: about 1,000 requests at a start), and a response to each would
// resend every resource so far each time (O(n²); one start of TestScale
// took 11 s so). Requests that arrive while a response is in flight update
// the subscription; the next response, once Envoy has answered, carries all
// of it.

package xds

import (
	"errors"
	"io"
	"slices"
	"strconv"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	grpcpeer "google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"
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

// typeState is one type of a stream.
type typeState struct {
	names   map[string]bool     // subscribed
	sent    map[string]Resource // carried by the last response
	version string              // of the last response
	nonce   string              // of the last response
	acked   string              // the version Envoy acknowledged last
	// inFlight is set from a response's send until Envoy answers it (ACK
	// or NACK): no other response of the type is sent meanwhile.
	inFlight bool
	// requests and responses count the stream's requests and responses
	// of the type.
	requests, responses int
	// nacked is the version Envoy rejected last, nackDetail its reason.
	nacked, nackDetail string
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

// response is what a stream is sent of one type.
type response struct {
	version string
	rs      []Resource
}

// responseLocked is what the stream would be sent of type t now: every
// name it subscribes to that the epoch's set has, or that it was sent
// before and the set no longer has (served as it was until Envoy stops
// asking for it).
func (st *stream) responseLocked(t Type) response {
	ts := st.types[t]
	if ts == nil {
		return response{}
	}
	var set map[string]Resource
	if e := st.srv.epochs[st.epoch]; e != nil {
		set = e.sets[t]
	}
	names := make([]string, 0, len(ts.names))
	for n := range ts.names {
		names = append(names, n)
	}
	slices.Sort(names)
	var rs []Resource
	for _, n := range names {
		if r, ok := set[n]; ok {
			rs = append(rs, r)
		} else if r, ok := ts.sent[n]; ok {
			rs = append(rs, r)
		}
	}
	return response{version: version(rs), rs: rs}
}

// StreamAggregatedResources serves one Envoy's ADS stream. The epoch is
// the stream's :authority (Bootstrap sets it per epoch); the peer's
// credentials were checked in the handshake (peercred.go).
func (s *Server) StreamAggregatedResources(ss discovery.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	ctx := ss.Context()
	md, _ := metadata.FromIncomingContext(ctx)
	auth := md.Get(":authority")
	if len(auth) != 1 || checkEpoch(auth[0]) != nil {
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

// prepare is the response of type t the stream is to be sent now, nil
// when it has it already (or asks for nothing the set has).
func (st *stream) prepare(t Type) *discovery.DiscoveryResponse {
	s := st.srv
	s.mu.Lock()
	defer s.mu.Unlock()
	ts := st.types[t]
	if ts == nil || ts.inFlight {
		return nil
	}
	want := st.responseLocked(t)
	if want.version == ts.version || len(want.rs) == 0 {
		return nil
	}
	s.nonce++
	resp := &discovery.DiscoveryResponse{VersionInfo: want.version, TypeUrl: string(t), Nonce: strconv.FormatUint(s.nonce, 10)}
	ts.sent = make(map[string]Resource, len(want.rs))
	for _, r := range want.rs {
		resp.Resources = append(resp.Resources, &anypb.Any{TypeUrl: string(t), Value: r.Body})
		ts.sent[r.Name] = r
	}
	ts.version, ts.nonce, ts.inFlight = want.version, resp.Nonce, true
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
			ts = &typeState{acked: req.GetVersionInfo()} // what Envoy had before it (re)connected
			st.types[t] = ts
		}
		ts.requests++
		if req.GetResponseNonce() != "" && req.GetResponseNonce() == ts.nonce {
			ts.inFlight = false
			if d := req.GetErrorDetail(); d != nil {
				ts.nacked, ts.nackDetail = ts.version, d.GetMessage()
				if ts.nackDetail == "" {
					ts.nackDetail = "(Envoy gave no reason)"
				}
				s.log.Warnf("xds: Envoy pid %d (epoch %s) rejected %ss version %s: %s", st.pid, st.epoch, t.short(), ts.version, ts.nackDetail)
			} else {
				ts.acked = ts.version
			}
		}
		ts.names = make(map[string]bool, len(req.GetResourceNames()))
		var set map[string]Resource
		if e := s.epochs[st.epoch]; e != nil {
			set = e.sets[t]
		}
		for _, n := range req.GetResourceNames() {
			ts.names[n] = true
			if _, ok := set[n]; !ok && !st.warned[string(t)+"\x00"+n] {
				st.warned[string(t)+"\x00"+n] = true
				s.log.Warnf("xds: Envoy pid %d (epoch %s) asks for %s %q, which its set does not have: Envoy waits for it", st.pid, st.epoch, t.short(), n)
			}
		}
		s.notifyLocked()
		s.mu.Unlock()
		st.kick()
	}
}

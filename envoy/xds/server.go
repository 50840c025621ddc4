package xds

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	secret "github.com/envoyproxy/go-control-plane/envoy/service/secret/v3"
	"google.golang.org/grpc"

	"github.com/envoy-agent/envoy-agent/envoy/xds/ads"
)

// SocketName is the server's socket in the folder the caller gives.
const SocketName = ads.SocketName

// Logger is what a Server logs through; *logrus.Logger satisfies it.
type Logger interface {
	Infof(format string, args ...any)
	Warnf(format string, args ...any)
	Errorf(format string, args ...any)
}

// Server serves the resource sets of the agent's Envoy processes over ADS.
// Each process is an epoch, named by the :authority its bootstrap gives its
// stream (Bootstrap), and is answered from its own set: a draining epoch
// keeps the resources it ran with while the new one gets its own. Secrets
// given to UpdateSecret (the certificates the agent reads from files) are
// every epoch's, unless its own set has one of that name. It is safe for
// concurrent use.
type Server struct {
	discovery.UnimplementedAggregatedDiscoveryServiceServer

	log  Logger
	path string
	sock os.FileInfo // the socket as made, so Close removes no other
	ln   *net.UnixListener
	grpc *grpc.Server

	mu      sync.Mutex
	epochs  map[string]*epoch
	shared  map[string]Resource // UpdateSecret's secrets, by name
	nonce   uint64
	changed chan struct{} // closed, and replaced, at every change a waiter may look for
}

// epoch is one Envoy process's resources and streams.
type epoch struct {
	sets    map[Type]map[string]Resource
	streams map[*stream]bool
}

// Listen makes the server's socket, dir/SocketName, and serves it until
// Close (New, then Server.Listen).
func Listen(dir string, log Logger) (*Server, error) {
	s := New(filepath.Join(dir, SocketName), log)
	if err := s.Listen(); err != nil {
		return nil, err
	}
	return s, nil
}

// New is a Server whose socket is path, not made yet: it answers nothing
// until Listen, or Serve on a socket handed over. Epochs can be set on it
// meanwhile.
func New(path string, log Logger) *Server {
	s := &Server{log: log, path: path, epochs: map[string]*epoch{}, shared: map[string]Resource{}, changed: make(chan struct{})}
	s.grpc = grpc.NewServer(grpc.Creds(peerCreds{}))
	discovery.RegisterAggregatedDiscoveryServiceServer(s.grpc, s)
	secret.RegisterSecretDiscoveryServiceServer(s.grpc, sds{s: s})
	return s
}

// Listen makes the server's socket (0600; a stale socket there is
// replaced) in its folder, which neither its group nor others may write
// (the agent's run folder), and serves it until Close.
func (s *Server) Listen() error {
	dir := filepath.Dir(s.path)
	st, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("xds socket folder: %w", err)
	}
	if !st.IsDir() || st.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("xds socket folder %s: must be a folder only its owner can write (mode %v)", dir, st.Mode().Perm())
	}
	if fi, err := os.Lstat(s.path); err == nil && fi.Mode()&os.ModeSocket != 0 {
		_ = os.Remove(s.path)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: s.path, Net: "unix"})
	if err != nil {
		return fmt.Errorf("xds socket: %w", err)
	}
	if err := os.Chmod(s.path, 0o600); err != nil {
		ln.Close()
		return fmt.Errorf("xds socket: %w", err)
	}
	if err := s.Serve(ln); err != nil {
		ln.Close()
		return err
	}
	return nil
}

// Serve answers on ln, the server's socket at Path (made by Listen; a live
// upgrade hands it over, and Envoy, reconnecting, finds it listening),
// until Close. Call it once the sets of the epochs whose Envoys will
// connect are in place.
func (s *Server) Serve(ln *net.UnixListener) error {
	if got := ln.Addr().String(); got != s.path {
		return fmt.Errorf("xds socket: %s is not %s", got, s.path)
	}
	sock, err := os.Lstat(s.path)
	if err != nil || sock.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("xds socket %s: not there as a socket (%v)", s.path, err)
	}
	ln.SetUnlinkOnClose(false) // Close removes it, if it is still this one
	s.mu.Lock()
	s.sock, s.ln = sock, ln
	s.mu.Unlock()
	go func() { _ = s.grpc.Serve(ln) }()
	return nil
}

// Listener is the server's listening socket (nil before Listen or Serve),
// which a live upgrade hands over.
func (s *Server) Listener() *net.UnixListener {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ln
}

// Path is the server's socket.
func (s *Server) Path() string { return s.path }

// Close stops the server: every stream ends (Envoy keeps what it has and
// reconnects with back-off) and the socket is removed, unless another
// server has made its own at the path since.
func (s *Server) Close() {
	s.grpc.Stop()
	s.mu.Lock()
	ln, sock := s.ln, s.sock
	s.mu.Unlock()
	if ln == nil {
		return
	}
	_ = ln.Close()
	if fi, err := os.Lstat(s.path); err == nil && os.SameFile(fi, sock) {
		_ = os.Remove(s.path)
	}
}

// notifyLocked wakes every waiter (s.mu held).
func (s *Server) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

func (s *Server) epochLocked(name string) *epoch {
	e := s.epochs[name]
	if e == nil {
		e = &epoch{sets: map[Type]map[string]Resource{}, streams: map[*stream]bool{}}
		s.epochs[name] = e
	}
	return e
}

// Set makes rs the whole set of type t of the epoch: what it answers the
// epoch's Envoy, from its first request on. It waits for nothing (an
// Envoy not started yet asks when it starts; a running one is sent what it
// subscribes to).
func (s *Server) Set(epochName string, t Type, rs []Resource) error {
	if err := ads.CheckEpoch(epochName); err != nil {
		return err
	}
	set := make(map[string]Resource, len(rs))
	for _, r := range rs {
		if r.Type != t {
			return fmt.Errorf("xds: %s %s is not a %s", r.Type.Noun(), r.Name, t.Noun())
		}
		set[r.Name] = r
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.epochLocked(epochName)
	e.sets[t] = set
	s.kickLocked(e)
	return nil
}

// Forget drops an epoch's set once its Envoy has exited.
func (s *Server) Forget(epochName string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.epochs, epochName)
	s.notifyLocked()
}

func (s *Server) kickLocked(e *epoch) {
	for st := range e.streams {
		st.kick()
	}
	s.notifyLocked()
}

// Update puts rs into (and removes the names remove from) the epoch's set
// of type t, sends the change to its Envoy, and waits, within ctx, until
// every stream of that Envoy that subscribes to a changed name has
// acknowledged the version that carries it (Outcome) or rejected it
// (*RejectedError, with Envoy's reason). With no stream of the epoch
// connected (Envoy reconnecting after the agent's re-execution), it waits
// for one. A name removed while Envoy still subscribes to it is sent
// nothing: Envoy keeps a resource a response leaves out (measured) until it
// no longer asks for it.
func (s *Server) Update(ctx context.Context, epochName string, t Type, rs []Resource, remove []string) (Outcome, error) {
	if err := ads.CheckEpoch(epochName); err != nil {
		return Outcome{}, err
	}
	changed := make([]string, 0, len(rs)+len(remove))
	s.mu.Lock()
	e := s.epochLocked(epochName)
	set := maps(e.sets, t)
	for _, r := range rs {
		if r.Type != t {
			s.mu.Unlock()
			return Outcome{}, fmt.Errorf("xds: %s %s is not a %s", r.Type.Noun(), r.Name, t.Noun())
		}
		set[r.Name] = r
		changed = append(changed, r.Name)
	}
	for _, n := range remove {
		delete(set, n)
		changed = append(changed, n)
	}
	s.kickLocked(e)
	s.mu.Unlock()
	return s.wait(ctx, epochName, t, changed)
}

func maps(sets map[Type]map[string]Resource, t Type) map[string]Resource {
	if sets[t] == nil {
		sets[t] = map[string]Resource{}
	}
	return sets[t]
}

// UpdateSecret serves the secret r to every epoch, now and from then on
// (a certificate the agent reads from files, and its renewals: a draining
// epoch gets them too, and so does an epoch that starts later), and puts it
// in place of a secret of its name in an epoch's own set; it waits, as
// Update does, for each epoch whose Envoy subscribes to it. It returns the
// outcome of each such epoch, and the rejections.
func (s *Server) UpdateSecret(ctx context.Context, r Resource) (map[string]Outcome, error) {
	return s.UpdateSecrets(ctx, []Resource{r})
}

// UpdateSecrets is UpdateSecret of each of rs at once: one response to
// each epoch, and one wait for each epoch whose Envoy subscribes to any of
// them (one by one, an Envoy subscribed to 1,000 secrets acknowledged
// each, with all it holds, before the next).
func (s *Server) UpdateSecrets(ctx context.Context, rs []Resource) (map[string]Outcome, error) {
	for _, r := range rs {
		if r.Type != SecretType {
			return nil, fmt.Errorf("xds: %s %s is not a secret", r.Type.Noun(), r.Name)
		}
	}
	s.mu.Lock()
	for _, r := range rs {
		s.shared[r.Name] = r
	}
	waits := map[string][]string{} // by epoch: the secrets its Envoy subscribes to
	for name, e := range s.epochs {
		for _, r := range rs {
			if _, own := e.sets[SecretType][r.Name]; own {
				e.sets[SecretType][r.Name] = r
			}
			for st := range e.streams {
				if st.subscribesLocked(SecretType, r.Name) {
					waits[name] = append(waits[name], r.Name)
					break
				}
			}
		}
		s.kickLocked(e)
	}
	s.notifyLocked()
	s.mu.Unlock()
	out := map[string]Outcome{}
	var errs []error
	names := make([]string, 0, len(waits))
	for name := range waits {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		o, err := s.wait(ctx, name, SecretType, waits[name])
		out[name] = o
		if err != nil {
			errs = append(errs, err)
		}
	}
	return out, errors.Join(errs...)
}

// resourceLocked is the resource name of type t that epoch e serves: its
// own, else a shared secret.
func (s *Server) resourceLocked(e *epoch, t Type, name string) (Resource, bool) {
	if r, ok := e.sets[t][name]; ok {
		return r, true
	}
	if t == SecretType {
		r, ok := s.shared[name]
		return r, ok
	}
	return Resource{}, false
}

// wait waits until every stream of the epoch that subscribes to one of
// names has acknowledged or rejected the version it would be sent now.
func (s *Server) wait(ctx context.Context, epochName string, t Type, names []string) (Outcome, error) {
	for {
		s.mu.Lock()
		done, out, err := s.settledLocked(epochName, t, names)
		ch := s.changed
		s.mu.Unlock()
		if done {
			return out, err
		}
		select {
		case <-ctx.Done():
			return out, fmt.Errorf("xds: waiting for Envoy (epoch %s) to acknowledge %s: %w", epochName, t.Noun()+"s", ctx.Err())
		case <-ch:
		}
	}
}

func (s *Server) settledLocked(epochName string, t Type, names []string) (bool, Outcome, error) {
	e := s.epochs[epochName]
	if e == nil {
		return true, Outcome{}, fmt.Errorf("xds: no epoch %s", epochName)
	}
	if len(e.streams) == 0 {
		return false, Outcome{}, nil
	}
	var out Outcome
	used := map[string]bool{}
	for st := range e.streams {
		ts := st.types[t]
		if ts == nil {
			continue
		}
		for _, n := range names {
			if !ts.names[n] {
				continue
			}
			used[n] = true
			r, ok := s.resourceLocked(e, t, n)
			switch {
			case !ok:
				// Removed while subscribed: Envoy keeps what it has
				// until it unsubscribes.
			case ts.held[n] == r.Sum:
			case ts.rejected[n] == r.Sum:
				return true, out, &RejectedError{Epoch: epochName, Type: t, Version: ts.version, Detail: ts.reason}
			default:
				return false, out, nil
			}
		}
		if out.Version == "" {
			out.Version = ts.acked
		}
	}
	for _, n := range names {
		if !used[n] {
			out.Unsubscribed = append(out.Unsubscribed, n)
		}
	}
	return true, out, nil
}

// Status says, for each epoch, what its Envoy subscribes to and has
// acknowledged: a subscribed name is held (Envoy acknowledged it as the
// server has it), pending, rejected (as the server has it) or unknown.
func (s *Server) Status() map[string]EpochStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]EpochStatus{}
	for name, e := range s.epochs {
		es := EpochStatus{Resources: map[Type]int{}}
		for t, set := range e.sets {
			es.Resources[t] = len(set)
		}
		for st := range e.streams {
			ss := StreamStatus{Pid: st.pid, Types: map[Type]TypeStatus{}}
			for t, ts := range st.types {
				status := TypeStatus{Sent: ts.version, Acked: ts.acked, Requests: ts.requests, Responses: ts.responses}
				for n := range ts.names {
					status.Subscribed = append(status.Subscribed, n)
					r, ok := s.resourceLocked(e, t, n)
					switch {
					case !ok:
						status.Unknown = append(status.Unknown, n)
					case ts.rejected[n] == r.Sum:
						status.RejectedNames = append(status.RejectedNames, n)
					case ts.held[n] != r.Sum:
						status.Pending = append(status.Pending, n)
					}
				}
				if len(status.RejectedNames) > 0 {
					status.Rejected = ts.reason
				}
				slices.Sort(status.Subscribed)
				slices.Sort(status.Unknown)
				slices.Sort(status.Pending)
				slices.Sort(status.RejectedNames)
				ss.Types[t] = status
			}
			es.Streams = append(es.Streams, ss)
		}
		sort.Slice(es.Streams, func(i, j int) bool { return es.Streams[i].Pid < es.Streams[j].Pid })
		out[name] = es
	}
	return out
}

// version names a response's resources: a digest of their names and
// bodies, so that the same resources have the same version in any agent
// (one re-executed included) and Envoy's after a reconnection matches.
func version(rs []Resource) string {
	if len(rs) == 0 {
		return ""
	}
	h := sha256.New()
	for _, r := range rs {
		h.Write([]byte(r.Name))
		h.Write([]byte{0})
		h.Write(r.Sum[:])
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

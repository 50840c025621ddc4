package ads

import (
	"context"
	"crypto/sha256"
	"fmt"
	"regexp"
	"sync"

	"go.yaml.in/yaml/v3"
)

// Type is a resource type served over ADS, as its type URL.
type Type string

// The types served over ADS.
const (
	RouteType  Type = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
	SecretType Type = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret"
)

// Noun is what a resource of the type is called in a sentence ("route
// configuration", "secret").
func (t Type) Noun() string {
	switch t {
	case RouteType:
		return "route configuration"
	case SecretType:
		return "secret"
	}
	return string(t)
}

// Resource is one resource converted: its name, type and protobuf bytes.
type Resource struct {
	Name string
	Type Type
	// Body is the resource's protobuf encoding (deterministic: the same
	// YAML always gives the same bytes).
	Body []byte
	// Sum is a digest of Body, which versions are made of.
	Sum [sha256.Size]byte
}

// Convert turns a resource written in YAML into a Resource of type t, or
// says why it cannot (envoy/xds.Convert, which reads the YAML as Envoy's
// loader does).
type Convert func(t Type, n *yaml.Node) (Resource, error)

// Outcome is what an epoch's Envoy did with a change.
type Outcome struct {
	// Version is the version of the resources it acknowledged ("" when no
	// stream of it subscribes to any changed name).
	Version string
	// Unsubscribed are the changed names its Envoy does not ask for (yet):
	// they are served when it does.
	Unsubscribed []string
}

// RejectedError is a change Envoy refused (a NACK): Detail is its reason
// (the error_detail of its request). Envoy goes on with what it had.
type RejectedError struct {
	Epoch   string
	Type    Type
	Version string
	Detail  string
}

func (e *RejectedError) Error() string {
	return fmt.Sprintf("Envoy (epoch %s) rejected %ss version %s: %s", e.Epoch, e.Type.Noun(), e.Version, e.Detail)
}

// TypeStatus is what one stream of an Envoy has of one type.
type TypeStatus struct {
	// Subscribed are the names Envoy asks for; Unknown those of them the
	// server does not have for its epoch (Envoy waits for them, up to its
	// initial_fetch_timeout at a start).
	Subscribed, Unknown []string
	// Sent is the version last sent, Acked the version Envoy acknowledged
	// last.
	Sent, Acked string
	// Pending are the subscribed names Envoy does not hold as the server
	// has them yet: sent and not answered, or not sent yet.
	Pending []string
	// Rejected is Envoy's reason for the rejection of resources it does
	// not hold yet ("" when it took every one it was sent), and
	// RejectedNames those resources.
	Rejected      string
	RejectedNames []string
	// Requests and Responses count what went each way.
	Requests, Responses int
}

// StreamStatus is one ADS stream of an epoch's Envoy.
type StreamStatus struct {
	// Pid is the connected process (SO_PEERCRED).
	Pid   int32
	Types map[Type]TypeStatus
}

// EpochStatus is what an epoch's Envoy has acknowledged.
type EpochStatus struct {
	// Resources counts the epoch's set by type.
	Resources map[Type]int
	Streams   []StreamStatus
}

// Server is the agent's ADS server (envoy/xds.Server) as the packages that
// run Envoy call it; see there for what each call does.
type Server interface {
	// Set makes rs the whole set of type t of the epoch, before its Envoy
	// starts or while it runs; it waits for nothing.
	Set(epoch string, t Type, rs []Resource) error
	// Update puts rs into (and removes remove from) the epoch's set and
	// waits until its Envoy acknowledged or rejected (*RejectedError) them.
	Update(ctx context.Context, epoch string, t Type, rs []Resource, remove []string) (Outcome, error)
	// UpdateSecret serves the secret r to every epoch (a certificate's
	// renewal) and waits for those whose Envoy subscribes to it.
	UpdateSecret(ctx context.Context, r Resource) (map[string]Outcome, error)
	// UpdateSecrets is UpdateSecret of many secrets at once: one wait for
	// each epoch whose Envoy subscribes to any of them.
	UpdateSecrets(ctx context.Context, rs []Resource) (map[string]Outcome, error)
	// Forget drops an epoch once its Envoy has exited.
	Forget(epoch string)
	// Status says, for each epoch, what its Envoy subscribes to and holds.
	Status() map[string]EpochStatus
	// Path is the server's socket.
	Path() string
}

// epochName is what an epoch's name (its streams' :authority) may hold:
// an HTTP/2 authority Envoy sends as it is.
// Compiled at the first check: its {1,64} made the costliest regular
// expression of the agent's start (0.2 ms of every exec).
var epochName = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`) })

// CheckEpoch refuses a name that cannot be an epoch's (an authority
// Envoy sends as it is).
func CheckEpoch(name string) error {
	if !epochName().MatchString(name) {
		return fmt.Errorf("xds: epoch name %q: want 1 to 64 of [A-Za-z0-9._-]", name)
	}
	return nil
}

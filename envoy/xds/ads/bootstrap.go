// The pieces of a bootstrap that point an Envoy epoch at the server: a
// static cluster to the socket, dynamic_resources.ads_config naming the
// epoch, and the config source a connection manager's rds and an
// SdsSecretConfig use to read from ADS.

package ads

import (
	"fmt"
	"strconv"

	"go.yaml.in/yaml/v3"
)

// SocketName is the server's socket in the folder it is made in (the
// agent's run folder).
const SocketName = "xds.sock"

// ClusterName is the static xDS cluster's name, with a number after it
// when the operator's bootstrap has a cluster of that name.
const ClusterName = "envoy-agent-xds"

// Back-off of Envoy's reconnection to the server (EnvoyGrpc.retry_policy;
// Envoy's own default is 500 ms doubling to 30 s). The agent's live upgrade
// re-creates the socket, and Envoy serves on with what it has meanwhile;
// a short back-off brings a reload's next push to it sooner.
const (
	retryBase = "0.1s"
	retryMax  = "1s"
)

// Pieces are what an epoch's bootstrap needs to read routes and secrets
// from the server.
type Pieces struct {
	// ClusterName is Cluster's name.
	ClusterName string
	// Cluster goes into static_resources.clusters: STATIC, HTTP/2, the
	// socket as a pipe address.
	Cluster *yaml.Node
	// ADSConfig is dynamic_resources.ads_config: gRPC to Cluster, with
	// the epoch as the stream's :authority.
	ADSConfig *yaml.Node
	// ConfigSource is what a connection manager's rds.config_source and an
	// SdsSecretConfig's sds_config are: {ads: {}, resource_api_version: V3}.
	ConfigSource *yaml.Node
}

// Bootstrap gives the pieces for the epoch named epoch (its streams'
// :authority, which Server answers by) with the server's socket at socket.
// taken says whether the operator's bootstrap has a cluster of a name.
func Bootstrap(socket, epoch string, taken func(string) bool) (Pieces, error) {
	if err := CheckEpoch(epoch); err != nil {
		return Pieces{}, err
	}
	var p Pieces
	p.ClusterName, p.Cluster = Cluster(socket, taken)
	p.ADSConfig = mapping(
		"api_type", plainStr("GRPC"),
		"transport_api_version", plainStr("V3"),
		"set_node_on_first_message_only", plainStr("true"),
		"grpc_services", seq(grpcService(p.ClusterName, epoch)),
	)
	p.ConfigSource = ConfigSource()
	return p, nil
}

// Cluster is the static xDS cluster to the server's socket (STATIC,
// HTTP/2, the socket as a pipe address) and its name: ClusterName, with a
// number after it while taken says the operator's bootstrap has a cluster
// of that name.
func Cluster(socket string, taken func(string) bool) (string, *yaml.Node) {
	name := ClusterName
	for i := 2; taken != nil && taken(name); i++ {
		name = ClusterName + "-" + strconv.Itoa(i)
	}
	endpoint := mapping("endpoint", mapping("address", mapping("pipe", mapping("path", str(socket)))))
	return name, mapping(
		"name", str(name),
		"type", plainStr("STATIC"),
		"load_assignment", mapping("cluster_name", str(name), "endpoints", seq(mapping("lb_endpoints", seq(endpoint)))),
		"typed_extension_protocol_options", mapping("envoy.extensions.upstreams.http.v3.HttpProtocolOptions", mapping(
			"@type", str("type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions"),
			"explicit_http_config", mapping("http2_protocol_options", mapping()))),
	)
}

// grpcService is the gRPC service of the cluster named cluster, with the
// epoch as its streams' :authority.
func grpcService(cluster, epoch string) *yaml.Node {
	retry := mapping("retry_back_off", mapping("base_interval", str(retryBase), "max_interval", str(retryMax)))
	return mapping("envoy_grpc", mapping("cluster_name", str(cluster), "authority", str(epoch), "retry_policy", retry))
}

// EpochToken stands for the epoch's name in a bootstrap copy, which any
// epoch may run, where the copy itself must name it (SecretSource); the
// agent puts the epoch's name in its place when an epoch runs the copy
// (inplace.Runnable).
const EpochToken = "envoy-agent-epoch"

// SecretSource is an SdsSecretConfig's sds_config that reads the secret
// from the server on a gRPC stream of its own (SDS, not ADS), through the
// cluster named cluster, as EpochToken: for a bootstrap whose ads_config
// is the operator's own control plane, which the agent's secrets cannot
// share.
func SecretSource(cluster string) *yaml.Node {
	return mapping(
		"api_config_source", mapping(
			"api_type", plainStr("GRPC"),
			"transport_api_version", plainStr("V3"),
			"grpc_services", seq(grpcService(cluster, EpochToken)),
		),
		"resource_api_version", plainStr("V3"),
	)
}

// ConfigSource is {ads: {}, resource_api_version: V3}: read from the ADS
// stream.
func ConfigSource() *yaml.Node {
	return mapping("ads", mapping(), "resource_api_version", plainStr("V3"))
}

// str is a double-quoted string (Envoy's YAML reads a plain n or 017 as
// something else).
func str(s string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s, Style: yaml.DoubleQuotedStyle}
}

// plainStr is a plain scalar: an enum's name or a bool.
func plainStr(s string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s} }

func seq(items ...*yaml.Node) *yaml.Node {
	return &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq", Content: items}
}

func mapping(kv ...any) *yaml.Node {
	m := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Style: yaml.FlowStyle}
	for i := 0; i+1 < len(kv); i += 2 {
		m.Content = append(m.Content, plainStr(kv[i].(string)), kv[i+1].(*yaml.Node))
	}
	if len(kv)%2 != 0 {
		panic(fmt.Sprintf("mapping: odd arguments %v", kv)) // a programming error in this file
	}
	return m
}

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
	name := ClusterName
	for i := 2; taken != nil && taken(name); i++ {
		name = ClusterName + "-" + strconv.Itoa(i)
	}
	p := Pieces{ClusterName: name}
	endpoint := mapping("endpoint", mapping("address", mapping("pipe", mapping("path", str(socket)))))
	p.Cluster = mapping(
		"name", str(name),
		"type", plainStr("STATIC"),
		"load_assignment", mapping("cluster_name", str(name), "endpoints", seq(mapping("lb_endpoints", seq(endpoint)))),
		"typed_extension_protocol_options", mapping("envoy.extensions.upstreams.http.v3.HttpProtocolOptions", mapping(
			"@type", str("type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions"),
			"explicit_http_config", mapping("http2_protocol_options", mapping()))),
	)
	retry := mapping("retry_back_off", mapping("base_interval", str(retryBase), "max_interval", str(retryMax)))
	grpcService := mapping("envoy_grpc", mapping("cluster_name", str(name), "authority", str(epoch), "retry_policy", retry))
	p.ADSConfig = mapping(
		"api_type", plainStr("GRPC"),
		"transport_api_version", plainStr("V3"),
		"set_node_on_first_message_only", plainStr("true"),
		"grpc_services", seq(grpcService),
	)
	p.ConfigSource = ConfigSource()
	return p, nil
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

// A bootstrap the agent runs as it is (not split into resource files:
// reload_method "hot_restart", or a bootstrap Parse refuses) that reads
// secrets over ADS (the certificates' step, envoy/certs): the same pieces
// of the bootstrap that Write gives a split one, so that Envoy reaches the
// agent's ADS server as the epoch it is.

package inplace

import (
	"go.yaml.in/yaml/v3"

	"github.com/envoy-agent/envoy-agent/envoy/xds/ads"
	"github.com/envoy-agent/envoy-agent/internal/bootyaml"
)

// Runnable is the bootstrap data (a file called name) wired to the agent's
// ADS server as wire says, when it reads anything from the agent; nil when
// it reads nothing (Envoy runs data as it is). The epoch's name goes in
// place of ads.EpochToken (secrets read on a gRPC stream of their own:
// envoy/certs). A bootstrap with an ads_config of its own (the operator's
// control plane) has the server's cluster already (envoy/certs adds it);
// any other gets the cluster and an ads_config naming the epoch.
func Runnable(data []byte, name string, wire Wire) ([]byte, error) {
	if !bootyaml.Rewritable(name) {
		return nil, nil
	}
	var doc yaml.Node
	if err := bootyaml.Decode(data, &doc); err != nil {
		return nil, err
	}
	root := bootyaml.Root(&doc)
	if root == nil {
		return nil, nil
	}
	token := replaceScalar(root, ads.EpochToken, wire.Epoch)
	dyn := bootyaml.Value(root, "dynamic_resources")
	if own := bootyaml.Value(dyn, "ads_config"); own != nil {
		if !token {
			return nil, nil // the operator's ADS alone
		}
		return bootyaml.Encode(&doc, name)
	}
	if !token && !readsADS(root) {
		return nil, nil
	}
	taken := map[string]bool{}
	static := bootyaml.Value(root, "static_resources")
	for _, c := range bootyaml.Items(bootyaml.Value(static, "clusters")) {
		taken[bootyaml.Text(bootyaml.Value(c, "name"))] = true
	}
	p, err := ads.Bootstrap(wire.Socket, wire.Epoch, func(n string) bool { return taken[n] })
	if err != nil {
		return nil, err
	}
	if static == nil || static.Kind != yaml.MappingNode {
		static = bootyaml.Mapping()
		bootyaml.Set(root, "static_resources", static)
	}
	addCluster(static, p.Cluster)
	if dyn == nil || dyn.Kind != yaml.MappingNode {
		dyn = bootyaml.Mapping()
		bootyaml.Set(root, "dynamic_resources", dyn)
	}
	bootyaml.Set(dyn, "ads_config", p.ADSConfig)
	return bootyaml.Encode(&doc, name)
}

// readsADS reports whether a config source under n reads over ADS: a
// mapping with an ads key (ads.ConfigSource).
func readsADS(n *yaml.Node) bool {
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == "ads" && n.Content[i+1].Kind == yaml.MappingNode {
				return true
			}
		}
	}
	for _, c := range n.Content {
		if readsADS(c) {
			return true
		}
	}
	return false
}

// replaceScalar puts to in place of every scalar from under n, and reports
// whether there was one.
func replaceScalar(n *yaml.Node, from, to string) bool {
	if n.Kind == yaml.ScalarNode && n.Value == from {
		n.Value = to
		return true
	}
	found := false
	for _, c := range n.Content {
		found = replaceScalar(c, from, to) || found
	}
	return found
}

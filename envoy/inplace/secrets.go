// The operator's static secrets (static_resources.secrets), moved out of
// the bootstrap and served over ADS (an SDS source of ads in each reference
// to them), so that a changed certificate, key, trusted CA or session
// ticket key is a secret update: Envoy builds the TLS contexts that use it
// again, new handshakes get the new secret, and no connection is drained or
// closed. Left static, a secret's change would be a change of the
// bootstrap itself, which only a hot restart can take.

package inplace

import (
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/envoy-agent/envoy-agent/envoy/xds/ads"
	"github.com/envoy-agent/envoy-agent/internal/bootyaml"
)

// secretRefs calls f with every reference to a secret by name alone (an
// SdsSecretConfig without sds_config: tls_certificate_sds_secret_configs,
// validation_context_sds_secret_config, session_ticket_keys_sds_secret_config
// in either spelling) under n.
func secretRefs(n *yaml.Node, f func(name string, ref *yaml.Node)) {
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := bootyaml.Norm(n.Content[i].Value), n.Content[i+1]
			switch {
			case strings.HasSuffix(k, "sdssecretconfig") && v.Kind == yaml.MappingNode:
				byName(v, f)
			case strings.HasSuffix(k, "sdssecretconfigs") && v.Kind == yaml.SequenceNode:
				for _, c := range v.Content {
					byName(c, f)
				}
			default:
				secretRefs(v, f)
			}
		}
		return
	}
	for _, c := range n.Content {
		secretRefs(c, f)
	}
}

// byName calls f with ref when it names a static secret: a name and no
// source.
func byName(ref *yaml.Node, f func(string, *yaml.Node)) {
	if ref.Kind != yaml.MappingNode {
		return
	}
	name := bootyaml.Text(bootyaml.Value(ref, "name"))
	for i := 0; i+1 < len(ref.Content); i += 2 {
		if bootyaml.Norm(ref.Content[i].Value) == "sdsconfig" {
			return
		}
	}
	if name != "" {
		f(name, ref)
	}
}

// moveSecrets takes out of static (the bootstrap's static_resources, in
// rest) the secrets that only the moved listeners and clusters name, each
// through references by name alone (secretRefs), converts them (convert),
// and points those references at ADS. A secret stays static when its name
// is a scalar anywhere else (in the rest of the bootstrap, a kept cluster,
// a filter's own secret field, or as another resource's name: keeping one
// too many only means it cannot change in place), when nothing names it,
// or when convert refuses it (why says so). It changes the listeners' and
// clusters' nodes and digests.
func moveSecrets(rest, static *yaml.Node, listeners, clusters []resource, convert ads.Convert) (moved []resource, why []string, err error) {
	all, err := resources(static, "secrets")
	if err != nil || len(all) == 0 {
		return nil, nil, err
	}
	// Every scalar outside the secrets themselves, and the references.
	seen := map[string]int{}
	count := func(s string) { seen[s]++ }
	for i := 0; i+1 < len(rest.Content); i += 2 {
		if rest.Content[i+1] != static {
			scalars(rest.Content[i+1], count)
		}
	}
	for i := 0; i+1 < len(static.Content); i += 2 {
		if static.Content[i].Value != "secrets" {
			scalars(static.Content[i+1], count)
		}
	}
	refs := map[string][]*yaml.Node{}
	owners := map[string][]*resource{}
	movable := func(rs []resource) {
		for i := range rs {
			r := &rs[i]
			scalars(r.node, count)
			secretRefs(r.node, func(name string, ref *yaml.Node) {
				refs[name] = append(refs[name], ref)
				owners[name] = append(owners[name], r)
			})
		}
	}
	movable(listeners)
	movable(clusters)
	var left []resource
	changed := map[*resource]bool{}
	for _, s := range all {
		if n := len(refs[s.name]); n == 0 || seen[s.name] != n {
			left = append(left, s)
			continue
		}
		if convert != nil {
			if s.served, err = convert(ads.SecretType, s.node); err != nil {
				why = append(why, fmt.Sprintf("secret %s stays static: %v", s.name, err))
				left = append(left, s)
				continue
			}
		}
		moved = append(moved, s)
		for _, ref := range refs[s.name] {
			ref.Content = append(ref.Content, bootyaml.Key("sds_config"), ads.ConfigSource())
		}
		for _, r := range owners[s.name] {
			changed[r] = true
		}
	}
	for r := range changed {
		r.sum = digest(r.node) // once: a listener may name a thousand secrets
	}
	if len(moved) == 0 {
		return nil, why, nil
	}
	if len(left) == 0 {
		bootyaml.Del(static, "secrets")
		return moved, why, nil
	}
	seq := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
	for _, s := range left {
		seq.Content = append(seq.Content, s.node)
	}
	bootyaml.Set(static, "secrets", seq)
	return moved, why, nil
}

// Secrets are the names of the static secrets served over ADS.
func (b *Bootstrap) Secrets() []string { return names(b.secrets) }

// The operator's static secrets (static_resources.secrets), moved out of
// the bootstrap into SDS files of their own that Envoy reads (an SDS
// source with a path_config_source in each reference to them), so that a
// changed certificate, key, trusted CA or session ticket key is a secret
// update: Envoy builds the TLS contexts that use it again, new handshakes
// get the new secret, and no connection is drained or closed. Left static,
// a secret's change would be a change of the bootstrap itself, which only
// a hot restart can take.

package inplace

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/envoy-agent/envoy-agent/internal/bootyaml"
)

const (
	secretType = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret"
	// secretWhat is a secret kind's what.
	secretWhat = "secret"
)

// maxSecretFiles bounds how many static secrets get an SDS file, as
// maxRouteFiles does for route files (each is one of Envoy's inotify
// instances). Secrets are given their share of the watch budget before
// route files: left static, a secret's change needs a hot restart, while
// a connection manager whose routes stay inline changes as a listener.
const maxSecretFiles = 32

// safeSecretName is what a secret's name may hold for the agent to find
// its stats (sds.<name>.*) as it wrote them.
var safeSecretName = regexp.MustCompile(`^[A-Za-z0-9_./-]+$`)

// The one layout of an SDS file the agent writes, whether the secret is
// the operator's (moved out of static_resources, in an epoch's resource
// folder) or made from certificate files (envoy/certs, in the run folder):
// its name, SecretFile, and its text, SecretDocument.

// readableSecretName is a secret's name that SecretFile keeps as it is.
var readableSecretName = regexp.MustCompile(`^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,63}$`)

// SecretFile is the name of the SDS file of the secret name in its folder:
// sds-<name>.yaml, or sds-<a digest of it>.yaml for a name that is not
// made of letters, digits, '_', '-' and '.', or is longer than 64 bytes.
func SecretFile(name string) string {
	if readableSecretName.MatchString(name) {
		return "sds-" + name + ".yaml"
	}
	sum := sha256.Sum256([]byte(name))
	return "sds-" + hex.EncodeToString(sum[:8]) + ".yaml"
}

// SecretDocument is the text of an SDS file: a DiscoveryResponse of the
// one secret (its fields as protobuf's JSON names them; "@type" is set),
// whose version_info is a digest of it. It is JSON, which is YAML:
// encoding/json escapes whatever the secret holds.
func SecretDocument(secret map[string]any) ([]byte, error) {
	secret["@type"] = secretType
	body, err := json.Marshal(secret)
	if err != nil {
		return nil, fmt.Errorf("secret: %w", err)
	}
	sum := sha256.Sum256(body)
	return json.Marshal(struct {
		Version   string            `json:"version_info"`
		Resources []json.RawMessage `json:"resources"`
	}{hex.EncodeToString(sum[:8]), []json.RawMessage{body}})
}

// secretData is the text of the SDS file of one of the operator's secrets (dir as for
// the other files: a secret reads nothing from it).
func secretData(r resource, _ string) ([]byte, error) {
	var secret map[string]any
	if err := r.node.Decode(&secret); err != nil {
		return nil, fmt.Errorf("secret %s: %w", r.name, err)
	}
	return SecretDocument(secret)
}

// secretKind is the SDS file of the secret name and the stats of its
// subscription (sds.<name>.*). Envoy's config_dump keeps no error state
// for a secret: its log says why it rejected one.
func secretKind(name string) kind {
	return kind{file: SecretFile(name), stats: "sds." + name, what: secretWhat}
}

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
// through references by name alone (secretRefs), and points those
// references at the secret's SDS file. A secret stays static when its name
// is a scalar anywhere else (in the rest of the bootstrap, a kept cluster,
// a filter's own secret field, or as another resource's name: keeping one
// too many only means it cannot change in place), when nothing names it,
// when its name has characters outside safeSecretName, or past the first
// budget of them. It changes the listeners' and clusters' nodes and
// digests.
func moveSecrets(rest, static *yaml.Node, listeners, clusters []resource, budget int) ([]resource, error) {
	all, err := resources(static, "secrets")
	if err != nil || len(all) == 0 {
		return nil, err
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
	var moved, left []resource
	for _, s := range all {
		if n := len(refs[s.name]); n == 0 || seen[s.name] != n || len(moved) >= budget || !safeSecretName.MatchString(s.name) {
			left = append(left, s)
			continue
		}
		moved = append(moved, s)
		source := bootyaml.Mapping("path_config_source", bootyaml.Mapping("path", bootyaml.Str(folderToken+"/"+SecretFile(s.name))), "resource_api_version", bootyaml.Str("V3"))
		for _, ref := range refs[s.name] {
			ref.Content = append(ref.Content, bootyaml.Key("sds_config"), source)
		}
		for _, r := range owners[s.name] {
			r.sum = digest(r.node)
		}
	}
	if len(moved) == 0 {
		return nil, nil
	}
	if len(left) == 0 {
		bootyaml.Del(static, "secrets")
		return moved, nil
	}
	seq := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
	for _, s := range left {
		seq.Content = append(seq.Content, s.node)
	}
	bootyaml.Set(static, "secrets", seq)
	return moved, nil
}

// Secrets are the names of the static secrets served from SDS files.
func (b *Bootstrap) Secrets() []string { return names(b.secrets) }

//go:build linux

package certs

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/envoy-agent/envoy-agent/envoy/xds/ads"
	"github.com/envoy-agent/envoy-agent/internal/bootyaml"
)

// Kind is what a secret holds.
type Kind int

const (
	// KindCertificate is a certificate chain and its private key
	// (tls_certificates).
	KindCertificate Kind = iota
	// KindTrustedCA is a validation context's trusted CA bundle.
	KindTrustedCA
)

// Secret is one SDS secret that Rewrite made from files the bootstrap named.
// A live upgrade hands the secrets served over to the new agent (its JSON).
type Secret struct {
	// Name is the secret's name, stable for the same files.
	Name string `json:"name"`
	Kind Kind   `json:"kind"`
	// CertFile and KeyFile are the operator's files of a KindCertificate
	// (absolute paths); CertFile alone is the bundle of a KindTrustedCA.
	CertFile string `json:"cert_file"`
	KeyFile  string `json:"key_file,omitempty"`
}

// Result is what Rewrite did.
type Result struct {
	// Data is the rewritten bootstrap (the input itself when Secrets is
	// empty).
	Data []byte
	// Secrets are the secrets the rewritten bootstrap reads, each once.
	Secrets []Secret
	// Skipped names TLS contexts left as they were, and why (a certificate
	// with a password, say): their files are read once, as Envoy does.
	Skipped []string
}

// Rewrite rewrites the bootstrap data (name is its file name: Envoy picks
// the format by the extension, and only .yaml, .yml and .json are
// rewritten) so that every certificate and trusted CA it names by file is
// a secret read from the agent's ADS server instead (step 1 of the rewrite
// that envoy/inplace draws; Envoy reads such a secret only with a node id
// and cluster, which step 2, inplace.RunningCopy, fills in), and which the
// epoch that runs the copy connects to (inplace.Write, inplace.Runnable).
// A secret that a static cluster's TLS context names (under
// static_resources.clusters), and any secret of a bootstrap with an
// ads_config of its own (the operator's control plane), is read from the
// server on a gRPC stream of its own instead (ads.SecretSource, through
// the server's cluster: Envoy 1.40.0 crashed at its start on a static
// cluster whose secret it reads over ADS, and ADS is the operator's in the
// other case); a bootstrap of the second kind then gets the cluster itself,
// to the server's socket in runDir. Everything else keeps its meaning;
// data without such files comes back unchanged. Relative file names are
// made absolute against the current folder, which Envoy inherits.
func Rewrite(data []byte, name, runDir string) (Result, error) {
	res := Result{Data: data}
	if !bootyaml.Rewritable(name) {
		return res, nil
	}
	// Most bootstraps name no file at all: they are not parsed again (a
	// start and a reload pay nothing for this).
	if !bytes.Contains(data, []byte("filename")) {
		return res, nil
	}
	var doc yaml.Node
	if err := bootyaml.Decode(data, &doc); err != nil {
		return res, fmt.Errorf("parse bootstrap: %w", err)
	}
	edited, err := Edit(&doc, runDir)
	res.Secrets, res.Skipped = edited.Secrets, edited.Skipped
	if err != nil || len(edited.Secrets) == 0 {
		return res, err
	}
	out, err := bootyaml.Encode(&doc, name)
	if err != nil {
		return res, err
	}
	res.Data = out
	return res, nil
}

// Edit is Rewrite on a bootstrap decoded already (doc, a YAML document),
// which it changes in place: the Result's Data is nil, its Secrets and
// Skipped say what it did.
func Edit(doc *yaml.Node, runDir string) (Result, error) {
	var res Result
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		return res, nil
	}
	root := doc.Content[0]
	static := bootyaml.Value(root, "static_resources")
	taken := map[string]bool{}
	for _, c := range bootyaml.Items(bootyaml.Value(static, "clusters")) {
		taken[bootyaml.Text(bootyaml.Value(c, "name"))] = true
	}
	// The cluster's name is the one inplace.Write and inplace.Runnable
	// give the cluster they add: the same operator's clusters are taken.
	clusterName, cluster := ads.Cluster(filepath.Join(runDir, ads.SocketName), func(n string) bool { return taken[n] })
	ownADS := bootyaml.Value(bootyaml.Value(root, "dynamic_resources"), "ads_config") != nil
	r := rewriter{seen: map[string]bool{}, visited: map[*yaml.Node]bool{}, source: func(where string) *yaml.Node {
		if ownADS || inStaticCluster(where) {
			return ads.SecretSource(clusterName)
		}
		return ads.ConfigSource()
	}}
	if err := r.walk(root, ""); err != nil {
		return res, err
	}
	res.Secrets, res.Skipped = r.secrets, r.skipped
	if len(r.secrets) > 0 && ownADS {
		if static == nil || static.Kind != yaml.MappingNode {
			static = bootyaml.Mapping()
			bootyaml.Set(root, "static_resources", static)
		}
		clusters := bootyaml.Value(static, "clusters")
		if clusters == nil || clusters.Kind != yaml.SequenceNode {
			clusters = bootyaml.Seq()
			bootyaml.Set(static, "clusters", clusters)
		}
		clusters.Content = append(clusters.Content, cluster)
	}
	return res, nil
}

type rewriter struct {
	source  func(where string) *yaml.Node // the sds_config of an SDS reference at where
	secrets []Secret
	seen    map[string]bool
	skipped []string
	visited map[*yaml.Node]bool
}

func (r *rewriter) walk(n *yaml.Node, where string) error {
	if n == nil || r.visited[n] {
		return nil
	}
	r.visited[n] = true
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			at := where + "." + k.Value
			if bootyaml.SameField(k.Value, "common_tls_context") && v.Kind == yaml.MappingNode {
				if err := r.context(v, at); err != nil {
					return err
				}
			}
			if err := r.walk(v, at); err != nil {
				return err
			}
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			if err := r.walk(c, fmt.Sprintf("%s[%d]", where, i)); err != nil {
				return err
			}
		}
	}
	return nil
}

// onlyFilename returns the filename of a DataSource that is a file and
// nothing else.
func onlyFilename(n *yaml.Node) (string, bool) {
	if n == nil || n.Kind != yaml.MappingNode || len(n.Content) != 2 || !bootyaml.SameField(n.Content[0].Value, "filename") || n.Content[1].Kind != yaml.ScalarNode || n.Content[1].Value == "" {
		return "", false
	}
	return n.Content[1].Value, true
}

func (r *rewriter) context(ctx *yaml.Node, where string) error {
	if err := r.certificates(ctx, where); err != nil {
		return err
	}
	return r.validation(ctx, where)
}

func (r *rewriter) certificates(ctx *yaml.Node, where string) error {
	list, idx := bootyaml.Value(ctx, "tls_certificates"), bootyaml.Index(ctx, "tls_certificates")
	if list == nil || list.Kind != yaml.SequenceNode || len(list.Content) == 0 {
		return nil
	}
	var refs []*yaml.Node
	for _, c := range list.Content {
		if c.Kind != yaml.MappingNode || len(c.Content) != 4 {
			r.skipped = append(r.skipped, where+".tls_certificates: an entry holds more than certificate_chain and private_key by filename")
			return nil
		}
		chain, ok1 := onlyFilename(bootyaml.Value(c, "certificate_chain"))
		key, ok2 := onlyFilename(bootyaml.Value(c, "private_key"))
		if !ok1 || !ok2 {
			r.skipped = append(r.skipped, where+".tls_certificates: an entry is not certificate_chain and private_key by filename")
			return nil
		}
		chain, key = abs(chain), abs(key)
		s := r.add(KindCertificate, chain, key)
		refs = append(refs, r.ref(s, where))
	}
	// Replace tls_certificates with (or append to) the SDS references.
	ctx.Content = append(ctx.Content[:idx], ctx.Content[idx+2:]...)
	if have := bootyaml.Value(ctx, "tls_certificate_sds_secret_configs"); have != nil && have.Kind == yaml.SequenceNode {
		have.Content = append(have.Content, refs...)
		return nil
	}
	ctx.Content = append(ctx.Content, bootyaml.Key("tls_certificate_sds_secret_configs"), bootyaml.Seq(refs...))
	return nil
}

func (r *rewriter) validation(ctx *yaml.Node, where string) error {
	vc, idx := bootyaml.Value(ctx, "validation_context"), bootyaml.Index(ctx, "validation_context")
	if vc == nil || vc.Kind != yaml.MappingNode {
		return nil
	}
	caIdx := bootyaml.Index(vc, "trusted_ca")
	ca, ok := onlyFilename(bootyaml.Value(vc, "trusted_ca"))
	if !ok {
		return nil
	}
	if bootyaml.Value(vc, "watched_directory") != nil {
		r.skipped = append(r.skipped, where+".validation_context: has a watched_directory of its own")
		return nil
	}
	s := r.add(KindTrustedCA, abs(ca), "")
	ref := r.ref(s, where)
	rest := append(append([]*yaml.Node{}, vc.Content[:caIdx]...), vc.Content[caIdx+2:]...)
	if len(rest) == 0 {
		ctx.Content[idx] = bootyaml.Key("validation_context_sds_secret_config")
		ctx.Content[idx+1] = ref
		return nil
	}
	// Other checks beside the CA: Envoy merges them with the secret.
	vc.Content = rest
	ctx.Content[idx] = bootyaml.Key("combined_validation_context")
	ctx.Content[idx+1] = bootyaml.Mapping("default_validation_context", vc, "validation_context_sds_secret_config", ref)
	return nil
}

func abs(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}

// SecretName is the stable name of the secret for these files.
func SecretName(k Kind, certFile, keyFile string) string {
	h := sha256.Sum256([]byte(certFile + "\x00" + keyFile))
	prefix := "cert-"
	if k == KindTrustedCA {
		prefix = "ca-"
	}
	base := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-' {
			return r
		}
		return '_'
	}, strings.TrimSuffix(filepath.Base(certFile), filepath.Ext(certFile)))
	if len(base) > 40 {
		base = base[:40]
	}
	return prefix + base + "-" + hex.EncodeToString(h[:6])
}

func (r *rewriter) add(k Kind, certFile, keyFile string) Secret {
	name := SecretName(k, certFile, keyFile)
	s := Secret{Name: name, Kind: k, CertFile: certFile, KeyFile: keyFile}
	if !r.seen[name] {
		r.seen[name] = true
		r.secrets = append(r.secrets, s)
	}
	return s
}

// ref is the SDS reference to s, at where.
func (r *rewriter) ref(s Secret, where string) *yaml.Node {
	return bootyaml.Mapping("name", bootyaml.Str(s.Name), "sds_config", r.source(where))
}

// inStaticCluster reports whether where (".static_resources.clusters[2]...",
// the walk's path, in either spelling) is inside a static cluster.
func inStaticCluster(where string) bool {
	parts := strings.SplitN(where, ".", 4)
	return len(parts) >= 3 && bootyaml.SameField(parts[1], "static_resources") && bootyaml.SameField(strings.SplitN(parts[2], "[", 2)[0], "clusters")
}

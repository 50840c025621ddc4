// Step 4 of the rewrite (doc.go): the files of an epoch's resource folder,
// which Envoy reads (path_config_source) and a reload writes again, and the
// bootstrap it runs, wired to the agent's ADS server.

package inplace

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"go.yaml.in/yaml/v3"

	"github.com/envoy-agent/envoy-agent/envoy/xds/ads"
	"github.com/envoy-agent/envoy-agent/internal/bootyaml"
)

// The files of one epoch's resource folder.
const (
	ldsFile       = "lds.yaml"
	cdsFile       = "cds.yaml"
	bootstrapFile = "bootstrap.yaml"

	listenerType = "type.googleapis.com/envoy.config.listener.v3.Listener"
	clusterType  = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
)

// Wire is where an epoch's Envoy reads its route configurations and
// secrets: the agent's ADS server (its socket) and the epoch's name there
// (the :authority of its stream, envoy/xds).
type Wire struct {
	Socket, Epoch string
}

// Write puts b's resource files and the bootstrap to run, reading its
// routes and secrets over ADS as wire says, into dir (made 0700 if
// missing), and returns that bootstrap's path. Every file is private: a
// bootstrap may hold secrets. The route configurations and secrets
// themselves are the caller's to give the server (Served).
func Write(dir string, b *Bootstrap, wire Wire) (string, error) {
	if !filepath.IsAbs(dir) {
		return "", fmt.Errorf("resource folder %q: not an absolute path", dir)
	}
	if !b.converted() {
		return "", errors.New("resource files: the bootstrap was parsed without converting its routes and secrets")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("resource folder: %w", err)
	}
	// The bootstrap last: what it reads is there before it.
	for _, f := range []struct {
		name string
		data func() ([]byte, error)
	}{
		{ldsFile, func() ([]byte, error) { return b.ldsData(wire.Epoch) }},
		{cdsFile, func() ([]byte, error) { return b.cdsData(wire.Epoch) }},
		{bootstrapFile, func() ([]byte, error) { return b.bootstrapData(dir, wire) }},
	} {
		data, err := f.data()
		if err == nil {
			err = replace(dir, f.name, data)
		}
		if err != nil {
			return "", err
		}
	}
	return filepath.Join(dir, bootstrapFile), nil
}

// converted reports that b's route configurations and secrets were
// converted for ADS (Parse with a convert).
func (b *Bootstrap) converted() bool {
	for _, rs := range [][]resource{b.routes, b.secrets} {
		for _, r := range rs {
			if r.served.Name == "" {
				return false
			}
		}
	}
	return true
}

// bootstrapData is the text of the bootstrap Envoy runs: the rest, with
// dynamic_resources reading the listener and cluster files in dir and the
// route configurations and secrets over ADS (wire). The node it needs is
// the running copy's (RunningCopy).
func (b *Bootstrap) bootstrapData(dir string, wire Wire) ([]byte, error) {
	root := withEpoch(bootyaml.Shallow(b.rest), wire.Epoch)
	taken := map[string]bool{}
	for _, c := range b.clusters {
		taken[c.name] = true
	}
	for _, name := range b.kept {
		taken[name] = true
	}
	p, err := ads.Bootstrap(wire.Socket, wire.Epoch, func(name string) bool { return taken[name] })
	if err != nil {
		return nil, err
	}
	static := bootyaml.Value(root, "static_resources")
	if static == nil {
		static = bootyaml.Mapping()
		bootyaml.Set(root, "static_resources", static)
	} else {
		static = bootyaml.Shallow(static)
		bootyaml.Set(root, "static_resources", static)
	}
	addCluster(static, p.Cluster)
	bootyaml.Set(root, "dynamic_resources", bootyaml.Mapping(
		"lds_config", pathSource(filepath.Join(dir, ldsFile)),
		"cds_config", pathSource(filepath.Join(dir, cdsFile)),
		"ads_config", p.ADSConfig))
	return bootyaml.Encode(root, bootstrapFile)
}

// addCluster appends cluster to static's clusters, a copy of them.
func addCluster(static, cluster *yaml.Node) {
	seq := bootyaml.Seq()
	if have := bootyaml.Value(static, "clusters"); have != nil && have.Kind == yaml.SequenceNode {
		seq.Content = append(seq.Content, have.Content...)
	}
	seq.Content = append(seq.Content, cluster)
	bootyaml.Set(static, "clusters", seq)
}

// pathSource is a config source that reads the file path.
func pathSource(path string) *yaml.Node {
	return bootyaml.Mapping("path_config_source", bootyaml.Mapping("path", bootyaml.Str(path)), "resource_api_version", bootyaml.Str("V3"))
}

// ldsData is the text of the LDS file of b's listeners, for the epoch.
func (b *Bootstrap) ldsData(epoch string) ([]byte, error) {
	return resourceData(listenerType, b.listeners, epoch)
}

// cdsData is the text of the CDS file of b's dynamic clusters, for the
// epoch.
func (b *Bootstrap) cdsData(epoch string) ([]byte, error) {
	return resourceData(clusterType, b.clusters, epoch)
}

// resourceData is the text of a resource file for the epoch: a
// DiscoveryResponse of rs, typed typ, whose version is a digest of the
// resources, with the epoch's name in place of ads.EpochToken (withEpoch).
func resourceData(typ string, rs []resource, epoch string) ([]byte, error) {
	h := sha256.New()
	seq := bootyaml.Seq()
	for _, r := range rs {
		h.Write(r.sum[:])
		n := withEpoch(r.node, epoch)
		if bootyaml.Value(n, "@type") == nil {
			n = bootyaml.Shallow(n)
			n.Content = append([]*yaml.Node{bootyaml.Str("@type"), bootyaml.Str(typ)}, n.Content...) // "@type" must be quoted
		}
		seq.Content = append(seq.Content, n)
	}
	version := hex.EncodeToString(h.Sum(nil))[:16]
	return bootyaml.Encode(bootyaml.Mapping("version_info", bootyaml.Str(version), "resources", seq), ldsFile)
}

// withEpoch is n with the epoch's name in place of each scalar
// ads.EpochToken (a secret a cluster reads on a gRPC stream of its own names
// the epoch: envoy/certs); the nodes on the way to one are copies, the
// others n's own (n itself when none holds it). The resources' digests,
// which two bootstraps compare, keep the token: the same resource of two
// epochs compares equal.
func withEpoch(n *yaml.Node, epoch string) *yaml.Node {
	if n.Kind == yaml.ScalarNode {
		if n.Value == ads.EpochToken {
			c := *n
			c.Value = epoch
			return &c
		}
		return n
	}
	var c *yaml.Node
	for i, child := range n.Content {
		if in := withEpoch(child, epoch); in != child {
			if c == nil {
				c = bootyaml.Shallow(n)
			}
			c.Content[i] = in
		}
	}
	if c == nil {
		return n
	}
	return c
}

// replace writes data to dir/name by a rename into place (Envoy reads a
// path_config_source again when a file is moved onto it).
func replace(dir, name string, data []byte) error {
	f, err := os.CreateTemp(dir, "."+name+"-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	defer os.Remove(f.Name())
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), filepath.Join(dir, name))
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	return nil
}

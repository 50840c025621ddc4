// Step 4 of the rewrite (doc.go): the files of an epoch's resource folder,
// which Envoy reads (path_config_source) and a reload writes again.

package inplace

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/envoy-agent/envoy-agent/internal/bootyaml"
)

// The files of one epoch's resource folder.
const (
	ldsFile       = "lds.yaml"
	cdsFile       = "cds.yaml"
	bootstrapFile = "bootstrap.yaml"

	listenerType = "type.googleapis.com/envoy.config.listener.v3.Listener"
	clusterType  = "type.googleapis.com/envoy.config.cluster.v3.Cluster"

	// folderToken stands for the resource folder in the RDS and SDS sources
	// of the moved resources until a file of them is written (inFolder), so
	// that comparing two bootstraps does not depend on the folder they run
	// from.
	folderToken = "@envoy-agent-resource-folder@"
)

// Write puts b's resource files and the bootstrap to run into dir (made
// 0700 if missing) and returns that bootstrap's path. Every file is
// private: a bootstrap may hold secrets.
func Write(dir string, b *Bootstrap) (string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("resource folder: %w", err)
	}
	type file struct {
		name string
		data func() ([]byte, error)
	}
	var files []file
	for _, r := range b.secrets {
		files = append(files, file{SecretFile(r.name), func() ([]byte, error) { return secretData(r, dir) }})
	}
	for _, r := range b.routes {
		files = append(files, file{routeFile(r.name), func() ([]byte, error) { return routeData(r, dir) }})
	}
	// The bootstrap last: what it reads is there before it.
	files = append(files,
		file{ldsFile, func() ([]byte, error) { return b.ldsData(dir) }},
		file{cdsFile, func() ([]byte, error) { return b.cdsData(dir) }},
		file{bootstrapFile, func() ([]byte, error) { return b.bootstrapData(dir) }})
	for _, f := range files {
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

// bootstrapData is the text of the bootstrap Envoy runs: the rest, with dynamic_resources
// reading the listener and cluster files in dir. The node it needs is the
// running copy's (RunningCopy).
func (b *Bootstrap) bootstrapData(dir string) ([]byte, error) {
	root := bootyaml.Shallow(b.rest)
	bootyaml.Set(root, "dynamic_resources", bootyaml.Mapping("lds_config", pathSource(filepath.Join(dir, ldsFile)), "cds_config", pathSource(filepath.Join(dir, cdsFile))))
	return bootyaml.Encode(root, bootstrapFile)
}

// pathSource is a config source that reads the file path.
func pathSource(path string) *yaml.Node {
	return bootyaml.Mapping("path_config_source", bootyaml.Mapping("path", bootyaml.Str(path)), "resource_api_version", bootyaml.Str("V3"))
}

// ldsData is the text of the LDS file of b's listeners, whose RDS and SDS sources
// read from the resource folder dir.
func (b *Bootstrap) ldsData(dir string) ([]byte, error) {
	return resourceData(listenerType, b.listeners, dir)
}

// cdsData is the text of the CDS file of b's dynamic clusters, whose SDS sources
// read from the resource folder dir.
func (b *Bootstrap) cdsData(dir string) ([]byte, error) {
	return resourceData(clusterType, b.clusters, dir)
}

// resourceData is the text of a resource file: a DiscoveryResponse of rs, typed typ, whose version is a
// digest of the resources, with the resource folder dir in the RDS and SDS
// sources that read from it (inFolder).
func resourceData(typ string, rs []resource, dir string) ([]byte, error) {
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("resource folder %q: not an absolute path", dir)
	}
	h := sha256.New()
	seq := bootyaml.Seq()
	for _, r := range rs {
		h.Write(r.sum[:])
		n := inFolder(r.node, dir)
		if bootyaml.Value(n, "@type") == nil {
			n = bootyaml.Shallow(n)
			n.Content = append([]*yaml.Node{bootyaml.Str("@type"), bootyaml.Str(typ)}, n.Content...) // "@type" must be quoted
		}
		seq.Content = append(seq.Content, n)
	}
	version := hex.EncodeToString(h.Sum(nil))[:16]
	return bootyaml.Encode(bootyaml.Mapping("version_info", bootyaml.Str(version), "resources", seq), ldsFile)
}

// inFolder is n with the resource folder dir in place of folderToken in
// each path that starts with it; the nodes on the way to one are copies, the
// others n's own (n itself when none holds the token).
func inFolder(n *yaml.Node, dir string) *yaml.Node {
	if n.Kind == yaml.ScalarNode {
		if rest, ok := strings.CutPrefix(n.Value, folderToken); ok {
			c := *n
			c.Value = dir + rest
			return &c
		}
		return n
	}
	var c *yaml.Node
	for i, child := range n.Content {
		if in := inFolder(child, dir); in != child {
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

//go:build linux

package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/envoy-agent/envoy-agent/internal/filetrust"
)

// The agent runs Envoy (as root outside the units, as the service's user
// under them) with this file, the bootstrap and the binary: whoever else
// can write one of them, or replace it through a folder on its way, runs
// code as that user. They are refused; the files the bootstrap names for
// Envoy to read (certificates, keys, Lua, runtime layers) are warned about.

// trustedUID is the agent's own user, trusted beside root.
func trustedUID() int { return os.Geteuid() }

// maxTrustWarnings caps the warnings about the bootstrap's files.
const maxTrustWarnings = 10

// checkWriters adds a problem for each of the agent's own files that a
// user other than root and the agent's own can change, or that the check
// cannot walk as the kernel would (any error refuses: a path it cannot
// judge is not one to run), and a warning for each file the bootstrap
// names that such a user can change. fileTrust is the judgement of this
// file, made as it was read.
func (c *Config) checkWriters(ps *problems, doc *yaml.Node, fileTrust error) {
	trusted := filetrust.Default()
	for _, f := range []struct {
		key, what, path string
		err             error
	}{
		{"", "this configuration file", c.File, fileTrust},
		{"envoy.binary_path", "the Envoy binary", c.Envoy.BinaryPath, judge(trusted, c.Envoy.BinaryPath)},
		{"envoy.config_path", "the Envoy bootstrap", c.Envoy.ConfigPath, judge(trusted, c.Envoy.ConfigPath)},
	} {
		switch {
		case f.path == "" || f.err == nil:
		case filetrust.IsUntrusted(f.err):
			ps.add(f.key, "%v: refused, %s must be writable by root and the agent's user (uid %d) only: whoever else can change it runs code as this agent's user, or changes what Envoy serves; fix the owner and mode of the file and of every folder on its way", f.err, f.what, trustedUID())
		default:
			ps.add(f.key, "%v: refused, %s cannot be judged as the kernel would open it, so nothing says who else can change it; name it by a path of folders and links that root and the agent's user own", f.err, f.what)
		}
	}
	if doc == nil {
		return
	}
	files := bootstrapFiles(doc)
	if c.keepStart {
		c.startFiles = files // judged once Envoy is exec'd (BootstrapFileWarnings)
		return
	}
	c.warnings = append(c.warnings, c.judgeBootstrapFiles(trusted, files)...)
}

// BootstrapFileWarnings are the warnings about the files the bootstrap
// names that a start's configuration (LoadStartConfig) leaves out of
// Warnings: a start judges them once Envoy is exec'd, off its way to
// READY=1 (2,000 files, 20 ms of a start at 1,000 certificates). Called
// once; nil after, and for another Config.
func (c *Config) BootstrapFileWarnings() []string {
	files := c.startFiles
	c.startFiles = nil
	if len(files) == 0 {
		return nil
	}
	return c.judgeBootstrapFiles(filetrust.Default(), files)
}

// judgeBootstrapFiles is a warning for each of files, those the bootstrap
// names, that a user other than root and the agent's own can change.
func (c *Config) judgeBootstrapFiles(trusted *filetrust.Trusted, files []bootstrapFile) []string {
	paths := make([]string, len(files))
	for i, f := range files {
		paths[i] = f.path
	}
	errs := trusted.CheckEach(paths)
	var warnings []string
	n := 0
	for i, f := range files {
		err := missingIsNoProblem(errs[i], f.path)
		if err == nil {
			continue
		}
		if n++; n > maxTrustWarnings {
			warnings = append(warnings, fmt.Sprintf("%s names %d more files that others can change (not listed)", c.Envoy.ConfigPath, len(files)-maxTrustWarnings))
			break
		}
		if !filetrust.IsUntrusted(err) {
			warnings = append(warnings, fmt.Sprintf("%v: the bootstrap %s names it (%s) for Envoy to read, and who else can change it cannot be judged as the kernel would open it", err, c.Envoy.ConfigPath, f.key))
			continue
		}
		warnings = append(warnings, fmt.Sprintf("%v: the bootstrap %s names it (%s) for Envoy to read; whoever else can change it changes what Envoy serves (a key, a certificate, Lua code, a runtime value); make it, and every folder on its way, writable by root and the agent's user only", err, c.Envoy.ConfigPath, f.key))
	}
	return warnings
}

// judge is trusted.Check(path), except for a path that neither the check
// nor the kernel finds: the checks of the binary and the bootstrap say it
// is missing, and Envoy says so of the files a bootstrap names.
func judge(trusted *filetrust.Trusted, path string) error {
	return missingIsNoProblem(trusted.Check(path), path)
}

// missingIsNoProblem is err, the check of path, or nil when neither the
// check nor the kernel finds path.
func missingIsNoProblem(err error, path string) error {
	if errors.Is(err, fs.ErrNotExist) {
		if _, serr := os.Stat(path); errors.Is(serr, fs.ErrNotExist) {
			return nil
		}
	}
	return err
}

// bootstrapFile is a file the bootstrap names for Envoy to read.
type bootstrapFile struct {
	key  string // where: "static_resources.clusters.0...filename"
	path string
}

// fileKeys are the bootstrap fields that name a file Envoy reads: a
// DataSource's filename (certificates, keys, Lua code), a runtime layer's
// symlink_root, and the path of a file-based xDS source or watched folder.
var fileKeys = map[string]bool{"filename": true, "symlink_root": true}

// pathParents are the messages whose "path" names a file Envoy reads.
var pathParents = map[string]bool{"path_config_source": true, "watched_directory": true}

// bootstrapFiles lists the absolute file names the decoded bootstrap doc
// names for Envoy to read, each once, in the order it names them.
func bootstrapFiles(doc *yaml.Node) []bootstrapFile {
	seen := map[string]bool{}
	var out []bootstrapFile
	var walk func(n *yaml.Node, key string)
	walk = func(n *yaml.Node, key string) {
		last := key[strings.LastIndex(key, ".")+1:]
		switch n.Kind {
		case yaml.DocumentNode:
			for _, c := range n.Content {
				walk(c, key)
			}
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i].Value, n.Content[i+1]
				child := k
				if key != "" {
					child = key + "." + k
				}
				if v.Kind == yaml.ScalarNode && strings.HasPrefix(v.Value, "/") &&
					(fileKeys[k] || (k == "path" && (pathParents[last] || strings.HasSuffix(last, "_config")))) {
					if !seen[v.Value] {
						seen[v.Value] = true
						out = append(out, bootstrapFile{key: child, path: v.Value})
					}
					continue
				}
				walk(v, child)
			}
		case yaml.SequenceNode:
			for i, e := range n.Content {
				walk(e, fmt.Sprintf("%s.%d", key, i))
			}
		}
	}
	walk(doc, "")
	return out
}

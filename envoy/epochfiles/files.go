//go:build linux

package epochfiles

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"

	"go.yaml.in/yaml/v3"

	"github.com/envoy-agent/envoy-agent/envoy/inplace"
	"github.com/envoy-agent/envoy-agent/envoy/xds"
	"github.com/envoy-agent/envoy-agent/envoy/xds/ads"
	"github.com/envoy-agent/envoy-agent/internal/bootyaml"
	"github.com/envoy-agent/envoy-agent/internal/safefile"
)

// Files are the files one epoch runs from, and its name on the agent's ADS
// server.
type Files struct {
	// Copy is the epoch's copy of the operator's bootstrap: what it runs,
	// or what its resource files were made from. It is what a failed hot
	// restart restores and what the next reload compares with.
	Copy string
	// Resources is the folder, beside Copy, of the bootstrap Envoy runs
	// and its resource files; "" when the epoch runs Copy as it is (or
	// wired to the ADS server only, from the same folder).
	Resources string
	// Epoch is the epoch's name on the ADS server (EpochName); "" when its
	// Envoy reads nothing from it.
	Epoch  string
	server ads.Server
	layout atomic.Pointer[inplace.Bootstrap] // Copy parsed, once written or changed in place (nil: parse it)
}

// resourceDir is the folder of an epoch's resource files, beside its
// bootstrap copy (so a leftover of it goes with the copy: epoch-*-*).
func resourceDir(copy string) string { return copy + ".d" }

// ForEpoch returns the files of an epoch that runs c, a copy of the
// operator's file original, its routes and secrets served by server (nil:
// none; the epoch runs the copy as it is). With resources, it writes the
// bootstrap Envoy runs and its listener and cluster files (envoy/inplace)
// into a folder of the epoch's own, so that no two epochs share a file a
// reload rewrites, and sets the epoch's route configurations and secrets
// on the server; run is the bootstrap Envoy then runs. It takes the copy
// as its rewrite decoded it, or reads it. When the bootstrap cannot be
// rewritten so, the epoch runs the copy as it is, wired to the server when
// it reads secrets from it (inplace.Runnable), and why says why.
func ForEpoch(c *Copy, original string, resources bool, server ads.Server) (f *Files, run string, why error) {
	copy := c.Path
	f = &Files{Copy: copy, server: server}
	if server == nil {
		if resources {
			why = errors.New("no ADS server serves its routes and secrets")
		}
		return f, copy, why
	}
	epoch := EpochName(copy)
	wire := inplace.Wire{Socket: server.Path(), Epoch: epoch}
	dir := resourceDir(copy)
	if resources {
		if run, why = f.split(c, original, dir, wire); why == nil {
			return f, run, nil
		}
	}
	data, err := safefile.ReadRegular(copy, MaxBootstrapSize)
	if err != nil {
		return f, copy, errors.Join(why, err)
	}
	out, err := inplace.Runnable(data, original, wire)
	switch {
	case err == nil && out == nil:
		return f, copy, why
	case err == nil:
		err = os.MkdirAll(dir, 0o700)
	}
	if err == nil {
		run = filepath.Join(dir, filepath.Base(original))
		err = safefile.CreatePrivate(run, out)
	}
	if err != nil {
		_ = os.RemoveAll(dir)
		return f, copy, errors.Join(why, fmt.Errorf("wire it to the agent's ADS server: %w", err))
	}
	f.Epoch = epoch
	return f, run, why
}

// split is ForEpoch's resource files: the copy c parsed, written into dir
// and its routes and secrets set on the server, for the epoch wire names.
// It returns the bootstrap to run.
func (f *Files) split(c *Copy, original, dir string, wire inplace.Wire) (string, error) {
	doc, err := copyTree(c, original)
	if err != nil {
		return "", err
	}
	if !inplace.HasNode(bootyaml.Root(doc)) {
		return "", errNoNode
	}
	b, err := inplace.ParseTree(original, doc, xds.Convert)
	if err != nil {
		return "", err
	}
	run, err := inplace.Write(dir, b, wire)
	if err == nil {
		err = f.set(wire.Epoch, b)
	}
	if err != nil {
		_ = os.RemoveAll(dir)
		return "", err
	}
	f.Resources, f.Epoch = dir, wire.Epoch
	f.layout.Store(b)
	return run, nil
}

// parseCopy parses the copy c of the operator's file original
// (inplace.ParseTree of copyTree).
func parseCopy(c *Copy, original string, convert ads.Convert) (*inplace.Bootstrap, error) {
	doc, err := copyTree(c, original)
	if err != nil {
		return nil, err
	}
	return inplace.ParseTree(original, doc, convert)
}

// copyTree is the copy c of the operator's file original, decoded: the
// tree its rewrite decoded, taken, or the file read and decoded
// (inplace.Decode, whose errors say why it runs as it is).
func copyTree(c *Copy, original string) (*yaml.Node, error) {
	if doc := c.take(); doc != nil {
		return doc, nil
	}
	data, err := safefile.ReadRegular(c.Path, MaxBootstrapSize)
	if err != nil {
		return nil, fmt.Errorf("read envoy bootstrap: %w", err)
	}
	return inplace.Decode(original, data)
}

// set sets b's route configurations and secrets as the epoch's on the
// server.
func (f *Files) set(epoch string, b *inplace.Bootstrap) error {
	for _, t := range []ads.Type{ads.RouteType, ads.SecretType} {
		if err := f.server.Set(epoch, t, b.Served(t)); err != nil {
			return err
		}
	}
	return nil
}

// Adopted returns the files of an epoch that a previous agent started (a
// live upgrade) from copy: its resource folder, when it has one, is the
// one beside copy. When the bootstrap it runs reads from the ADS server as
// the epoch copy names, the copy is parsed again and its route
// configurations and secrets are set on server (the same content has the
// same versions: Envoy, reconnecting, changes nothing). An epoch an agent
// of before the server started reads files, and nothing from the server.
func Adopted(copy, original string, server ads.Server) (*Files, error) {
	f := &Files{Copy: copy, server: server}
	dir := resourceDir(copy)
	if fi, err := os.Lstat(filepath.Join(dir, "lds.yaml")); err == nil && fi.Mode().IsRegular() {
		f.Resources = dir // it ran with resource files
	}
	epoch := EpochName(copy)
	if server == nil || !readsFrom(dir, epoch) {
		return f, nil
	}
	f.Epoch = epoch
	if f.Resources == "" {
		return f, nil // the certificates' secrets alone: every epoch's
	}
	b, err := parseCopy(&Copy{Path: copy}, original, xds.Convert)
	if err != nil {
		return f, err
	}
	f.layout.Store(b)
	return f, f.set(epoch, b)
}

// ReadsSecretFiles reports whether the epoch runs secrets from files of
// the run folder (sds-*.yaml), as the epochs of an agent before the ADS
// server did: this agent neither writes nor renews them.
func (f *Files) ReadsSecretFiles() bool {
	if f.Epoch != "" {
		return false
	}
	data, err := safefile.ReadRegular(f.Copy, MaxBootstrapSize)
	if err != nil {
		return false
	}
	var doc yaml.Node
	return bootyaml.Decode(data, &doc) == nil && hasSecretFile(&doc, filepath.Dir(f.Copy))
}

// hasSecretFile reports whether a path_config_source under n reads an SDS
// file of dir.
func hasSecretFile(n *yaml.Node, dir string) bool {
	if n.Kind == yaml.MappingNode {
		if p := bootyaml.Text(bootyaml.Value(bootyaml.Value(n, "path_config_source"), "path")); filepath.Dir(p) == dir && strings.HasPrefix(filepath.Base(p), "sds-") {
			return true
		}
	}
	for _, c := range n.Content {
		if hasSecretFile(c, dir) {
			return true
		}
	}
	return false
}

// readsFrom reports whether a bootstrap in dir (what the epoch runs) has an
// xDS source whose authority is epoch: it reads from the agent's server.
func readsFrom(dir, epoch string) bool {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range entries {
		if !e.Type().IsRegular() || e.Name() == "lds.yaml" || e.Name() == "cds.yaml" {
			continue
		}
		data, err := safefile.ReadRegular(filepath.Join(dir, e.Name()), MaxBootstrapSize)
		if err != nil {
			continue
		}
		var doc yaml.Node
		if bootyaml.Decode(data, &doc) == nil && names(&doc, "authority", epoch) {
			return true
		}
	}
	return false
}

// names reports whether a mapping under n has key with the scalar value.
func names(n *yaml.Node, key, value string) bool {
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == key && n.Content[i+1].Value == value {
				return true
			}
		}
	}
	for _, c := range n.Content {
		if names(c, key, value) {
			return true
		}
	}
	return false
}

// Named are the names the agent gave the epoch's listeners that the
// operator left unnamed (inplace.Bootstrap.Named); none when the epoch runs
// its copy as it is.
func (f *Files) Named() []inplace.NamedListener {
	if b := f.layout.Load(); b != nil {
		return b.Named()
	}
	return nil
}

// Inline says which route configurations and secrets stay in the
// bootstrap, and why (inplace.Bootstrap.Inline).
func (f *Files) Inline() []string {
	if b := f.layout.Load(); b != nil {
		return b.Inline()
	}
	return nil
}

// Remove removes the files and forgets the epoch on the ADS server: the
// epoch has ended, or never started.
func (f *Files) Remove() {
	_ = os.Remove(f.Copy)
	_ = os.RemoveAll(resourceDir(f.Copy))
	if f.Epoch != "" {
		f.server.Forget(f.Epoch)
	}
}

// running is the epoch as envoy/inplace changes and checks it.
func (f *Files) running(admin inplace.Admin) inplace.Running {
	r := inplace.Running{Dir: f.Resources, Admin: admin, Epoch: f.Epoch}
	if f.Epoch != "" {
		r.ADS = f.server
	}
	return r
}

// Accepted checks, for an epoch that runs from resource files or reads
// from the ADS server, that Envoy took every listener, cluster, route
// configuration and secret (Envoy reports LIVE without one it rejected);
// nil for an epoch that runs its copy as it is.
func (f *Files) Accepted(ctx context.Context, admin inplace.Admin) error {
	if f.Resources == "" && f.Epoch == "" {
		return nil
	}
	return inplace.Accepted(ctx, f.running(admin))
}

// ErrNoResourceFiles says that the serving epoch runs its bootstrap as it
// is: it cannot change in place.
var ErrNoResourceFiles = errors.New("the serving Envoy runs its bootstrap as it is (not from resource files)")

// Plan is a change of an epoch's listeners, routes, clusters and secrets,
// nothing else, that the epoch can take in place (Files.Plan,
// Plan.Validate, Plan.Apply).
type Plan struct {
	// Change is what changes: the one comparison of the two bootstraps.
	Change   inplace.Change
	files    *Files
	old, new *inplace.Bootstrap
	copied   string
	whole    *yaml.Node // the new copy decoded, whole: what Validate, once, cuts down (inplace.Subset); nil for a plan made without one
}

// Validate has validate (Envoy's --mode validate) check the change before
// Apply makes it: with the path of a bootstrap, private and beside the
// copy for as long as validate runs, that holds the new bootstrap but for
// the listeners, clusters and secrets the change neither touches nor
// needs (inplace.Subset); with the copy's own path for a plan made
// without one.
func (p *Plan) Validate(validate func(bootstrap string) error) error {
	if p.whole == nil {
		return validate(p.copied)
	}
	check, err := bootyaml.Encode(inplace.Subset(p.whole, p.new, p.Change), p.copied)
	if err != nil {
		return err
	}
	epoch := EpochName(p.copied)
	path := filepath.Join(filepath.Dir(p.copied), epoch+"-check-"+strings.TrimPrefix(filepath.Base(p.copied), epoch+"-"))
	if err := safefile.CreatePrivate(path, check); err != nil {
		return fmt.Errorf("write the bootstrap to validate: %w", err)
	}
	defer os.Remove(path)
	return validate(path)
}

// Plan compares c, a bootstrap copy of the operator's file original
// (Copier.Checked), with the epoch's bootstrap. It returns the plan when
// only listeners, routes, clusters and secrets change; otherwise an error
// says why not: ErrNoResourceFiles, an *inplace.NotRewritableError or an
// *inplace.RestartError. It takes the copy's decoded tree (Copy.take);
// the copy's file stays the caller's until Plan.Apply.
func (f *Files) Plan(c *Copy, original string) (*Plan, error) {
	if f.Resources == "" || f.Epoch == "" {
		return nil, ErrNoResourceFiles
	}
	old, err := f.serving(original)
	if err != nil {
		return nil, err
	}
	doc, err := copyTree(c, original)
	if err != nil {
		return nil, err
	}
	whole := bootyaml.Clone(doc) // Parse takes doc apart; the subset to validate is cut from this
	b, err := inplace.ParseTree(original, doc, old.Reusing(xds.Convert))
	if err != nil {
		return nil, err
	}
	ch, err := inplace.Compare(old, b)
	if err != nil {
		return nil, err
	}
	return &Plan{Change: ch, files: f, old: old, new: b, copied: c.Path, whole: whole}, nil
}

// serving is the epoch's layout: parsed when the epoch started or at its
// last change in place, else parsed now from its copy of the operator's
// file original.
func (f *Files) serving(original string) (*inplace.Bootstrap, error) {
	if old := f.layout.Load(); old != nil {
		return old, nil
	}
	return parseCopy(&Copy{Path: f.Copy}, original, xds.Convert)
}

// Diff says which listeners, routes, clusters and secrets differ from the
// epoch's bootstrap to copied (a copy of the operator's file original),
// whatever else differs and whether the epoch runs from resource files: a
// dry run's account of a reload that cannot be made in place. An error
// says why the bootstraps cannot be compared (an
// *inplace.NotRewritableError for one the agent does not split).
func (f *Files) Diff(copied, original string) (inplace.Change, error) {
	old, err := f.serving(original)
	if err != nil {
		return inplace.Change{}, err
	}
	b, err := parseCopy(&Copy{Path: copied}, original, old.Reusing(xds.Convert))
	if err != nil {
		return inplace.Change{}, err
	}
	return inplace.Diff(old, b), nil
}

// errNoNode is a copy whose node the rewrite left empty (inplace.Edits'
// UserAgents): Envoy reads resources from files and over ADS only with
// node.id and node.cluster.
var errNoNode = errors.New("it sets no node.id and node.cluster, which Envoy needs to read resources from files, and the agent fills in none because its HTTP connection managers set add_user_agent, which would send them upstream; set node.id and node.cluster in the bootstrap to reload in place")

// ErrPlanStale refuses a plan made for other files than the ones it is
// applied to: the serving epoch changed since the reload was planned.
var ErrPlanStale = errors.New("the serving epoch changed since the reload was planned")

// Apply changes the Envoy that runs f as the plan says (inplace.Apply):
// nil once Envoy accepted every resource, and the plan's bootstrap copy is
// then f's Copy (what a failed hot restart later restores). When Envoy
// rejects a resource, the previous ones are put back and the error is an
// *inplace.RejectedError with Envoy's reason; a plan made for other files
// is refused with ErrPlanStale. The copy is removed on any error.
func (p *Plan) Apply(ctx context.Context, f *Files, admin inplace.Admin) error {
	if f != p.files {
		_ = os.Remove(p.copied)
		return ErrPlanStale
	}
	if err := inplace.Apply(ctx, f.running(admin), p.old, p.new, p.Change); err != nil {
		_ = os.Remove(p.copied)
		return err
	}
	if err := os.Rename(p.copied, f.Copy); err != nil {
		f.layout.Store(nil) // the copy on disk is the old one: parse it again
		return fmt.Errorf("keep the new bootstrap copy: %w", err)
	}
	f.layout.Store(p.new)
	return nil
}

//go:build linux

package epochfiles

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"

	"github.com/envoy-agent/envoy-agent/envoy/inplace"
	"github.com/envoy-agent/envoy-agent/internal/safefile"
)

// Files are the files one epoch runs from.
type Files struct {
	// Copy is the epoch's copy of the operator's bootstrap: what it runs,
	// or what its resource files were made from. It is what a failed hot
	// restart restores and what the next reload compares with.
	Copy string
	// Resources is the folder, beside Copy, of the bootstrap Envoy runs
	// and its resource files; "" when the epoch runs Copy as it is.
	Resources string
	layout    atomic.Pointer[inplace.Bootstrap] // Copy parsed, once written or changed in place (nil: parse it)
}

// resourceDir is the folder of an epoch's resource files, beside its
// bootstrap copy (so a leftover of it goes with the copy: epoch-*-*).
func resourceDir(copy string) string { return copy + ".d" }

// ForEpoch returns the files of an epoch that runs copy, a copy of the
// operator's file original. With resources, it writes the bootstrap Envoy
// runs and its resource files (envoy/inplace) into a folder of the epoch's
// own, so that no two epochs share a file a reload rewrites; run is the
// bootstrap Envoy then runs. When the bootstrap cannot be rewritten, the
// epoch runs copy as it is (run is copy) and why says why.
func ForEpoch(copy, original string, resources bool) (f *Files, run string, why error) {
	f = &Files{Copy: copy}
	if !resources {
		return f, copy, nil
	}
	data, err := safefile.ReadRegular(copy, MaxBootstrapSize)
	var b *inplace.Bootstrap
	if err == nil {
		b, err = inplace.Parse(original, data)
	}
	if err == nil {
		dir := resourceDir(copy)
		if run, err = inplace.Write(dir, b); err != nil {
			_ = os.RemoveAll(dir)
		}
	}
	if err != nil {
		return f, copy, err
	}
	f.Resources = resourceDir(copy)
	f.layout.Store(b)
	return f, run, nil
}

// Adopted returns the files of an epoch that a previous agent started (a
// live upgrade) from copy: its resource folder, when it has one, is the
// one beside copy.
func Adopted(copy string) *Files {
	f := &Files{Copy: copy}
	if fi, err := os.Lstat(resourceDir(copy)); err == nil && fi.IsDir() {
		f.Resources = resourceDir(copy) // it ran with resource files
	}
	return f
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

// Remove removes the files: the epoch has ended, or never started.
func (f *Files) Remove() {
	_ = os.Remove(f.Copy)
	if f.Resources != "" {
		_ = os.RemoveAll(f.Resources)
	}
}

// Accepted checks, for an epoch that runs from resource files, that Envoy
// took every listener and cluster in them (Envoy reports LIVE without one
// it rejected); nil for an epoch that runs its copy as it is.
func (f *Files) Accepted(ctx context.Context, admin inplace.Admin) error {
	if f.Resources == "" {
		return nil
	}
	return inplace.Accepted(ctx, f.Resources, admin)
}

// ErrNoResourceFiles says that the serving epoch runs its bootstrap as it
// is: it cannot change in place.
var ErrNoResourceFiles = errors.New("the serving Envoy runs its bootstrap as it is (not from resource files)")

// Plan is a change of an epoch's listeners, routes, clusters and secrets,
// nothing else, that the epoch can take in place (Files.Plan, Plan.Apply).
type Plan struct {
	// Change is what changes: the one comparison of the two bootstraps.
	Change inplace.Change

	files    *Files
	old, new *inplace.Bootstrap
	copied   string
}

// Plan compares copied, a bootstrap copy of the operator's file original
// (Copier.Checked), with the epoch's bootstrap. It returns the plan when
// only listeners, routes, clusters and secrets change; otherwise an error
// says why not: ErrNoResourceFiles, an *inplace.NotRewritableError or an
// *inplace.RestartError. The copy stays the caller's until Plan.Apply.
func (f *Files) Plan(copied, original string) (*Plan, error) {
	if f.Resources == "" {
		return nil, ErrNoResourceFiles
	}
	parse := func(path string) (*inplace.Bootstrap, error) {
		data, err := safefile.ReadRegular(path, MaxBootstrapSize)
		if err != nil {
			return nil, fmt.Errorf("read envoy bootstrap: %w", err)
		}
		return inplace.Parse(original, data)
	}
	old := f.layout.Load() // parsed when the epoch started, or at its last change in place
	if old == nil {
		var err error
		if old, err = parse(f.Copy); err != nil {
			return nil, err
		}
	}
	b, err := parse(copied)
	if err != nil {
		return nil, err
	}
	c, err := inplace.Compare(old, b)
	if err != nil {
		return nil, err
	}
	return &Plan{Change: c, files: f, old: old, new: b, copied: copied}, nil
}

// Diff says which listeners, routes, clusters and secrets differ from the
// epoch's bootstrap to copied (a copy of the operator's file original),
// whatever else differs and whether the epoch runs from resource files: a
// dry run's account of a reload that cannot be made in place. An error
// says why the bootstraps cannot be compared (an
// *inplace.NotRewritableError for one the agent does not split).
func (f *Files) Diff(copied, original string) (inplace.Change, error) {
	old := f.layout.Load()
	var err error
	if old == nil {
		if old, err = parseCopy(f.Copy, original); err != nil {
			return inplace.Change{}, err
		}
	}
	b, err := parseCopy(copied, original)
	if err != nil {
		return inplace.Change{}, err
	}
	return inplace.Diff(old, b), nil
}

// parseCopy parses the bootstrap copy at path of the operator's file
// original.
func parseCopy(path, original string) (*inplace.Bootstrap, error) {
	data, err := safefile.ReadRegular(path, MaxBootstrapSize)
	if err != nil {
		return nil, fmt.Errorf("read envoy bootstrap: %w", err)
	}
	return inplace.Parse(original, data)
}

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
	if err := inplace.Apply(ctx, f.Resources, p.old, p.new, p.Change, admin); err != nil {
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

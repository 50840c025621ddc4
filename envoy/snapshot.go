//go:build linux

// The private, per-epoch copies of the bootstrap that every epoch runs from,
// and, with ProxyConfig.ResourceFiles, the bootstrap and LDS and CDS files
// Envoy runs instead (envoy/inplace), which a reload can change in place.

package envoy

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/envoy-agent/envoy-agent/envoy/inplace"
	"github.com/envoy-agent/envoy-agent/internal/bootyaml"
	"github.com/envoy-agent/envoy-agent/internal/safefile"
)

// MaxBootstrapSize bounds the bootstrap the agent reads: to check it, and to
// copy it for an epoch. It is what the agent can parse in bounded memory
// (bootyaml.MaxSize): a reload reads the file whole.
const MaxBootstrapSize = bootyaml.MaxSize

// snapshotBootstrap copies the bootstrap at source into the run folder for
// epoch, keeping the file name of original (Envoy picks the format by its
// extension). The copy is private (0600): bootstraps may hold secrets. Every
// copy gets a name of its own (a sequence number), created exclusively and
// never through a symbolic link: the clean-up of an epoch that failed must
// not remove the copy that a later epoch with the same number runs from.
func (e *Envoy) snapshotBootstrap(source, original string, epoch int) (string, error) {
	data, err := safefile.ReadRegular(source, MaxBootstrapSize)
	if err != nil {
		return "", fmt.Errorf("read envoy bootstrap: %w", err)
	}
	return e.writeSnapshot(data, original, epoch)
}

// writeSnapshot writes data, the bootstrap read from original, as the
// private copy for epoch (snapshotBootstrap): steps 1 and 2 of the rewrite
// that envoy/inplace draws, the certificates (RewriteBootstrap) and the
// admin and node (inplace.RunningCopy).
func (e *Envoy) writeSnapshot(data []byte, original string, epoch int) (string, error) {
	var err error
	cfg := e.config()
	if rewrite := cfg.RewriteBootstrap; rewrite != nil {
		if data, err = rewrite(data, original, e.runDir); err != nil {
			return "", fmt.Errorf("envoy bootstrap %s: %w", original, err)
		}
	}
	if data, _, err = inplace.RunningCopy(data, original, cfg.agentAdmin()); err != nil {
		return "", fmt.Errorf("envoy bootstrap %s: %w", original, err)
	}
	seq := e.snapshots.Add(1)
	path := filepath.Join(e.runDir, fmt.Sprintf("epoch-%d-%d-%s", epoch, seq, filepath.Base(original)))
	if err := safefile.CreatePrivate(path, data); err != nil {
		return "", fmt.Errorf("copy envoy bootstrap: %w", err)
	}
	return path, nil
}

// CopyBootstrap makes the private copy (0600, in the run folder) of the
// bootstrap at path that HotRestartFrom then runs, so that the file a
// caller validates is the very file the new epoch runs, whatever happens
// to path meanwhile; the copy's SourceUnchanged then says whether path was
// at rest while it was copied and validated. Remove the copy if it is not
// handed to HotRestartFrom.
func (e *Envoy) CopyBootstrap(path string) (*BootstrapCopy, error) {
	if _, err := e.ensureRunDir(); err != nil {
		return nil, err
	}
	before, err := safefile.Identify(path)
	if err != nil {
		return nil, fmt.Errorf("read envoy bootstrap: %w", err)
	}
	data, err := safefile.ReadRegular(path, MaxBootstrapSize)
	if err != nil {
		return nil, fmt.Errorf("read envoy bootstrap: %w", err)
	}
	copied, err := e.writeSnapshot(data, path, e.Epoch()+1)
	if err != nil {
		return nil, err
	}
	return &BootstrapCopy{Path: copied, source: path, sum: sha256.Sum256(data), state: before}, nil
}

// BootstrapCopy is the private copy of the operator's bootstrap that a
// reload validates and then runs (CopyBootstrap).
type BootstrapCopy struct {
	// Path is the copy, in the run folder.
	Path   string
	source string
	sum    [sha256.Size]byte
	state  safefile.Identity // the source's, before it was read
}

// ErrBootstrapChanged says that the bootstrap file changed after a copy
// of it was made: it was being written, and the copy may hold part of it.
var ErrBootstrapChanged = errors.New("the file changed while the agent read and validated it")

// SourceUnchanged reads again the file the copy was made of. It returns
// an error wrapping ErrBootstrapChanged when the file was written since
// the copy was made: it holds other bytes, or it is the same file (inode)
// with another size, modification or change time. A file renamed over it
// with the same bytes is unchanged. Called once the copy is validated, it
// tells a copy of a file that a writer had cut short (truncated and not
// yet written whole) from a file at rest: a prefix of a bootstrap is often
// a valid bootstrap (with no routes, no endpoints, or no listeners at
// all), so validating the copy cannot tell them apart. The times are
// compared as well as the bytes because a writer in a loop shows the same
// torn text (an empty file, say) again and again.
func (c *BootstrapCopy) SourceUnchanged() error {
	now, err := safefile.Identify(c.source)
	if err != nil {
		return fmt.Errorf("read envoy bootstrap again: %w", err)
	}
	data, err := safefile.ReadRegular(c.source, MaxBootstrapSize)
	if err != nil {
		return fmt.Errorf("read envoy bootstrap again: %w", err)
	}
	if sha256.Sum256(data) != c.sum || (now.SameInode(c.state) && now != c.state) {
		return fmt.Errorf("%s: %w (it is being written in place)", c.source, ErrBootstrapChanged)
	}
	return nil
}

// resourceDir is the folder of an epoch's resource files, beside its
// bootstrap copy (so a leftover of it goes with the copy: epoch-*-*).
func resourceDir(snapshot string) string { return snapshot + ".d" }

// writeResources writes, for the epoch that runs snapshot (the operator's
// file original), the bootstrap Envoy runs and its LDS and CDS files into
// a folder of the epoch's own, so that no two epochs share a file a reload
// rewrites. It returns the folder and that bootstrap's path, or "" (run
// snapshot as it is) when the bootstrap cannot be rewritten; it says why.
func (e *Envoy) writeResources(snapshot, original string, epoch int) (dir, bootstrap string, layout *inplace.Bootstrap) {
	data, err := safefile.ReadRegular(snapshot, MaxBootstrapSize)
	var b *inplace.Bootstrap
	if err == nil {
		b, err = inplace.Parse(original, data)
	}
	if err == nil {
		dir = resourceDir(snapshot)
		if bootstrap, err = inplace.Write(dir, b); err != nil {
			_ = os.RemoveAll(dir)
		}
	}
	if err != nil {
		e.log.Warnf("envoy epoch %d runs %s as it is (a reload will hot restart it): %v", epoch, original, err)
		return "", "", nil
	}
	var before *inplace.Bootstrap
	if p := e.serving(); p != nil {
		before = p.layout.Load()
	}
	e.sayNames(before, b)
	return dir, bootstrap, b
}

// sayNames logs the names given to listeners the operator left unnamed
// (inplace.Bootstrap.Named), once: when they differ from before's.
func (e *Envoy) sayNames(before, now *inplace.Bootstrap) {
	named := now.Named()
	if len(named) == 0 || (before != nil && slices.Equal(before.Named(), named)) {
		return
	}
	var list []string
	for _, n := range named {
		list = append(list, n.String())
	}
	e.log.Infof("listeners without a name run under these names in the files the agent writes for Envoy (Envoy's statistics name a listener by its address, and keep theirs): %s", strings.Join(list, ", "))
}

// NamedListeners are the names the agent gave the serving epoch's
// listeners that the operator left unnamed; none when it runs its
// bootstrap as it is.
func (e *Envoy) NamedListeners() []inplace.NamedListener {
	if p := e.serving(); p != nil {
		if b := p.layout.Load(); b != nil {
			return b.Named()
		}
	}
	return nil
}

// InPlacePlan is a reload that the serving epoch can take in place: its
// listeners and clusters change, nothing else (ApplyInPlace).
type InPlacePlan struct {
	// Change is what changes.
	Change inplace.Change

	p        *process
	old, new *inplace.Bootstrap
	copied   string
}

// ErrNoResourceFiles says that the serving epoch runs its bootstrap as it
// is: it cannot change in place.
var ErrNoResourceFiles = errors.New("the serving Envoy runs its bootstrap as it is (not from resource files)")

// PlanInPlace compares copied, a bootstrap copy that CopyBootstrap made,
// with the serving epoch's bootstrap. It returns the plan when only
// listeners and clusters change; otherwise an error says why not:
// ErrNoResourceFiles, an *inplace.NotRewritableError or an
// *inplace.RestartError. The copy stays the caller's until ApplyInPlace.
func (e *Envoy) PlanInPlace(copied string) (*InPlacePlan, error) {
	p := e.serving()
	if p == nil || p.resources == "" {
		return nil, ErrNoResourceFiles
	}
	parse := func(path string) (*inplace.Bootstrap, error) {
		data, err := safefile.ReadRegular(path, MaxBootstrapSize)
		if err != nil {
			return nil, fmt.Errorf("read envoy bootstrap: %w", err)
		}
		return inplace.Parse(e.config().ConfigPath, data)
	}
	old := p.layout.Load() // parsed when the epoch started, or its last change in place
	if old == nil {
		var err error
		if old, err = parse(p.snapshot); err != nil {
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
	return &InPlacePlan{Change: c, p: p, old: old, new: b, copied: copied}, nil
}

// ApplyInPlace changes the serving epoch's listeners and clusters as plan
// says (inplace.Apply): nil once Envoy accepted every resource, and the
// plan's bootstrap copy is then the epoch's (what a failed hot restart
// later restores). When Envoy rejects a resource, the previous ones are
// put back and the error is an *inplace.RejectedError with Envoy's reason.
// The copy is removed on any error.
func (e *Envoy) ApplyInPlace(ctx context.Context, plan *InPlacePlan) error {
	e.restartMu.Lock()
	defer e.restartMu.Unlock()
	if e.serving() != plan.p || plan.p.exited() {
		_ = os.Remove(plan.copied)
		return errors.New("the serving epoch changed since the reload was planned")
	}
	if err := inplace.Apply(ctx, plan.p.resources, plan.old, plan.new, plan.Change, adminBodies{e.admin}); err != nil {
		_ = os.Remove(plan.copied)
		return err
	}
	if err := os.Rename(plan.copied, plan.p.snapshot); err != nil {
		plan.p.layout.Store(nil) // the copy on disk is the old one: parse it again
		return fmt.Errorf("keep the new bootstrap copy: %w", err)
	}
	plan.p.layout.Store(plan.new)
	e.sayNames(plan.old, plan.new)
	return nil
}

// DiscardPlan removes the bootstrap copy of a plan that will not be
// applied.
func (e *Envoy) DiscardPlan(plan *InPlacePlan) { _ = os.Remove(plan.copied) }

// adminBodies is inplace.Admin over an AdminClient.
type adminBodies struct{ c *AdminClient }

func (a adminBodies) Get(ctx context.Context, path string) ([]byte, error) {
	code, body, err := a.c.do(ctx, http.MethodGet, path)
	if err == nil && code != http.StatusOK {
		err = fmt.Errorf("envoy admin GET %s: %s", path, statusText(code, body))
	}
	return body, err
}

// ResourcesAccepted checks, for a serving epoch that runs from resource
// files, that Envoy took every listener and cluster in them (it reports
// LIVE without one it rejected); nil for an epoch that runs its bootstrap
// as it is.
func (e *Envoy) ResourcesAccepted(ctx context.Context) error {
	p := e.serving()
	if p == nil {
		return nil
	}
	return e.resourcesAccepted(ctx, p)
}

func (e *Envoy) resourcesAccepted(ctx context.Context, p *process) error {
	if p.resources == "" {
		return nil
	}
	return inplace.Accepted(ctx, p.resources, adminBodies{e.admin})
}

// ServingBinaryIs reports whether the binary at path is the very file
// (same inode, size and modification time) the serving epoch was started
// from: an in-place reload cannot change the binary.
func (e *Envoy) ServingBinaryIs(path string) bool {
	p := e.serving()
	if p == nil || p.binary == nil {
		return false
	}
	now, err := os.Stat(path)
	return err == nil && os.SameFile(p.binary, now) && now.Size() == p.binary.Size() && now.ModTime().Equal(p.binary.ModTime())
}

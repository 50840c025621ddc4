//go:build linux

// A reload as one call: the plan its caller decided (ReloadPlan), carried
// out by Reload on the path it names; and what a caller needs to decide
// it: a bootstrap copy to validate and run (CopyBootstrap) and the
// in-place plan (PlanInPlace).

package envoy

import (
	"go.yaml.in/yaml/v3"

	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/envoy-agent/envoy-agent/envoy/adminapi"
	"github.com/envoy-agent/envoy-agent/envoy/epochfiles"
	"github.com/envoy-agent/envoy-agent/envoy/inplace"
)

// ReloadPath is how a reload reaches its new configuration.
type ReloadPath int

const (
	// HotRestart starts a new epoch by hot restart; the replaced one
	// drains until parent_shutdown_duration.
	HotRestart ReloadPath = iota
	// DrainRestart drains and stops the serving Envoy, then starts a new
	// one: the path where hot restart is compiled out.
	DrainRestart
	// InPlace changes the serving epoch through its resource files; no
	// process starts.
	InPlace
)

// String is the path's name as the agent's answers and logs give it.
func (p ReloadPath) String() string {
	switch p {
	case DrainRestart:
		return "drain_restart"
	case InPlace:
		return "in_place"
	}
	return "hot_restart"
}

// ReloadPlan is one reload as its caller decided it: the path, what that
// path needs, and how long the whole of it may take. It is a value: a
// caller can print it (String) before or instead of carrying it out, and
// carry it out once (Reload), which takes its bootstrap copy.
type ReloadPlan struct {
	Path ReloadPath
	// Config and Copied are the new epoch's settings (DisableHotRestart
	// included) and its validated bootstrap copy (CopyBootstrap), for
	// HotRestart and DrainRestart; the epoch takes the copy, or it is
	// removed. An in-place plan's copy is Copied too.
	Config ProxyConfig
	Copied string
	// Restart is how DrainRestart drains the serving Envoy and bounds each
	// start.
	Restart RestartPlan
	// InPlace is PlanInPlace's plan, for InPlace: the change, compared once.
	InPlace *epochfiles.Plan
	// Timeout bounds the whole of Reload.
	Timeout time.Duration
}

// String says what the plan does, in one line.
func (p ReloadPlan) String() string {
	var b strings.Builder
	b.WriteString(p.Path.String())
	switch p.Path {
	case InPlace:
		if p.InPlace != nil {
			fmt.Fprintf(&b, ": %s", p.InPlace.Change)
		}
	case DrainRestart:
		fmt.Fprintf(&b, ": drain %s to %s, then start within %s", p.Restart.MinDrain, p.Restart.MaxDrain, p.Restart.StartTimeout)
		if p.Config.DisableHotRestart {
			b.WriteString(", with --disable-hot-restart")
		}
	}
	fmt.Fprintf(&b, "; bootstrap copy %s; within %s", p.Copied, p.Timeout)
	return b.String()
}

// ReloadOutcome is what a reload did.
type ReloadOutcome struct {
	// Epoch and Pid are the epoch that serves afterwards and its process.
	Epoch, Pid int
	// Drained is how long DrainRestart's drain of the old Envoy took.
	Drained time.Duration
}

// Reload carries out plan, within its Timeout, and returns what happened;
// on an error the serving configuration is the one before, as each path
// says (hotRestart, drainAndRestart, applyInPlace).
func (e *Envoy) Reload(ctx context.Context, plan ReloadPlan) (ReloadOutcome, error) {
	if plan.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, plan.Timeout)
		defer cancel()
	}
	var out ReloadOutcome
	var err error
	switch plan.Path {
	case InPlace:
		err = e.applyInPlace(ctx, plan.InPlace, plan.Copied)
	case DrainRestart:
		out.Drained, err = e.drainAndRestart(ctx, plan.Config, plan.Copied, plan.Restart)
	default:
		if plan.Copied == "" {
			err = errors.New("hot restart: no bootstrap copy given")
			break
		}
		_, err = e.hotRestart(ctx, plan.Config, plan.Copied)
	}
	out.Epoch, out.Pid = e.Epoch(), e.Pid()
	return out, err
}

// CopyBootstrap makes the private copy (0600, in the run folder) of the
// operator's bootstrap at path that a reload validates and then runs
// (epochfiles.Copier.Checked). Remove the copy if no plan that names it is
// carried out.
func (e *Envoy) CopyBootstrap(path string) (*epochfiles.Copy, error) {
	dir, err := e.ensureRunDir()
	if err != nil {
		return nil, err
	}
	return e.copies.Checked(dir, path, e.Epoch()+1, e.config().rewrite())
}

// PlanInPlace compares copied, a bootstrap copy that CopyBootstrap made,
// with the serving epoch's bootstrap (epochfiles.Files.Plan): the plan
// when only listeners, routes, clusters and secrets change, else an error
// that says why not. The copy's file stays the caller's.
func (e *Envoy) PlanInPlace(copied *epochfiles.Copy) (*epochfiles.Plan, error) {
	p := e.serving()
	if p == nil {
		return nil, epochfiles.ErrNoResourceFiles
	}
	return p.files.Plan(copied, e.config().ConfigPath)
}

// CopyForPlan makes a private copy of data, the bootstrap read from the
// operator's file original, for a plan that will not be carried out (a
// dry run): as CopyBootstrap makes one, but with certs for the
// certificates' step (one that serves nothing and watches nothing), so
// that planning changes nothing the serving Envoy reads. The caller
// removes the copy.
func (e *Envoy) CopyForPlan(data []byte, original string, certs func(doc *yaml.Node, runDir string) (bool, error)) (string, error) {
	dir, err := e.ensureRunDir()
	if err != nil {
		return "", err
	}
	pc := e.config()
	pc.RewriteBootstrap = certs
	return e.copies.CopyData(dir, data, original, e.Epoch()+1, pc.rewrite())
}

// DiffServing says which listeners, routes, clusters and secrets differ
// from the serving epoch's bootstrap to copied, a copy CopyBootstrap or
// CopyForPlan made, whatever path a reload to it takes
// (epochfiles.Files.Diff).
func (e *Envoy) DiffServing(copied string) (inplace.Change, error) {
	p := e.serving()
	if p == nil || p.files == nil {
		return inplace.Change{}, errors.New("no serving epoch")
	}
	return p.files.Diff(copied, e.config().ConfigPath)
}

// KeepServingCopy makes a private copy of the serving epoch's bootstrap
// copy, the configuration it serves now, for a later plan back to it (the
// reload guard's rollback: in place, or a new epoch once the serving one
// and its copy are gone). The caller removes it unless a plan takes it.
func (e *Envoy) KeepServingCopy() (string, error) {
	dir, err := e.ensureRunDir()
	if err != nil {
		return "", err
	}
	p := e.serving()
	if p == nil || p.files == nil {
		return "", errors.New("no serving epoch")
	}
	// The epoch's copy went through the rewrite already: none again.
	c, err := e.copies.Copy(dir, p.files.Copy, e.config().ConfigPath, p.epoch+1, nil)
	if err != nil {
		return "", err
	}
	return c.Path, nil
}

// applyInPlace changes the serving epoch's resources as plan says
// (epochfiles.Plan.Apply): nil once Envoy accepted every one, and the
// plan's copy is then the epoch's. When Envoy rejects a resource, the
// previous ones are put back and the error is an *inplace.RejectedError
// with Envoy's reason. The copy is removed on any error.
func (e *Envoy) applyInPlace(ctx context.Context, plan *epochfiles.Plan, copied string) error {
	if plan == nil {
		_ = os.Remove(copied)
		return errors.New("reload in place: no plan")
	}
	e.restartMu.Lock()
	defer e.restartMu.Unlock()
	p := e.serving()
	if p == nil || p.exited() {
		_ = os.Remove(copied)
		return epochfiles.ErrPlanStale
	}
	before := p.files.Named()
	if err := plan.Apply(ctx, p.files, adminBodies{e.admin}); err != nil {
		return err
	}
	e.sayNames(before, p.files.Named())
	return nil
}

// adminBodies is inplace.Admin over an admin client.
type adminBodies struct{ c *adminapi.Client }

func (a adminBodies) Get(ctx context.Context, path string) ([]byte, error) {
	return a.c.Read(ctx, path)
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

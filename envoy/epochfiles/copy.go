//go:build linux

// Package epochfiles keeps the files an Envoy epoch runs from, in the run
// folder, and what the agent's ADS server (envoy/xds) serves it: the
// private copy of the operator's bootstrap (Copier), made through the
// caller's rewrite and numbered so that no two epochs share one, whose
// name names the epoch on the server too (EpochName); with resource files,
// the folder beside that copy where envoy/inplace writes the bootstrap
// Envoy runs instead and its LDS and CDS files, and the epoch's route
// configurations and secrets set on the server (Files). A copy run as it
// is that reads secrets from the agent (the certificates) runs wired to
// the server, from that folder too. A reload that the serving epoch can
// take in place is planned on those files (Files.Plan) and carried out
// there and on the server (Plan.Apply). The package knows nothing of
// processes: package envoy keeps one Files per epoch.
//
// The pipeline of a bootstrap, from the operator's file to what Envoy
// reads:
//
//	operator's file ── Rewrite (envoy/certs) ──▶ copy (Copier, 0600, epoch-N-SEQ-name)
//	copy ── inplace.Parse, inplace.Write ──▶ copy.d/: bootstrap.yaml, lds.yaml, cds.yaml
//	                                        and the routes and secrets: ads.Server.Set(epoch-N-SEQ)
package epochfiles

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"

	"go.yaml.in/yaml/v3"

	"github.com/envoy-agent/envoy-agent/internal/bootyaml"
	"github.com/envoy-agent/envoy-agent/internal/safefile"
)

// MaxBootstrapSize bounds the bootstrap the agent reads: to check it, and to
// copy it for an epoch. It is what the agent can parse in bounded memory
// (bootyaml.MaxSize): a reload reads the file whole.
const MaxBootstrapSize = bootyaml.MaxSize

// Rewrite rewrites the operator's bootstrap as a copy is made (data is the
// operator's file, name its path, runDir the folder the copy goes to): it
// returns the copy's bytes and, when it decoded them, the tree they
// encode, which the steps after the copy take instead of decoding the copy
// again (nil: they read the copy); an error refuses the copy. nil copies
// the bytes as they are.
type Rewrite func(data []byte, name, runDir string) ([]byte, *yaml.Node, error)

// Copier makes the bootstrap copies of one Envoy's epochs. The zero value
// is ready to use.
type Copier struct {
	seq atomic.Uint64 // numbers each copy, so no two epochs share a file
}

// Count is how many copies the Copier made: a live upgrade hands it over,
// and the new agent's Copier goes on from it (Resume).
func (c *Copier) Count() uint64 { return c.seq.Load() }

// Resume sets the count of copies made, from a live upgrade's state.
func (c *Copier) Resume(n uint64) { c.seq.Store(n) }

// Copy copies the bootstrap at source into dir for epoch, keeping the file
// name of original, the operator's file (Envoy picks the format by its
// extension). The copy is private (0600): bootstraps may hold secrets. Every
// copy gets a name of its own (a sequence number), created exclusively and
// never through a symbolic link: the clean-up of an epoch that failed must
// not remove the copy that a later epoch with the same number runs from.
func (c *Copier) Copy(dir, source, original string, epoch int, rewrite Rewrite) (*Copy, error) {
	data, err := safefile.ReadRegular(source, MaxBootstrapSize)
	if err != nil {
		return nil, fmt.Errorf("read envoy bootstrap: %w", err)
	}
	path, doc, err := c.write(dir, data, original, epoch, rewrite)
	if err != nil {
		return nil, err
	}
	return &Copy{Path: path, doc: doc}, nil
}

// CopyData is Copy of data, the bootstrap read from original: a plan
// made of bytes the caller read (a dry run's, a candidate's).
func (c *Copier) CopyData(dir string, data []byte, original string, epoch int, rewrite Rewrite) (string, error) {
	path, _, err := c.write(dir, data, original, epoch, rewrite)
	return path, err
}

// write writes data, the bootstrap read from original, as the copy for
// epoch; doc is the copy decoded, when the rewrite decoded it.
func (c *Copier) write(dir string, data []byte, original string, epoch int, rewrite Rewrite) (path string, doc *yaml.Node, err error) {
	if rewrite != nil {
		if data, doc, err = rewrite(data, original, dir); err != nil {
			return "", nil, fmt.Errorf("envoy bootstrap %s: %w", original, err)
		}
	}
	seq := c.seq.Add(1)
	path = filepath.Join(dir, fmt.Sprintf("%s-%s", epochName(epoch, seq), filepath.Base(original)))
	if err := safefile.CreatePrivate(path, data); err != nil {
		return "", nil, fmt.Errorf("copy envoy bootstrap: %w", err)
	}
	return path, doc, nil
}

// epochName is the name of the epoch that runs the copy seq of epoch: the
// start of the copy's file name, and its stream's :authority on the agent's
// ADS server (a name of [A-Za-z0-9-], whatever the operator's file is
// called).
func epochName(epoch int, seq uint64) string { return fmt.Sprintf("epoch-%d-%d", epoch, seq) }

// EpochName is the name on the agent's ADS server of the epoch that runs
// copy, a copy the Copier made: "epoch-N-SEQ".
func EpochName(copy string) string {
	parts := strings.SplitN(filepath.Base(copy), "-", 4)
	if len(parts) < 3 {
		return ""
	}
	return strings.Join(parts[:3], "-")
}

// Checked makes the copy of the operator's bootstrap at path that a reload
// validates and then runs as epoch, so that the file a caller validates is
// the very file the new epoch runs, whatever happens to path meanwhile; the
// copy's SourceUnchanged then says whether path was at rest while it was
// copied and validated. The caller removes the copy if no epoch takes it.
func (c *Copier) Checked(dir, path string, epoch int, rewrite Rewrite) (*Copy, error) {
	before, err := safefile.Identify(path)
	if err != nil {
		return nil, fmt.Errorf("read envoy bootstrap: %w", err)
	}
	data, err := safefile.ReadRegular(path, MaxBootstrapSize)
	if err != nil {
		return nil, fmt.Errorf("read envoy bootstrap: %w", err)
	}
	copied, doc, err := c.write(dir, data, path, epoch, rewrite)
	if err != nil {
		return nil, err
	}
	return &Copy{Path: copied, doc: doc, source: path, sum: sha256.Sum256(data), state: before}, nil
}

// Copy is a private copy of the operator's bootstrap: one an epoch runs
// (Copier.Copy), or one a reload validates and then runs (Copier.Checked).
type Copy struct {
	// Path is the copy, in the run folder.
	Path string
	// doc is the copy decoded, as the rewrite left it (nil: not decoded),
	// for the one step that takes it next (ForEpoch, Files.Plan): that
	// step changes it.
	doc    *yaml.Node
	source string
	sum    [sha256.Size]byte
	state  safefile.Identity // the source's, before it was read (Checked)
}

// take returns the copy's decoded tree once (nil after, or when the
// rewrite did not decode it): the step that takes it changes it.
func (c *Copy) take() *yaml.Node {
	doc := c.doc
	c.doc = nil
	return doc
}

// SHA256 is the SHA-256 (hex) of the operator's bytes the copy was made
// of: what Envoy serves once a plan that names the copy is carried out.
func (c *Copy) SHA256() string { return hex.EncodeToString(c.sum[:]) }

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
func (c *Copy) SourceUnchanged() error {
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

//go:build linux

// The private, per-epoch copies of the bootstrap that every epoch runs from.

package envoy

import (
	"fmt"
	"path/filepath"

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
	if rewrite := e.config().RewriteBootstrap; rewrite != nil {
		if data, err = rewrite(data, original, e.runDir); err != nil {
			return "", fmt.Errorf("envoy bootstrap %s: %w", original, err)
		}
	}
	seq := e.snapshots.Add(1)
	path := filepath.Join(e.runDir, fmt.Sprintf("epoch-%d-%d-%s", epoch, seq, filepath.Base(original)))
	if err := safefile.CreatePrivate(path, data); err != nil {
		return "", fmt.Errorf("copy envoy bootstrap: %w", err)
	}
	return path, nil
}

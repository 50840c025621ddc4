//go:build linux

package service

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/envoy-agent/envoy-agent/envoy"
	"github.com/envoy-agent/envoy-agent/service/control"
)

// The agent notices by itself when the Envoy installed at binary_path is no
// longer the one running, and says so in STATUS= and the log: a package
// upgrade reloads it through the package's trigger, but binary_path may be
// a path no package owns, replaced by hand or by a configuration tool. It
// does not reload by itself: a reload also applies the configuration files
// as they are at that moment, which is the operator's (or the package
// manager's) call to make.

// installedEnvoyCheckInterval is how often the agent compares the installed
// Envoy with the running one: two stat calls, so cheap, and often enough
// that `systemctl status` tells of a replaced binary within seconds.
const installedEnvoyCheckInterval = 5 * time.Second

// installedEnvoyProbeTimeout bounds asking a newly installed binary for its
// versions: the first exec of a 100 MB binary from a cold page cache can take
// seconds on a busy host.
const installedEnvoyProbeTimeout = 10 * time.Second

// installedEnvoy is what the last comparison found. The installed binary's
// versions come from the supervisor.s versions.Cache, asked by the watcher
// (never by a getter, and never under mu); a change of the outcome is
// logged once.
type installedEnvoy struct {
	mu sync.Mutex
	// pid is the serving Envoy the agent last looked at, and startedFrom the
	// file at binary_path when it first did (at READY=1 or at the end of the
	// reload that started it): a wrapper script that execs Envoy is never
	// the running executable, but it is what binary_path held then.
	pid         int
	startedFrom os.FileInfo
	probed      os.FileInfo // the installed file probeErr is about
	probeErr    error       // why its versions could not be told
	note        string      // the last outcome; "" when the running Envoy is the installed one
	unknown     bool        // the running Envoy's binary could not be looked at (logged once)
}

// checkInstalledEnvoy compares the Envoy installed at binary_path with the
// serving one and returns what STATUS= should add ("" when they are the same
// file, or when there is nothing to compare). A changed outcome is logged.
func (s *supervisor) checkInstalledEnvoy() string {
	ie := &s.installed
	ie.mu.Lock()
	defer ie.mu.Unlock()
	pid := s.proxy.Pid()
	if pid == 0 {
		return ""
	}
	// /proc/PID/exe names the file Envoy was started from, even once that
	// file is replaced or deleted.
	running, err := os.Stat(fmt.Sprintf("/proc/%d/exe", pid))
	if errors.Is(err, fs.ErrNotExist) {
		return "" // that Envoy has just exited: the agent hears of it from its wait
	}
	if err != nil {
		if !ie.unknown {
			ie.unknown = true
			s.log.WithField("pid", pid).Warnf("cannot tell which Envoy binary is running (%v): a replaced binary_path will not be noticed", err)
		}
		return ""
	}
	path := s.config().Envoy.BinaryPath
	if pid != ie.pid {
		ie.pid, ie.startedFrom = pid, nil
		if fi, err := os.Stat(path); err == nil {
			ie.startedFrom = fi
		}
	}
	note := s.installedNote(path, running)
	if note != ie.note {
		if note != "" {
			s.log.WithField("binary_path", path).Warnf("%s", note)
		} else {
			s.log.WithField("binary_path", path).Infof("the running Envoy is the one installed at %s again", path)
		}
		ie.note = note
	}
	return note
}

// installedNote says how the file at path differs from running, or "". The
// caller holds s.installed.mu.
func (s *supervisor) installedNote(path string, running os.FileInfo) string {
	ie := &s.installed
	installed, err := os.Stat(path)
	if err != nil {
		return fmt.Sprintf("the installed Envoy %s is gone (%v): the running one keeps serving, but a restart would fail", path, unwrapPathError(err))
	}
	if os.SameFile(installed, running) || sameContent(installed, ie.startedFrom) {
		return ""
	}
	version, hrVersion, known := s.versions.Cached(path)
	if !known {
		if ie.probeErr != nil && sameContent(ie.probed, installed) {
			return fmt.Sprintf("the installed Envoy %s differs from the running one and cannot tell its versions (%v): the running one keeps serving", path, ie.probeErr)
		}
		return fmt.Sprintf("the installed Envoy %s differs from the running one (its versions are not known yet): the running one keeps serving", path)
	}
	release := envoyRelease(version)
	// What a reload would do: the path a reload decides (reloadPath); a
	// serving version not known yet is not held against the binary.
	runningHR := s.hotRestartVersion()
	switch how, err := reloadPath(runningHR, hrVersion); {
	case how == envoy.DrainRestart:
		return fmt.Sprintf("the installed Envoy %s (%s, hot-restart version %s) differs from the running one: a reload switches to it with a drain and a restart (%s)", path, release, hrVersion, control.HotRestartOffNote)
	case err != nil && runningHR != "":
		return fmt.Sprintf("the installed Envoy %s (%s, hot-restart version %s) differs from the running one (hot-restart version %s) and cannot hot restart from it: a restart switches to it with a drain", path, release, hrVersion, runningHR)
	}
	return fmt.Sprintf("the installed Envoy %s (%s) differs from the running one: a reload switches to it with no dropped connection", path, release)
}

// probeInstalledEnvoy asks the Envoy installed at binary_path for its
// versions unless the cache knows them (or the same file failed to tell
// them before). It runs two Envoy processes the first time, so only the
// watcher calls it, holding no lock; the answers also spare the next
// reload those two runs.
func (s *supervisor) probeInstalledEnvoy(ctx context.Context) {
	path := s.config().Envoy.BinaryPath
	if _, _, known := s.versions.Cached(path); known {
		return
	}
	fi, err := os.Stat(path)
	if err != nil {
		return // installedNote says it is gone
	}
	s.installed.mu.Lock()
	failed := s.installed.probeErr != nil && sameContent(s.installed.probed, fi)
	s.installed.mu.Unlock()
	if failed {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, installedEnvoyProbeTimeout)
	defer cancel()
	_, err = s.versions.Version(ctx, path)
	if err == nil {
		_, err = s.versions.HotRestartVersion(ctx, path)
	}
	s.installed.mu.Lock()
	s.installed.probed, s.installed.probeErr = fi, err
	s.installed.mu.Unlock()
}

// sameContent is true when a and b are the same file, not rewritten in
// place since (a script can be; a running executable cannot).
func sameContent(a, b os.FileInfo) bool {
	return a != nil && b != nil && os.SameFile(a, b) && a.ModTime().Equal(b.ModTime()) && a.Size() == b.Size()
}

// envoyRelease is the release in `envoy --version` output or in
// /server_info's version ("<commit>/1.40.0/Clean/RELEASE/BoringSSL"), or
// the text itself when it has another shape.
func envoyRelease(version string) string {
	version = strings.TrimSpace(version)
	if _, v, ok := strings.Cut(version, "version: "); ok {
		version = v
	}
	if parts := strings.Split(version, "/"); len(parts) >= 2 {
		return parts[1]
	}
	return version
}

// unwrapPathError is err without the path, which the message names already.
func unwrapPathError(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// watchInstalledEnvoy checks the installed Envoy every
// installedEnvoyCheckInterval while Envoy serves, and refreshes STATUS= when
// the outcome changes. Reloads and stops set STATUS= themselves.
func (s *supervisor) watchInstalledEnvoy(ctx context.Context) {
	t := time.NewTicker(installedEnvoyCheckInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !s.live() || s.reloading() {
			continue
		}
		s.probeInstalledEnvoy(ctx)
		s.installed.mu.Lock()
		before := s.installed.note
		s.installed.mu.Unlock()
		if s.checkInstalledEnvoy() != before {
			s.notify.Status(s.liveStatus())
		}
	}
}

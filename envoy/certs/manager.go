//go:build linux

package certs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/envoy-agent/envoy-agent/internal/filetrust"
	"golang.org/x/sys/unix"
)

// Logger is what a Manager logs through; *logrus.Logger satisfies it.
type Logger interface {
	Infof(format string, args ...any)
	Warnf(format string, args ...any)
	Errorf(format string, args ...any)
}

// Default timings of a Manager.
const (
	// DefaultSettle is how long a Manager waits after the last change in a
	// watched folder before it reads the files: a renewal tool writes
	// several files one after the other (certbot re-points four links).
	DefaultSettle = 100 * time.Millisecond
	// DefaultPoll is the safety net: every file is read again this often,
	// whatever inotify said.
	DefaultPoll = 30 * time.Second
)

// Manager serves the secrets of the bootstraps it rewrote and keeps them
// up to date with the operator's files. It is safe for concurrent use.
type Manager struct {
	log Logger
	// Settle and Poll are DefaultSettle and DefaultPoll unless set before
	// Run.
	Settle, Poll time.Duration
	// OnChange, when set before Run, is called after the certificates in
	// use changed (for metrics).
	OnChange func()

	// mu guards the maps; it is never held while a file is read or a
	// folder walked, so that status, a reload and a stop never wait on
	// the operator's files.
	mu      sync.Mutex
	secrets map[string]Secret    // by name: every secret served, kept up to date
	inUse   map[string]bool      // by name: those of the latest bootstrap
	served  map[string]*material // by name: what the SDS file holds
	failed  map[string]string    // by name: the refusal logged last
	reads   uint64               // the reads of a secret's files begun, numbered
	newest  map[string]uint64    // by name: the number of the read served or refused last
	seen    map[string]string    // by name: which files the last read met (or its error)
	kick    chan struct{}        // the set of files changed: watch again

	noInotify bool // the tests' stand-in for inotify that cannot be had
}

// NewManager returns a Manager that logs to log.
func NewManager(log Logger) *Manager {
	return &Manager{
		log:     log,
		Settle:  DefaultSettle,
		Poll:    DefaultPoll,
		secrets: map[string]Secret{},
		inUse:   map[string]bool{},
		served:  map[string]*material{},
		failed:  map[string]string{},
		newest:  map[string]uint64{},
		seen:    map[string]string{},
		kick:    make(chan struct{}, 1),
	}
}

// RewriteBootstrap is the one call between a bootstrap and the copy Envoy
// runs: it rewrites data (the file name says its format) with Rewrite for
// SDS files in runDir (the agent's private run folder),
// writes the SDS file of every secret before Envoy can read it, and watches
// their files from then on. A pair that is not whole keeps the one served
// (logged); with none served yet, it is an error naming the file, as Envoy
// would refuse it.
func (m *Manager) RewriteBootstrap(data []byte, name, runDir string) ([]byte, error) {
	res, err := Rewrite(data, name, runDir)
	if err != nil {
		return nil, err
	}
	for _, s := range res.Skipped {
		m.log.Warnf("certificates: %s: left as it is (read once by Envoy, not watched)", s)
	}
	if len(res.Secrets) == 0 {
		return res.Data, nil
	}
	for _, s := range res.Secrets {
		if _, err := m.refresh(s, true); err != nil {
			return nil, err
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	// Secrets the previous bootstrap had stay watched: an epoch still
	// draining, or the serving one after a refused reload, may read them.
	m.inUse = map[string]bool{}
	for _, s := range res.Secrets {
		m.secrets[s.Name] = s
		m.inUse[s.Name] = true
	}
	select {
	case m.kick <- struct{}{}:
	default:
	}
	if m.OnChange != nil {
		go m.OnChange() // the certificates in use may be others
	}
	return res.Data, nil
}

// refresh reads s's files, holding no lock, and serves them when they
// changed and are whole. With must, a secret never served yet is an error
// when its files are not whole; an SDS file not on disk is written again.
// moved reports that the files read are others than the last read met (a
// re-pointed link, a file renamed into place) or fail otherwise: the
// folders to watch may have changed. Of two reads of the same secret, the
// later one begun wins, whichever ends first.
func (m *Manager) refresh(s Secret, must bool) (moved bool, err error) {
	m.mu.Lock()
	m.reads++
	n := m.reads
	m.mu.Unlock()
	mat, err := load(s)
	m.mu.Lock()
	defer m.mu.Unlock()
	seen := fmt.Sprint(err)
	if mat != nil {
		seen = mat.files
	}
	moved = m.seen[s.Name] != seen
	m.seen[s.Name] = seen
	if n < m.newest[s.Name] {
		return moved, nil // a later read of these files was taken already
	}
	m.newest[s.Name] = n
	return moved, m.takeLocked(s, mat, err, must)
}

// takeLocked serves mat, what load read of s's files (or err).
func (m *Manager) takeLocked(s Secret, mat *material, err error, must bool) error {
	old := m.served[s.Name]
	if err != nil {
		if old == nil && must {
			return fmt.Errorf("certificates: %w", err)
		}
		if msg := err.Error(); m.failed[s.Name] != msg {
			m.failed[s.Name] = msg
			if old == nil {
				m.log.Errorf("certificates: %v; not served until it is whole", err)
			} else {
				m.log.Errorf("certificates: renewal not taken: %v; the certificate in use (%s, serial %s) goes on serving", err, old.info.File, old.info.Serial)
			}
		}
		return nil
	}
	delete(m.failed, s.Name)
	if old != nil && old.sum == mat.sum {
		if _, err := os.Stat(s.Path); err == nil || !must {
			return nil
		}
	}
	if err := writeSDS(s, mat); err != nil {
		if old == nil && must {
			return err
		}
		m.log.Errorf("certificates: %v", err)
		return nil
	}
	m.served[s.Name] = mat
	if old != nil && old.sum != mat.sum {
		m.log.Infof("certificates: %s renewed: serial %s, not after %s (new handshakes use it; open connections go on)", s.CertFile, mat.info.Serial, mat.info.NotAfter.UTC().Format(time.RFC3339))
	}
	if m.OnChange != nil {
		go m.OnChange()
	}
	return nil
}

// Check reads every watched file now and serves what changed and is whole.
func (m *Manager) Check() {
	m.check()
}

// check is Check; moved reports that a secret's files are others than the
// last read met.
func (m *Manager) check() (moved bool) {
	m.mu.Lock()
	secrets := m.sortedLocked()
	m.mu.Unlock()
	for _, s := range secrets {
		if mv, _ := m.refresh(s, false); mv {
			moved = true
		}
	}
	return moved
}

func (m *Manager) sortedLocked() []Secret {
	out := make([]Secret, 0, len(m.secrets))
	for _, s := range m.secrets {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Certificates lists the certificates of the latest bootstrap, sorted by
// file.
func (m *Manager) Certificates() []Certificate {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Certificate
	for _, s := range m.sortedLocked() {
		mat := m.served[s.Name]
		if mat == nil || !m.inUse[s.Name] {
			continue
		}
		c := mat.info
		c.Error = m.failed[s.Name]
		out = append(out, c)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].File < out[j].File })
	return out
}

// Masks of the folders a Manager watches: a file's own folder (as named,
// and where its links lead) for any change to its entries (a rename into
// place, a re-pointed link, cp), and each folder holding a link on the way
// for entries made, removed or renamed (a swapped folder link).
const (
	fileDirMask = unix.IN_CREATE | unix.IN_MOVED_TO | unix.IN_MOVED_FROM | unix.IN_CLOSE_WRITE |
		unix.IN_DELETE | unix.IN_ATTRIB | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_MODIFY
	linkDirMask = unix.IN_CREATE | unix.IN_MOVED_TO | unix.IN_MOVED_FROM | unix.IN_DELETE |
		unix.IN_DELETE_SELF | unix.IN_MOVE_SELF
)

// watchDirs are the folders whose changes can change what a file reads,
// with what to watch in each: the folder of the file as named and of the
// file it resolves to, and the folder of each link followed on the way
// there (at most 40: the kernel's limit). Their number does not grow with
// the depth of the folders above a file: a folder renamed higher up
// without a link is taken by the poll. The files are resolved holding no
// lock.
func (m *Manager) watchDirs() map[string]uint32 {
	m.mu.Lock()
	var files []string
	for _, s := range m.secrets {
		for _, f := range []string{s.CertFile, s.KeyFile} {
			if f != "" {
				files = append(files, f)
			}
		}
	}
	m.mu.Unlock()
	want := map[string]uint32{}
	for _, f := range files {
		want[filepath.Dir(f)] |= fileDirMask
		r, err := filetrust.Resolve(f)
		if err != nil {
			continue // not there yet: the named folder's watch sees it come
		}
		r.File.Close()
		want[filepath.Dir(r.Path)] |= fileDirMask
		for _, d := range r.LinkDirs {
			want[d] |= linkDirMask
		}
	}
	return want
}

// Run watches the files of the secrets until ctx ends: inotify on their
// folders, and a read of every file each Poll (alone, logged, when inotify
// cannot be had). A change is read once the folders have been quiet for
// Settle (at most 4*Settle after the first). It returns nil when ctx ends.
func (m *Manager) Run(ctx context.Context) error {
	events := make(chan struct{}, 1)
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err == nil && m.noInotify {
		_ = unix.Close(fd)
		err = unix.EMFILE
	}
	if err != nil {
		// No inotify (fs.inotify.max_user_instances reached, say): the
		// poll alone takes renewals, Poll after they happen.
		m.log.Errorf("certificates: inotify: %v: renewals are read every %s instead of at once", err, m.Poll)
		fd = -1
	} else {
		f := os.NewFile(uintptr(fd), "inotify")
		defer f.Close()
		go func() {
			buf := make([]byte, 64<<10)
			for {
				if _, err := f.Read(buf); err != nil {
					if errors.Is(err, unix.EINTR) || errors.Is(err, unix.EAGAIN) {
						continue
					}
					return // closed as Run ends
				}
				select {
				case events <- struct{}{}:
				default:
				}
			}
		}()
	}
	watched := map[string]int{} // folder -> watch descriptor
	rewatch := func() {
		if fd < 0 {
			return
		}
		// Two paths may name one folder (through a link): one watch,
		// their masks added; removed only when no path wants it.
		now, used := map[string]int{}, map[int]bool{}
		for d, mask := range m.watchDirs() {
			wd, err := unix.InotifyAddWatch(fd, d, mask|unix.IN_MASK_ADD)
			if err != nil {
				continue // a folder that is not there yet: the poll covers it
			}
			now[d], used[wd] = wd, true
		}
		for _, wd := range watched {
			if !used[wd] {
				_, _ = unix.InotifyRmWatch(fd, uint32(wd))
			}
		}
		watched = now
	}
	rewatch()
	poll := time.NewTicker(m.Poll)
	defer poll.Stop()
	var settle, limit <-chan time.Time
	var settleTimer *time.Timer
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-m.kick:
			rewatch()
		case <-events:
			if settleTimer != nil {
				settleTimer.Stop()
			}
			settleTimer = time.NewTimer(m.Settle)
			settle = settleTimer.C
			if limit == nil {
				limit = time.After(4 * m.Settle)
			}
		case <-settle:
			settle, limit = nil, nil
			if m.check() {
				rewatch()
			}
		case <-limit:
			settle, limit = nil, nil
			if m.check() {
				rewatch()
			}
		case <-poll.C:
			m.check()
			rewatch()
		}
	}
}

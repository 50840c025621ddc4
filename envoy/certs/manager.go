//go:build linux

package certs

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"go.yaml.in/yaml/v3"
	"golang.org/x/sys/unix"

	"github.com/envoy-agent/envoy-agent/envoy/xds/ads"
	"github.com/envoy-agent/envoy-agent/internal/filetrust"
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

// publishTimeout bounds a publish's wait for every Envoy that subscribes to
// the secret to answer (2 to 5 ms measured at 1,000 secrets).
const publishTimeout = 10 * time.Second

// Manager serves the secrets of the bootstraps it rewrote and keeps them
// up to date with the operator's files. It is safe for concurrent use.
type Manager struct {
	log     Logger
	server  ads.Server  // where the secrets are served (UpdateSecret)
	convert ads.Convert // what makes a secret of a pair
	pubMu   sync.Mutex  // publishes one at a time, each the latest of its secret
	// Settle and Poll are DefaultSettle and DefaultPoll unless set before
	// Run.
	Settle, Poll time.Duration
	// OnChange, when set before Run, is called after the certificates in
	// use changed (for metrics): on a goroutine of its own, once for any
	// number of changes made while it had not begun yet (changed).
	OnChange    func()
	onChangeDue atomic.Bool // a call of OnChange is due and has not begun
	// batches counts the reads of a bootstrap's secrets under way
	// (refreshAll): changed waits for their end, and batchChanged says
	// one is due then (a start that read 1,000 certificates in the
	// background while OnChange listed them ran it again and again).
	batches      atomic.Int32
	batchChanged atomic.Bool

	// mu guards the maps; it is never held while a file is read or a
	// folder walked, so that status, a reload and a stop never wait on
	// the operator's files.
	mu      sync.Mutex
	secrets map[string]Secret    // by name: every secret served, kept up to date
	inUse   map[string]bool      // by name: those of the latest bootstrap
	served  map[string]*material // by name: what the server serves
	failed  map[string]string    // by name: the refusal logged last
	refused map[string]refusal   // by name: the pair Envoy rejected last, until the files change
	reads   uint64               // the reads of a secret's files begun, numbered
	newest  map[string]uint64    // by name: the number of the read served or refused last
	seen    map[string]string    // by name: which files the last read met (or its error)
	kick    chan struct{}        // the set of files changed: watch again
	polled  string               // why some files are read by the poll alone ("" when all are watched)

	background *Loading // armed by LoadNextInBackground for the next Serve

	watching  chan struct{} // closed once Run watches (or polls) the files: the tests wait for it
	noInotify bool          // the tests' stand-in for inotify that cannot be had
	noWatches bool          // the tests' stand-in for inotify watches that cannot be had
}

// NewManager returns a Manager that logs to log and serves its secrets on
// server (the agent's ADS server), converted by convert (envoy/xds.Convert).
func NewManager(log Logger, server ads.Server, convert ads.Convert) *Manager {
	return &Manager{
		log:      log,
		server:   server,
		convert:  convert,
		Settle:   DefaultSettle,
		Poll:     DefaultPoll,
		secrets:  map[string]Secret{},
		inUse:    map[string]bool{},
		served:   map[string]*material{},
		failed:   map[string]string{},
		refused:  map[string]refusal{},
		newest:   map[string]uint64{},
		seen:     map[string]string{},
		kick:     make(chan struct{}, 1),
		watching: make(chan struct{}),
	}
}

// RewriteBootstrap is the one call between a bootstrap and the copy Envoy
// runs: it rewrites data (the file name says its format) with Rewrite
// (runDir is the agent's private run folder, where the server's socket is),
// and serves and watches its secrets (Serve).
func (m *Manager) RewriteBootstrap(data []byte, name, runDir string) ([]byte, error) {
	res, err := Rewrite(data, name, runDir)
	if err != nil {
		return nil, err
	}
	if err := m.Serve(res); err != nil {
		return nil, err
	}
	return res.Data, nil
}

// EditBootstrap is RewriteBootstrap on a bootstrap decoded already (doc, a
// YAML document), which it changes in place (Edit); it reports whether it
// changed it.
func (m *Manager) EditBootstrap(doc *yaml.Node, runDir string) (bool, error) {
	res, err := Edit(doc, runDir)
	if err != nil {
		return false, err
	}
	return len(res.Secrets) > 0, m.Serve(res)
}

// Serve serves the secrets a rewrite found on the server before Envoy can
// ask for them, and watches their files from then on. A pair that is not
// whole keeps the one served (logged); with none served yet, it is an
// error naming the file, as Envoy would refuse it. Armed by
// LoadNextInBackground, it returns before the files are read, and the
// Loading it returned says how the read ended.
func (m *Manager) Serve(res Result) error {
	for _, s := range res.Skipped {
		m.log.Warnf("certificates: %s: left as it is (read once by Envoy, not watched)", s)
	}
	m.mu.Lock()
	bg := m.background
	m.background = nil
	m.mu.Unlock()
	if len(res.Secrets) == 0 {
		bg.end(nil)
		return nil
	}
	if bg != nil {
		bg.started.Store(true)
		m.use(res.Secrets)
		// One goroutine: the start it overlaps needs the other processors.
		go func() { bg.end(m.refreshAll(res.Secrets, 1)) }()
		return nil
	}
	if err := m.refreshAll(res.Secrets, runtime.GOMAXPROCS(0)); err != nil {
		return err
	}
	m.use(res.Secrets)
	return nil
}

// use makes secrets the latest bootstrap's, and watches their files.
func (m *Manager) use(secrets []Secret) {
	m.mu.Lock()
	defer m.mu.Unlock()
	// Secrets the previous bootstrap had stay watched: an epoch still
	// draining, or the serving one after a refused reload, may read them.
	m.inUse = map[string]bool{}
	for _, s := range secrets {
		m.secrets[s.Name] = s
		m.inUse[s.Name] = true
	}
	select {
	case m.kick <- struct{}{}:
	default:
	}
	m.changed() // the certificates in use may be others
}

// refresh reads s's files, holding no lock, and serves them when they
// changed and are whole (read). With must, a secret never served yet is
// an error when its files are not whole. moved reports that the files
// read are others than the last read met (a re-pointed link, a file
// renamed into place) or fail otherwise: the folders to watch may have
// changed.
func (m *Manager) refresh(s Secret, must bool) (moved bool, err error) {
	moved, changed, err := m.read(s, must)
	if changed {
		m.publish(s)
	}
	return moved, err
}

// read reads s's files, holding no lock, and takes them to serve when they
// changed and are whole (takeLocked): changed says the caller publishes
// them. Of two reads of the same secret, the later one begun wins,
// whichever ends first.
func (m *Manager) read(s Secret, must bool) (moved, changed bool, err error) {
	m.mu.Lock()
	m.reads++
	n := m.reads
	m.mu.Unlock()
	mat, err := load(s)
	m.mu.Lock()
	seen := fmt.Sprint(err)
	if mat != nil {
		seen = mat.files
	}
	moved = m.seen[s.Name] != seen
	m.seen[s.Name] = seen
	if n < m.newest[s.Name] {
		m.mu.Unlock()
		return moved, false, nil // a later read of these files was taken already
	}
	m.newest[s.Name] = n
	changed, err = m.takeLocked(s, mat, err, must)
	m.mu.Unlock()
	return moved, changed, err
}

// takeLocked takes mat, what load read of s's files (or err), and reports
// whether the secret served changed: the caller publishes it.
func (m *Manager) takeLocked(s Secret, mat *material, err error, must bool) (bool, error) {
	old := m.served[s.Name]
	if err != nil {
		if old == nil && must {
			return false, fmt.Errorf("certificates: %w", err)
		}
		if msg := err.Error(); m.failed[s.Name] != msg {
			m.failed[s.Name] = msg
			if old == nil {
				m.log.Errorf("certificates: %v; not served until it is whole", err)
			} else {
				m.log.Errorf("certificates: renewal not taken: %v; the certificate in use (%s, serial %s) goes on serving", err, old.info.File, old.info.Serial)
			}
		}
		return false, nil
	}
	delete(m.failed, s.Name)
	if old != nil && old.sum == mat.sum || m.refused[s.Name].sum == mat.sum {
		return false, nil // served already, or Envoy rejected these very files
	}
	if mat.served, err = m.convert(ads.SecretType, secretNode(s, mat)); err != nil {
		err = fmt.Errorf("certificates: %s: %w", s.CertFile, err)
		if old == nil && must {
			return false, err
		}
		m.log.Errorf("%v", err)
		return false, nil
	}
	m.served[s.Name] = mat
	delete(m.refused, s.Name)
	if mat.previous = old; old != nil {
		old.previous = nil // one step back is all a rejection needs
		m.log.Infof("certificates: %s renewed: serial %s, not after %s (new handshakes use it; open connections go on)", s.CertFile, mat.info.Serial, mat.info.NotAfter.UTC().Format(time.RFC3339))
	}
	m.changed()
	return true, nil
}

// changed calls OnChange on a goroutine of its own, unless a call is due
// already: that one, not begun yet, reads what this change left. A start
// that served 1,000 certificates called it 1,000 times, each listing all
// of them: 160 ms of the agent's processor while Envoy started.
func (m *Manager) changed() {
	if m.batches.Load() > 0 {
		m.batchChanged.Store(true) // the batch calls it once, at its end
		return
	}
	if m.OnChange == nil || m.onChangeDue.Swap(true) {
		return
	}
	go func() {
		m.onChangeDue.Store(false)
		m.OnChange()
	}()
}

// refusal is a pair Envoy rejected: its files' digest, and why.
type refusal struct {
	sum [32]byte
	why string
}

// publish serves the secret s as it is served now (the latest read taken)
// to every Envoy, and waits, within publishTimeout, for those that ask for
// it to answer. A pair Envoy rejects is as a pair that is not whole: its
// reason is logged and shown in status, the pair before it is served again
// (Envoy went on with it; an epoch that starts later gets it too), and the
// same files are not offered again.
func (m *Manager) publish(s Secret) {
	m.pubMu.Lock()
	defer m.pubMu.Unlock()
	m.mu.Lock()
	mat := m.served[s.Name]
	m.mu.Unlock()
	if mat == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), publishTimeout)
	defer cancel()
	_, err := m.server.UpdateSecret(ctx, mat.served)
	var rej *ads.RejectedError
	switch {
	case errors.As(err, &rej):
		msg := fmt.Sprintf("Envoy rejected the certificate (serial %s): %s", mat.info.Serial, rej.Detail)
		m.mu.Lock()
		back := mat.previous
		if m.served[s.Name] == mat {
			m.refused[s.Name] = refusal{sum: mat.sum, why: s.CertFile + ": " + msg}
			if back != nil {
				m.served[s.Name] = back
			}
		}
		m.mu.Unlock()
		if back == nil {
			m.log.Errorf("certificates: %s: %s", s.CertFile, msg)
			return
		}
		m.log.Errorf("certificates: %s: %s; the certificate in use (serial %s) goes on serving", s.CertFile, msg, back.info.Serial)
		if _, err := m.server.UpdateSecret(ctx, back.served); err != nil {
			m.log.Errorf("certificates: %s: serving serial %s again: %v", s.CertFile, back.info.Serial, err)
		}
	case err != nil:
		m.log.Errorf("certificates: %s (serial %s): %v", s.CertFile, mat.info.Serial, err)
	}
}

// Served is a secret a Manager serves, as a live upgrade hands it over to
// the next agent (Adopt): its files, and whether the latest bootstrap names
// it (status lists those).
type Served struct {
	Secret
	InUse bool `json:"in_use"`
}

// Served lists the secrets m serves.
func (m *Manager) Served() []Served {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Served
	for _, s := range m.sortedLocked() {
		out = append(out, Served{Secret: s, InUse: m.inUse[s.Name]})
	}
	return out
}

// Adopt takes over the secrets the agent before a live upgrade served
// (Served): it reads each pair and serves it, as RewriteBootstrap did, and
// watches their files from then on. A pair that is not whole now is
// logged, and served once it is (the adopted Envoys hold the one they
// had); the error names the secrets that could not be read.
func (m *Manager) Adopt(ss []Served) {
	m.mu.Lock()
	for _, s := range ss {
		m.secrets[s.Name] = s.Secret
		if s.InUse {
			m.inUse[s.Name] = true
		}
	}
	m.mu.Unlock()
	for _, s := range ss {
		_, _ = m.refresh(s.Secret, false)
	}
	select {
	case m.kick <- struct{}{}:
	default:
	}
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
		c.Error = cmp.Or(m.failed[s.Name], m.refused[s.Name].why)
		out = append(out, c)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].File < out[j].File })
	return out
}

// setPolled records why some files are read by the poll alone ("" once
// all are watched), and logs it when it changes.
func (m *Manager) setPolled(why string) {
	m.mu.Lock()
	changed := m.polled != why
	m.polled = why
	m.mu.Unlock()
	switch {
	case changed && why != "":
		m.log.Errorf("certificates: %s", why)
	case changed:
		m.log.Infof("certificates: every folder of certificates is watched again")
	}
}

// Polled says why renewals of some certificates are read by the poll alone,
// every Poll, instead of at once; "" when every folder is watched.
func (m *Manager) Polled() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.polled
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
	resolved, errs := filetrust.ResolveEach(files)
	for i, f := range files {
		want[filepath.Dir(f)] |= fileDirMask
		r := resolved[i]
		if errs[i] != nil {
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
		m.setPolled(fmt.Sprintf("no inotify instance (%v: fs.inotify.max_user_instances reached?): renewals are read every %s instead of at once", err, m.Poll))
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
		unwatched := 0
		for d, mask := range m.watchDirs() {
			wd, err := unix.InotifyAddWatch(fd, d, mask|unix.IN_MASK_ADD)
			if err == nil && m.noWatches {
				err = unix.ENOSPC
			}
			if errors.Is(err, unix.ENOSPC) {
				unwatched++ // fs.inotify.max_user_watches reached: the poll covers it
				continue
			}
			if err != nil {
				continue // a folder that is not there yet: the poll covers it
			}
			now[d], used[wd] = wd, true
		}
		if unwatched > 0 {
			m.setPolled(fmt.Sprintf("%d folders of certificates are not watched (fs.inotify.max_user_watches reached): their renewals are read every %s instead of at once", unwatched, m.Poll))
		} else {
			m.setPolled("")
		}
		for _, wd := range watched {
			if !used[wd] {
				_, _ = unix.InotifyRmWatch(fd, uint32(wd))
			}
		}
		watched = now
	}
	rewatch()
	close(m.watching)
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

//go:build linux

package filetrust

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// The walk resolves a path as the kernel does (path_resolution(7)), one
// component at a time from a folder held open (O_PATH), never by its text:
// ".." is the parent of the folder the walk stands in, after any link
// followed before it; a link's target is read from the link itself and
// walked the same way; a path the kernel would refuse (longer than
// PATH_MAX, a name longer than NAME_MAX, more than 40 links) is refused.
// Each folder and entry met is judged as it is opened, so the verdict is
// about the very files open(2) and execve(2) reach.

// maxLinks bounds the symbolic links followed, as the kernel's ELOOP does
// (MAXSYMLINKS).
const maxLinks = 40

// pathMax is the kernel's PATH_MAX: the longest path it takes, its
// terminating NUL included (ENAMETOOLONG past it).
const pathMax = unix.PathMax

// nameMax is the longest file name (one component) Linux file systems take.
const nameMax = 255

// folder is a folder the walk stands in or passed through: open (O_PATH),
// with its stat and its path from /.
type folder struct {
	fd   int
	st   unix.Stat_t
	path string
	// shared: the fd is a memo's (CheckEach), which closes it.
	shared bool
}

// memo holds the folders the walks of one CheckEach passed through and
// judged, open, by their path from / as the walk spelled it: the next walk
// that passes through the same folder takes it from here instead of
// opening and judging it again. A path from / names one sequence of
// entries opened one after the other, so it reaches what the walk before
// reached, held open since.
type memo map[string]folder

func (m memo) close() {
	for _, f := range m {
		unix.Close(f.fd)
	}
}

// walk is one resolution of a path.
type walk struct {
	t *Trusted // nil: resolve only, judge nothing
	// ownerFree leaves the owner of the file reached unjudged (its mode
	// still is): CheckFolder's judgeOwner false.
	ownerFree bool
	orig      string // the path asked about, for errors
	root      folder
	stack     []folder // from / to the folder the walk stands in; stack[0] is root
	links     int
	// linkDirs are the folders of the links followed, in order.
	linkDirs []string
	// memo, when set, keeps the folders judged on the way (CheckEach).
	memo memo
}

// Resolved is a file a walk reached.
type Resolved struct {
	// File is the file, open with O_PATH: judged, not yet opened for
	// reading or executing. The caller closes it.
	File *os.File
	// Path is where the file is, links resolved.
	Path string
	// Stat is the file's.
	Stat unix.Stat_t
	// LinkDirs are the folders of the symbolic links followed on the way,
	// in order (at most 40): a change in one of them changes what the path
	// reaches.
	LinkDirs []string
}

// WalkError is a path the walk cannot resolve: a missing file, a path too
// long, too many links, a file where a folder must be, a magic link. Every
// caller refuses such a path, as it refuses one that others can change.
type WalkError struct {
	Path string // the path asked about
	At   string // where the walk stopped
	Err  error
}

func (e *WalkError) Error() string {
	if e.At == "" || e.At == e.Path {
		return fmt.Sprintf("%s: %v", e.Path, e.Err)
	}
	return fmt.Sprintf("%s: at %s: %v", e.Path, e.At, e.Err)
}

func (e *WalkError) Unwrap() error { return e.Err }

// errMagicLink is a link of /proc (/proc/self, /proc/PID/fd/N, ...): the
// kernel jumps to the file it stands for, whatever its text says, so its
// text cannot be judged (openat2's RESOLVE_NO_MAGICLINKS refuses them too).
var errMagicLink = errors.New("a link in /proc (a magic link, which the kernel follows to an open file, not to its text): not followed")

// errChanged is a folder whose parent is not the one the walk came from:
// it was moved while the walk went through it.
var errChanged = errors.New("changed while it was checked (moved or replaced): check again")

// Resolve follows path as the kernel would, judging nothing, and returns
// the file it reaches.
func Resolve(path string) (*Resolved, error) {
	return resolve(nil, path)
}

// ResolveEach is Resolve of each of paths, the folders they share opened
// once (as CheckEach judges them once): the watch of 2,000 certificate
// files in one folder resolved the folder's path 2,000 times. res[i] and
// errs[i] are paths[i]'s; the caller closes each File.
func ResolveEach(paths []string) (res []*Resolved, errs []error) {
	m := memo{}
	defer m.close()
	res, errs = make([]*Resolved, len(paths)), make([]error, len(paths))
	for i, p := range paths {
		res[i], errs[i] = resolveWith(&walk{orig: p, memo: m}, p)
	}
	return res, errs
}

// resolve walks path, judged by t when t is not nil.
func resolve(t *Trusted, path string) (*Resolved, error) {
	return resolveWith(&walk{t: t, orig: path}, path)
}

func resolveWith(w *walk, path string) (*Resolved, error) {
	defer w.close()
	if len(path) >= pathMax {
		return nil, w.fail("", unix.ENAMETOOLONG)
	}
	if path == "" {
		return nil, w.fail("", unix.ENOENT)
	}
	if err := w.openRoot(); err != nil {
		return nil, err
	}
	names := strings.Split(path, "/")
	if !strings.HasPrefix(path, "/") {
		// The kernel starts from the working folder: walk to it first
		// (its real path), so that its folders are judged and ".." from
		// it is its real parent.
		wd, err := unix.Getwd()
		if err != nil {
			return nil, w.fail("", fmt.Errorf("the working folder: %w", err))
		}
		names = append(strings.Split(wd, "/"), names...)
	}
	return w.run(names)
}

func (w *walk) openRoot() error {
	if f, ok := w.memo["/"]; ok {
		w.root = f
		w.stack = []folder{f}
		return nil
	}
	fd, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return w.fail("/", err)
	}
	w.root = folder{fd: fd, path: "/"}
	if err := unix.Fstat(fd, &w.root.st); err != nil {
		return w.fail("/", err)
	}
	w.stack = []folder{w.root}
	if w.t != nil {
		if who := w.t.writers(&w.root.st); who != "" {
			return &Error{Path: w.orig, At: "/", Who: who, What: "write"}
		}
	}
	w.keep(&w.stack[0])
	return nil
}

// keep gives f, a folder judged on the way, to the walk's memo (if it
// has one), which closes it.
func (w *walk) keep(f *folder) {
	if w.memo != nil {
		f.shared = true
		w.memo[f.path] = *f
	}
}

// run walks names from the folder on top of the stack.
func (w *walk) run(names []string) (*Resolved, error) {
	for len(names) > 0 {
		name := names[0]
		names = names[1:]
		switch name {
		case "", ".":
			if len(names) == 0 {
				return w.here()
			}
			continue
		case "..":
			if err := w.up(); err != nil {
				return nil, err
			}
			if len(names) == 0 {
				return w.here()
			}
			continue
		}
		if len(name) > nameMax {
			return nil, w.fail(w.join(name), unix.ENAMETOOLONG)
		}
		cur := w.top()
		at := w.join(name)
		if f, ok := w.memo[at]; ok && more(names) {
			w.stack = append(w.stack, f) // judged on the way before, as it is now
			continue
		}
		fd, err := unix.Openat(cur.fd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, w.fail(at, err)
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			return nil, w.fail(at, err)
		}
		last := !more(names)
		if err := w.judge(cur, at, &st, last); err != nil {
			unix.Close(fd)
			return nil, err
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFLNK:
			target, err := w.follow(fd, at)
			unix.Close(fd)
			if err != nil {
				return nil, err
			}
			w.linkDirs = append(w.linkDirs, cur.path)
			if strings.HasPrefix(target, "/") {
				w.toRoot()
			}
			// A trailing "/" after a link to a file stays a trailing
			// "/": the kernel then wants a folder.
			names = append(strings.Split(target, "/"), names...)
		case unix.S_IFDIR:
			if !more(names) {
				return w.resolved(fd, at, st), nil
			}
			w.stack = append(w.stack, folder{fd: fd, st: st, path: at})
			w.keep(&w.stack[len(w.stack)-1])
		default:
			if len(names) > 0 {
				// "file/", "file/.", "file/x": the kernel wants a folder.
				unix.Close(fd)
				return nil, w.fail(at, unix.ENOTDIR)
			}
			return w.resolved(fd, at, st), nil
		}
	}
	return w.here()
}

// more reports whether names hold a component still to walk: a name or
// "..", not only "" and ".".
func more(names []string) bool {
	for _, n := range names {
		if n != "" && n != "." {
			return true
		}
	}
	return false
}

// judge refuses the entry at (st) of folder cur when someone untrusted can
// change it: own it (a folder's owner can replace what is in it; a file's
// owner can chmod it), replace it in cur, or, for the last one, write it.
func (w *walk) judge(cur folder, at string, st *unix.Stat_t, last bool) error {
	if w.t == nil {
		return nil
	}
	link := st.Mode&unix.S_IFMT == unix.S_IFLNK
	free := last && w.ownerFree
	if !w.t.uids[st.Uid] && !link && !free {
		if last {
			return &Error{Path: w.orig, At: at, Who: w.t.owner(st.Uid), What: "write"}
		}
		return &Error{Path: w.orig, At: at, Who: fmt.Sprintf("uid %d%s", st.Uid, userName(st.Uid)), What: "own"}
	}
	if who := w.t.replacers(&cur.st, st); who != "" {
		return &Error{Path: w.orig, At: cur.path, Who: who, What: "write in"}
	}
	if last && !link {
		if who := w.t.writersBut(st, free); who != "" {
			return &Error{Path: w.orig, At: at, Who: who, What: "write"}
		}
	}
	return nil
}

// follow reads the target of the link open at fd (O_PATH|O_NOFOLLOW).
func (w *walk) follow(fd int, at string) (string, error) {
	if w.links++; w.links > maxLinks {
		return "", w.fail(at, unix.ELOOP)
	}
	var fs unix.Statfs_t
	if err := unix.Fstatfs(fd, &fs); err != nil {
		return "", w.fail(at, err)
	}
	if fs.Type == unix.PROC_SUPER_MAGIC {
		return "", w.fail(at, errMagicLink)
	}
	buf := make([]byte, pathMax)
	n, err := unix.Readlinkat(fd, "", buf)
	if err != nil {
		return "", w.fail(at, err)
	}
	if n == 0 {
		return "", w.fail(at, unix.ENOENT)
	}
	return string(buf[:n]), nil
}

// up goes to the parent of the folder the walk stands in, as ".." does:
// the folder it came from (at / it stays), which the kernel must agree is
// the parent.
func (w *walk) up() error {
	if len(w.stack) == 1 {
		return nil
	}
	cur, parent := w.top(), w.stack[len(w.stack)-2]
	fd, err := unix.Openat(cur.fd, "..", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return w.fail(cur.path+"/..", err)
	}
	var st unix.Stat_t
	err = unix.Fstat(fd, &st)
	unix.Close(fd)
	if err != nil {
		return w.fail(cur.path+"/..", err)
	}
	if st.Dev != parent.st.Dev || st.Ino != parent.st.Ino {
		return w.fail(cur.path, errChanged)
	}
	w.release(cur)
	w.stack = w.stack[:len(w.stack)-1]
	return nil
}

// release closes f unless a memo holds it.
func (w *walk) release(f folder) {
	if !f.shared {
		unix.Close(f.fd)
	}
}

// toRoot goes back to / for an absolute link target.
func (w *walk) toRoot() {
	for _, f := range w.stack[1:] {
		w.release(f)
	}
	w.stack = w.stack[:1]
}

func (w *walk) top() folder { return w.stack[len(w.stack)-1] }

func (w *walk) join(name string) string {
	if p := w.top().path; p != "/" {
		return p + "/" + name
	}
	return "/" + name
}

// here is the folder the walk stands in as the file reached: the path
// named a folder ("/", "a/..", "a/."). Its own writers are judged here,
// as the last entry's are in run.
func (w *walk) here() (*Resolved, error) {
	cur := w.top()
	if w.t != nil && len(w.stack) > 1 {
		if who := w.t.writersBut(&cur.st, w.ownerFree); who != "" {
			return nil, &Error{Path: w.orig, At: cur.path, Who: who, What: "write"}
		}
	}
	fd, err := unix.Dup(cur.fd)
	if err != nil {
		return nil, w.fail(cur.path, err)
	}
	unix.CloseOnExec(fd)
	return w.resolved(fd, cur.path, cur.st), nil
}

func (w *walk) resolved(fd int, path string, st unix.Stat_t) *Resolved {
	return &Resolved{File: os.NewFile(uintptr(fd), path), Path: path, Stat: st, LinkDirs: w.linkDirs}
}

func (w *walk) fail(at string, err error) error {
	return &WalkError{Path: w.orig, At: at, Err: err}
}

func (w *walk) close() {
	for _, f := range w.stack {
		w.release(f)
	}
	w.stack = nil
}

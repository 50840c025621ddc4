//go:build linux

// Package filetrust finds who, besides the users an agent trusts (root and
// its own), can change a file the agent runs or reads: by writing it, or by
// replacing it or any folder on the way to it (every ancestor, each
// symbolic link followed and its own folder checked too).
//
// Writable means by the owner, by a group with a member that is not
// trusted, or by every user. An entry of a sticky folder (such as /tmp)
// that a trusted user owns cannot be replaced by the others who may write
// in that folder; any other entry can. POSIX ACLs are not read.
package filetrust

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// maxLinks bounds the symbolic links followed, as the kernel's ELOOP does.
const maxLinks = 40

// Trusted are the users whose writes a check accepts.
type Trusted struct {
	uids map[uint32]bool
	// groups caches the answer for each group id.
	groups map[uint32]string
}

// Default trusts root and the user the process runs as (the service's
// user under the units).
func Default() *Trusted {
	return New(0, uint32(os.Geteuid()))
}

// New trusts the given uids.
func New(uids ...uint32) *Trusted {
	t := &Trusted{uids: map[uint32]bool{}, groups: map[uint32]string{}}
	for _, u := range uids {
		t.uids[u] = true
	}
	return t
}

// Error says who else can change a file, and through which path.
type Error struct {
	Path string // the file checked
	At   string // the file or folder they can write, Path or one on its way
	Who  string // who can write it: "uid 1001 (bob), its owner", "every user", ...
	What string // "write" (At's content), "write in" or "own" (At is a folder on the way)
}

func (e *Error) Error() string {
	switch {
	case e.What == "write" && e.At == e.Path:
		return fmt.Sprintf("%s can be written by %s", e.Path, e.Who)
	case e.What == "write":
		return fmt.Sprintf("%s leads to %s, which can be written by %s", e.Path, e.At, e.Who)
	case e.What == "own":
		return fmt.Sprintf("%s can be replaced by %s, who owns %s on its way", e.Path, e.Who, e.At)
	}
	return fmt.Sprintf("%s can be replaced by %s, who can write in %s on its way", e.Path, e.Who, e.At)
}

// Check returns an *Error when anyone but the trusted users can change the
// file at path (its content, or what the path leads to), nil when nobody
// else can, and another error when the path cannot be walked.
func (t *Trusted) Check(path string) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	return t.walk(abs, abs, 0)
}

// walk checks each folder from / down to p and then p itself; orig is the
// path the caller asked about, for the error.
func (t *Trusted) walk(orig, p string, links int) error {
	parts := strings.Split(strings.TrimPrefix(filepath.Clean(p), "/"), "/")
	cur := "/"
	curFi, err := os.Lstat(cur)
	if err != nil {
		return err
	}
	if who := t.writers(curFi); who != "" {
		return &Error{Path: orig, At: cur, Who: who, What: "write"}
	}
	for i, name := range parts {
		if name == "" {
			continue
		}
		next := filepath.Join(cur, name)
		fi, err := os.Lstat(next)
		if err != nil {
			return err
		}
		last := i == len(parts)-1
		if uid := stat(fi).Uid; !t.uids[uid] && fi.Mode()&os.ModeSymlink == 0 {
			// Its owner can chmod it, whatever its mode; a folder's owner
			// can replace whatever is in it.
			if last {
				return &Error{Path: orig, At: next, Who: t.owner(uid), What: "write"}
			}
			return &Error{Path: orig, At: next, Who: fmt.Sprintf("uid %d%s", uid, userName(uid)), What: "own"}
		}
		if who := t.replacers(curFi, fi); who != "" {
			return &Error{Path: orig, At: cur, Who: who, What: "write in"}
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			if links++; links > maxLinks {
				return fmt.Errorf("%s: too many symbolic links", orig)
			}
			target, err := os.Readlink(next)
			if err != nil {
				return err
			}
			if !filepath.IsAbs(target) {
				target = filepath.Join(cur, target)
			}
			return t.walk(orig, filepath.Join(append([]string{target}, parts[i+1:]...)...), links)
		}
		// A folder's own writers matter for its entries (checked at the
		// next step); the file's, for its content.
		if last {
			if who := t.writers(fi); who != "" {
				return &Error{Path: orig, At: next, Who: who, What: "write"}
			}
		} else if !fi.IsDir() {
			return fmt.Errorf("%s: %s is not a folder", orig, next)
		}
		cur, curFi = next, fi
	}
	return nil
}

// replacers is who, untrusted, can replace entry (rename it, or remove it
// and make another) in folder dir: "" for nobody.
func (t *Trusted) replacers(dir, entry os.FileInfo) string {
	dst := stat(dir)
	if !t.uids[dst.Uid] {
		return t.owner(dst.Uid)
	}
	who := t.writers(dir)
	if who == "" {
		return ""
	}
	if dir.Mode()&os.ModeSticky != 0 {
		// The others may write in it, but not touch what they do not own.
		if uid := stat(entry).Uid; !t.uids[uid] {
			return t.owner(uid)
		}
		return ""
	}
	return who
}

// writers is who, untrusted, can write fi: "" for nobody.
func (t *Trusted) writers(fi os.FileInfo) string {
	st := stat(fi)
	mode := fi.Mode()
	var who []string
	if !t.uids[st.Uid] { // an owner can chmod what it owns, whatever the mode
		who = append(who, t.owner(st.Uid))
	}
	if mode&0o020 != 0 {
		if g := t.group(st.Gid); g != "" {
			who = append(who, g)
		}
	}
	if mode&0o002 != 0 {
		who = append(who, "every user (mode "+fmt.Sprintf("%04o", mode.Perm())+")")
	}
	return strings.Join(who, " and ")
}

func (t *Trusted) owner(uid uint32) string {
	return fmt.Sprintf("uid %d%s, its owner", uid, userName(uid))
}

// group is "" when gid's members are all trusted, else names the group and
// its untrusted members.
func (t *Trusted) group(gid uint32) string {
	if g, ok := t.groups[gid]; ok {
		return g
	}
	name, members, known := groupMembers(gid)
	var others []string
	for _, m := range members {
		if uid, ok := passwdUID(m); !ok || !t.uids[uid] {
			others = append(others, m)
		}
	}
	desc := ""
	switch {
	case !known:
		desc = fmt.Sprintf("group %d, whose members are not listed in /etc/group", gid)
	case len(others) > 0:
		desc = fmt.Sprintf("group %d (%s), whose members include %s", gid, name, strings.Join(others, ", "))
	}
	t.groups[gid] = desc
	return desc
}

func stat(fi os.FileInfo) *syscall.Stat_t {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st
	}
	return &syscall.Stat_t{Uid: ^uint32(0), Gid: ^uint32(0)}
}

// The databases read: /etc/passwd and /etc/group (as the units' users are).
var (
	passwdFile = "/etc/passwd"
	groupFile  = "/etc/group"
)

// records reads the colon-separated lines of file.
func records(file string) [][]string {
	f, err := os.Open(file)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out [][]string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		out = append(out, strings.Split(line, ":"))
	}
	return out
}

// groupMembers lists a group's members: its /etc/group list, and the users
// whose primary group it is.
func groupMembers(gid uint32) (name string, members []string, known bool) {
	id := strconv.FormatUint(uint64(gid), 10)
	for _, r := range records(groupFile) {
		if len(r) >= 4 && r[2] == id {
			name, known = r[0], true
			for _, m := range strings.Split(r[3], ",") {
				if m != "" {
					members = append(members, m)
				}
			}
		}
	}
	for _, r := range records(passwdFile) {
		if len(r) >= 4 && r[3] == id {
			members = append(members, r[0])
		}
	}
	return name, members, known
}

func passwdUID(name string) (uint32, bool) {
	for _, r := range records(passwdFile) {
		if len(r) >= 3 && r[0] == name {
			n, err := strconv.ParseUint(r[2], 10, 32)
			return uint32(n), err == nil
		}
	}
	return 0, false
}

func userName(uid uint32) string {
	id := strconv.FormatUint(uint64(uid), 10)
	for _, r := range records(passwdFile) {
		if len(r) >= 3 && r[2] == id {
			return " (" + r[0] + ")"
		}
	}
	return ""
}

// IsUntrusted reports whether err says someone untrusted can change a file.
func IsUntrusted(err error) bool {
	var e *Error
	return errors.As(err, &e)
}

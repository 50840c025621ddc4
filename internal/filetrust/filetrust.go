//go:build linux

// Package filetrust finds who, besides the users an agent trusts (root and
// its own), can change a file the agent runs or reads: by writing it, or by
// replacing it or any folder on the way to it (every ancestor, each
// symbolic link followed and its own folder checked too). A path is walked
// as the kernel resolves it, one component at a time from folders held
// open, so that ".." after a link, a long path or a link's target means
// what it means to open(2) and execve(2) (walk.go); a path it cannot walk
// is refused too.
//
// Writable means by the owner, by a group with a member that is not
// trusted, or by every user. An entry of a sticky folder (such as /tmp)
// that a trusted user owns cannot be replaced by the others who may write
// in that folder; any other entry can. POSIX ACLs are not read.
package filetrust

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

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
	What string // "write" (At's content), "write in" or "own" (At is a folder on the way), "make in" (Path does not exist yet, At is where it would be made)
}

func (e *Error) Error() string {
	switch {
	case e.What == "write" && e.At == e.Path:
		return fmt.Sprintf("%s can be written by %s", e.Path, e.Who)
	case e.What == "write":
		return fmt.Sprintf("%s leads to %s, which can be written by %s", e.Path, e.At, e.Who)
	case e.What == "make in":
		return fmt.Sprintf("%s does not exist, and %s, where it would be made, can be written by %s, who could make it first", e.Path, e.At, e.Who)
	case e.What == "own":
		return fmt.Sprintf("%s can be replaced by %s, who owns %s on its way", e.Path, e.Who, e.At)
	}
	return fmt.Sprintf("%s can be replaced by %s, who can write in %s on its way", e.Path, e.Who, e.At)
}

// Check returns an *Error when anyone but the trusted users can change the
// file at path (its content, or what the path leads to), nil when nobody
// else can, and a *WalkError when the path cannot be walked: any error
// refuses the path. The path is walked as the kernel resolves it (walk.go).
func (t *Trusted) Check(path string) error {
	r, err := resolve(t, path)
	if err != nil {
		return err
	}
	return r.File.Close()
}

// CheckEach is Check of each of paths, in order: the folders they share
// are opened and judged once, by the first walk through them, and held
// open for the walks after it (1,000 certificates and keys in one folder
// took 150 ms to check one by one, every folder above each file opened and
// judged again).
func (t *Trusted) CheckEach(paths []string) []error {
	m := memo{}
	defer m.close()
	errs := make([]error, len(paths))
	for i, p := range paths {
		r, err := resolveWith(&walk{t: t, orig: p, memo: m}, p)
		if err == nil {
			err = r.File.Close()
		}
		errs[i] = err
	}
	return errs
}

// Open is Check, and the file judged, open with O_PATH: reopen that (as
// safefile does) to read what was judged, never the path again.
func (t *Trusted) Open(path string) (*Resolved, error) {
	return resolve(t, path)
}

// replacers is who, untrusted, can replace entry (rename it, or remove it
// and make another) in folder dir: "" for nobody.
func (t *Trusted) replacers(dir, entry *unix.Stat_t) string {
	if !t.uids[dir.Uid] {
		return t.owner(dir.Uid)
	}
	who := t.writers(dir)
	if who == "" {
		return ""
	}
	if dir.Mode&unix.S_ISVTX != 0 {
		// The others may write in it, but not touch what they do not own.
		if uid := entry.Uid; !t.uids[uid] {
			return t.owner(uid)
		}
		return ""
	}
	return who
}

// writers is who, untrusted, can write st: "" for nobody.
func (t *Trusted) writers(st *unix.Stat_t) string {
	return t.writersBut(st, false)
}

// writersBut is writers, leaving st's owner out when ownerFree.
func (t *Trusted) writersBut(st *unix.Stat_t, ownerFree bool) string {
	var who []string
	if !t.uids[st.Uid] && !ownerFree { // an owner can chmod what it owns, whatever the mode
		who = append(who, t.owner(st.Uid))
	}
	if st.Mode&0o020 != 0 {
		if g := t.group(st.Gid); g != "" {
			who = append(who, g)
		}
	}
	if st.Mode&0o002 != 0 {
		who = append(who, fmt.Sprintf("every user (mode %04o)", st.Mode&0o7777))
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

// IsUntrusted reports whether err says someone untrusted can change a file.
func IsUntrusted(err error) bool {
	var e *Error
	return errors.As(err, &e)
}

//go:build linux

package filetrust

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// fuzzNames are the components a fuzzed path is made of: the entries of
// the layout FuzzCheck makes, "..", "." and "" (a doubled or trailing "/").
var fuzzNames = []string{"a", "u", "f", "g", "w", "l", "r", "p", "x", "..", ".", "", "lf", "loop", "back", "s", "top"}

// FuzzCheck compares the check's verdict with what the kernel reaches: for
// a path made of the layout's names, links and "..", Resolve must reach the
// file stat(2) reaches (or fail when it fails), and a path Check accepts
// must reach, for the kernel, a file that only root can change.
func FuzzCheck(f *testing.F) {
	if os.Geteuid() != 0 {
		f.Skip("needs root: the layout has files of uid 1001")
	}
	root := f.TempDir()
	untrusted := fuzzLayout(f, root)
	for _, seed := range [][]byte{{0, 2}, {0, 5, 9, 0, 2}, {0, 12}, {0, 7}, {13}, {1, 14, 2}, {0, 15, 2}, {0, 15, 3}, {16, 9, 9, 0, 2}, {0, 6, 5, 3}} {
		f.Add(seed)
	}
	trusted := New(0)
	f.Fuzz(func(t *testing.T, picks []byte) {
		if len(picks) > 64 {
			picks = picks[:64]
		}
		parts := make([]string, len(picks))
		for i, b := range picks {
			parts[i] = fuzzNames[int(b)%len(fuzzNames)]
		}
		path := root + "/" + strings.Join(parts, "/")
		var kernel syscall.Stat_t
		kerr := syscall.Stat(path, &kernel)
		r, rerr := Resolve(path)
		if (rerr == nil) != (kerr == nil) {
			t.Fatalf("%s: the kernel: %v; Resolve: %v", path, kerr, rerr)
		}
		if rerr == nil {
			r.File.Close()
			if r.Stat.Dev != kernel.Dev || r.Stat.Ino != kernel.Ino {
				t.Fatalf("%s: Resolve reached %s (inode %d), the kernel inode %d", path, r.Path, r.Stat.Ino, kernel.Ino)
			}
		}
		checked, err := trusted.Open(path)
		if err != nil {
			if kerr == nil && !IsUntrusted(err) {
				t.Fatalf("%s: the kernel reaches it, but Check says %v", path, err)
			}
			return
		}
		checked.File.Close()
		if kerr != nil {
			t.Fatalf("%s: Check accepts a path the kernel cannot stat (%v)", path, kerr)
		}
		if checked.Stat.Ino != kernel.Ino {
			t.Fatalf("%s: Check judged inode %d, the kernel reaches inode %d", path, checked.Stat.Ino, kernel.Ino)
		}
		if what, bad := untrusted[kernel.Ino]; bad {
			t.Fatalf("%s: Check accepts it, but the kernel reaches %s", path, what)
		}
	})
}

// fuzzLayout makes FuzzCheck's files under root and returns the inodes
// of those uid 1001 can change, with why.
func fuzzLayout(tb testing.TB, root string) map[uint64]string {
	tb.Helper()
	untrusted := map[uint64]string{}
	must := func(err error) {
		tb.Helper()
		if err != nil {
			tb.Fatal(err)
		}
	}
	mark := func(rel, why string) {
		var st syscall.Stat_t
		must(syscall.Stat(filepath.Join(root, rel), &st))
		untrusted[st.Ino] = why
	}
	must(os.Chmod(root, 0o755))
	for _, d := range []struct {
		rel  string
		mode os.FileMode
		uid  int
	}{{"a", 0o755, 0}, {"u", 0o755, other}, {"a/s", os.ModeSticky | 0o777, 0}} {
		p := filepath.Join(root, d.rel)
		must(os.Mkdir(p, 0o755))
		must(os.Chmod(p, d.mode))
		must(os.Chown(p, d.uid, d.uid))
	}
	for _, f := range []struct {
		rel  string
		mode os.FileMode
		uid  int
	}{{"a/f", 0o644, 0}, {"a/w", 0o666, 0}, {"u/g", 0o644, 0}, {"a/s/f", 0o644, 0}, {"a/s/g", 0o644, other}} {
		p := filepath.Join(root, f.rel)
		must(os.WriteFile(p, []byte("x"), f.mode))
		must(os.Chmod(p, f.mode))
		must(os.Chown(p, f.uid, f.uid))
	}
	for _, l := range [][2]string{
		{"a/l", "../u"}, {"a/r", root + "/a"}, {"a/p", "../a/f"}, {"a/lf", "l/../a/f"},
		{"loop", "loop"}, {"u/back", "../a"}, {"top", root}, {"a/s/u", "../../u"},
	} {
		must(os.Symlink(l[1], filepath.Join(root, l[0])))
	}
	must(os.Lchown(filepath.Join(root, "u/back"), other, other))
	mark("u", "uid 1001's folder")
	mark("u/g", "a file in uid 1001's folder")
	mark("a/w", "a file every user can write")
	mark("a/s/g", "uid 1001's file in a sticky folder")
	return untrusted
}

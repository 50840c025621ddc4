//go:build linux

package filetrust

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// other is the untrusted user (and group) of these tests.
const other = 1001

// TestCheck lays out files as root and as uid 1001 and checks who may
// change them, trusting root and uid 2000 (the "service user").
func TestCheck(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the files are made for uid 1001 and root")
	}
	dir := t.TempDir() // root's, 0700
	etc := filepath.Join(dir, "etc")
	must(t, os.Mkdir(etc, 0o755))
	must(t, os.WriteFile(filepath.Join(etc, "passwd"), []byte("root:x:0:0::/root:/bin/sh\nbob:x:1001:1001::/home/bob:/bin/sh\nsvc:x:2000:2000::/:/bin/false\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(etc, "group"), []byte("root:x:0:\nbob:x:1001:\nsvc:x:2000:\nops:x:3000:bob,svc\nsvconly:x:3001:svc\n"), 0o644))
	passwdFile, groupFile = filepath.Join(etc, "passwd"), filepath.Join(etc, "group")
	t.Cleanup(func() { passwdFile, groupFile = "/etc/passwd", "/etc/group" })

	file := func(rel string, mode os.FileMode, uid, gid int) string {
		p := filepath.Join(dir, rel)
		must(t, os.MkdirAll(filepath.Dir(p), 0o755))
		must(t, os.WriteFile(p, []byte("x"), mode))
		must(t, os.Chmod(p, mode))
		must(t, os.Lchown(p, uid, gid))
		return p
	}
	mkdir := func(rel string, mode os.FileMode, uid, gid int) string {
		p := filepath.Join(dir, rel)
		must(t, os.MkdirAll(p, 0o755))
		must(t, os.Chmod(p, mode))
		must(t, os.Lchown(p, uid, gid))
		return p
	}
	link := func(rel, target string) string {
		p := filepath.Join(dir, rel)
		must(t, os.Symlink(target, p))
		return p
	}
	mkdir("root", 0o755, 0, 0)
	good := file("root/good", 0o644, 0, 0)
	mkdir("bob", 0o755, other, other)
	mkdir("sticky", os.ModeSticky|0o777, 0, 0)
	mkdir("ops", 0o775, 0, 3000)
	mkdir("open", 0o777, 0, 0)
	mkdir("svconly", 0o775, 0, 3001)
	tests := []struct {
		name, path string
		want       string // "" for nobody else
	}{
		{"root's file in root's folders", good, ""},
		{"the service user's file", file("root/svc", 0o600, 2000, 2000), ""},
		{"mode 0666", file("root/open", 0o666, 0, 0), "every user (mode 0666)"},
		{"owned by uid 1001, mode 0444", file("root/bobs", 0o444, other, other), "uid 1001 (bob), its owner"},
		{"root's file in uid 1001's folder", file("bob/file", 0o644, 0, 0), "replaced by uid 1001 (bob), who owns " + filepath.Join(dir, "bob") + " on its way"},
		{"under uid 1001's folder, deeper", file("bob/sub/deep/file", 0o644, 0, 0), "who owns " + filepath.Join(dir, "bob") + " on its way"},
		{"root's file in a sticky folder", file("sticky/rootfile", 0o644, 0, 0), ""},
		{"uid 1001's file in a sticky folder", file("sticky/bobfile", 0o644, other, other), "uid 1001 (bob), its owner"},
		{"root's folder in a sticky folder, file inside", file("sticky/rootdir/f", 0o644, 0, 0), ""},
		{"group-writable, group with uid 1001", file("root/opsfile", 0o664, 0, 3000), "group 3000 (ops), whose members include bob"},
		{"in a folder writable by a group with uid 1001", file("ops/f", 0o644, 0, 0), "group 3000 (ops), whose members include bob, who can write in"},
		{"root's file in a folder every user can write (not sticky)", file("open/f", 0o644, 0, 0), "every user (mode 0777), who can write in " + filepath.Join(dir, "open")},
		{"group-writable, only the service user in the group", file("svconly/f", 0o664, 0, 3001), ""},
		{"group-writable, a group /etc/group does not list", file("root/nogroup", 0o664, 0, 4242), "group 4242, whose members are not listed"},
		{"a link in root's folder to uid 1001's file", link("root/link-to-bob", filepath.Join(dir, "root/bobs")), "uid 1001 (bob), its owner"},
		{"a link in uid 1001's folder to root's file", link("bob/link-to-good", good), "who owns " + filepath.Join(dir, "bob")},
		{"a relative link to root's file", link("root/rel", "good"), ""},
		{"a link to a folder, then a file", filepath.Join(link("root/dirlink", filepath.Join(dir, "bob")), "file"), "who owns " + filepath.Join(dir, "bob")},
	}
	trusted := New(0, 2000)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := trusted.Check(tt.path)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Check(%s) = %v, want nil", tt.path, err)
			case tt.want != "" && (!IsUntrusted(err) || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("Check(%s) = %v, want an error with %q", tt.path, err, tt.want)
			}
			if err != nil {
				t.Logf("%v", err)
			}
		})
	}
	if err := trusted.Check(filepath.Join(dir, "root/missing")); err == nil || IsUntrusted(err) {
		t.Fatalf("a missing file: %v, want a plain error", err)
	}
	// CheckEach, which judges each folder once for all the paths, gives
	// each path Check's verdict, in either order (a folder judged first as
	// the way to a file, then as a file's own folder, and the other way).
	var paths []string
	for _, tt := range tests {
		paths = append(paths, tt.path, filepath.Dir(tt.path))
	}
	paths = append(paths, filepath.Join(dir, "root/missing"), dir)
	for _, order := range []string{"forward", "backward"} {
		if order == "backward" {
			slices.Reverse(paths)
		}
		errs := trusted.CheckEach(paths)
		for i, p := range paths {
			if want := trusted.Check(p); fmt.Sprint(errs[i]) != fmt.Sprint(want) {
				t.Errorf("CheckEach, %s: %s: %v, Check says %v", order, p, errs[i], want)
			}
		}
		// ResolveEach, which opens each folder once, reaches what Resolve
		// reaches, through the same links.
		res, rerrs := ResolveEach(paths)
		for i, p := range paths {
			want, werr := Resolve(p)
			got := res[i]
			switch {
			case (rerrs[i] == nil) != (werr == nil):
				t.Errorf("ResolveEach, %s: %s: %v, Resolve says %v", order, p, rerrs[i], werr)
			case werr == nil && (got.Path != want.Path || !slices.Equal(got.LinkDirs, want.LinkDirs) || got.Stat.Ino != want.Stat.Ino):
				t.Errorf("ResolveEach, %s: %s reaches %s by %v, Resolve %s by %v", order, p, got.Path, got.LinkDirs, want.Path, want.LinkDirs)
			}
			for _, r := range []*Resolved{got, want} {
				if r != nil {
					r.File.Close()
				}
			}
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestKernelPaths lays out what the kernel resolves differently from a
// path's text, and checks that the verdict is about the file open(2)
// reaches: a root-owned link into uid 1001's folder followed by "..", the
// same as a link's target, and a root link to a folder path so long that
// the path with the rest appended passes PATH_MAX, with uid 1001's folder
// deep inside it. Each once passed as root's file (".." cleaned as text,
// ENAMETOOLONG ignored), and root ran uid 1001's binary.
func TestKernelPaths(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the files are made for uid 1001 and root")
	}
	dir := t.TempDir() // root's, 0700, in the sticky temporary folder
	mk := func(rel string, uid int) string {
		p := filepath.Join(dir, rel)
		must(t, os.MkdirAll(p, 0o755))
		must(t, os.Chown(p, uid, uid))
		return p
	}
	file := func(rel string, uid int) string {
		p := filepath.Join(dir, rel)
		must(t, os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755))
		must(t, os.Chown(p, uid, uid))
		return p
	}
	mk("opt/a", 0)
	mk("opt/bin", 0)
	rootEnvoy := file("opt/bin/envoy", 0)
	mk("home", other)
	mk("home/x/y", other)
	mk("home/bin", other)
	userEnvoy := file("home/bin/envoy", other)
	must(t, os.Symlink(filepath.Join(dir, "home/x/y"), filepath.Join(dir, "opt/a/m")))
	must(t, os.Symlink("a/m/../../bin/envoy", filepath.Join(dir, "opt/rel")))
	must(t, os.Symlink(dir+"/opt/a/m/../../bin/envoy", filepath.Join(dir, "opt/abs")))

	// The long one: a root link to a root folder path of 3,673 bytes, then
	// 300 folders "a", uid 1001's from the 250th on.
	long := filepath.Join(dir, "long")
	for len(long) < 3673-201 {
		long += "/" + strings.Repeat("d", 200)
	}
	long += "/" + strings.Repeat("d", 3673-len(long)-1)
	must(t, os.MkdirAll(long, 0o755))
	deep := long
	for i := 0; i < 300; i++ {
		deep += "/a"
	}
	// The deepest folders cannot be made by their full path (ENAMETOOLONG):
	// made one at a time from an open folder.
	root, err := os.OpenRoot(long)
	must(t, err)
	rel := "a"
	for i := 0; i < 300; i++ {
		must(t, root.Mkdir(rel, 0o755))
		if i >= 249 {
			must(t, root.Lchown(rel, other, other))
		}
		rel += "/a"
	}
	f, err := root.OpenFile(strings.TrimSuffix(rel, "/a")+"/envoy", os.O_CREATE|os.O_WRONLY, 0o755)
	must(t, err)
	f.Close()
	root.Close()
	must(t, os.Symlink(long, filepath.Join(dir, "opt/L")))
	longPath := filepath.Join(dir, "opt/L") + strings.Repeat("/a", 300) + "/envoy"

	trusted := New(0)
	tests := []struct {
		name, path string
		reaches    string // the file the kernel reaches ("" when it reaches none)
		untrusted  bool
	}{
		{"a root link into uid 1001's folder, then ..", filepath.Join(dir, "opt/a/m") + "/../../bin/envoy", userEnvoy, true},
		{"the same as a relative link's target", filepath.Join(dir, "opt/rel"), userEnvoy, true},
		{"the same as an absolute link's target", filepath.Join(dir, "opt/abs"), userEnvoy, true},
		{".. in root's own folders", filepath.Join(dir, "opt/a") + "/../bin/envoy", rootEnvoy, false},
		{"a link to a long path, the rest past PATH_MAX", longPath, deep + "/envoy", true},
		{"a path longer than PATH_MAX", strings.Repeat("/", 4096) + rootEnvoy, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var kernel syscall.Stat_t
			kerr := syscall.Stat(tt.path, &kernel)
			if tt.reaches != "" && tt.reaches != deep+"/envoy" {
				var want syscall.Stat_t
				must(t, syscall.Stat(tt.reaches, &want))
				if kerr != nil || kernel.Ino != want.Ino {
					t.Fatalf("the layout is wrong: the kernel does not reach %s (%v)", tt.reaches, kerr)
				}
			}
			err := trusted.Check(tt.path)
			t.Logf("%v", err)
			switch {
			case tt.untrusted && !IsUntrusted(err):
				t.Fatalf("Check = %v, want who else can change it (the kernel reaches %s)", err, tt.reaches)
			case tt.reaches == "" && err == nil:
				t.Fatal("Check = nil for a path the kernel cannot open")
			case tt.reaches != "" && !tt.untrusted && err != nil:
				t.Fatalf("Check = %v, want nil", err)
			}
		})
	}
}

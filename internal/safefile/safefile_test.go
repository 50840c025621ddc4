//go:build linux

package safefile

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestCreatePrivate(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "target")
	tests := []struct {
		name    string
		prepare func(path string) error
		wantErr bool
	}{
		{"a new file", func(string) error { return nil }, false},
		{"a file stands there", func(p string) error { return os.WriteFile(p, []byte("x"), 0o644) }, true},
		{"a link stands there", func(p string) error { return os.Symlink(target, p) }, true},
		{"a dangling link stands there", func(p string) error { return os.Symlink(filepath.Join(dir, "none"), p) }, true},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, "f"+string(rune('0'+i)))
			if err := tt.prepare(path); err != nil {
				t.Fatal(err)
			}
			err := CreatePrivate(path, []byte("secret"))
			if tt.wantErr {
				if err == nil {
					t.Fatal("CreatePrivate wrote over what stood at the path")
				}
				if _, err := os.Stat(target); err == nil {
					t.Fatal("CreatePrivate wrote through a link")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if got, _ := os.ReadFile(path); string(got) != "secret" || fi.Mode().Perm() != 0o600 {
				t.Fatalf("wrote %q with mode %04o, want \"secret\" with 0600", got, fi.Mode().Perm())
			}
		})
	}
}

func TestReadRegular(t *testing.T) {
	dir := t.TempDir()
	small := filepath.Join(dir, "small")
	if err := os.WriteFile(small, []byte("0123456789"), 0o600); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, path string
		limit      int64
		wantErr    string
	}{
		{"a regular file", small, 10, ""},
		{"one larger than the limit", small, 9, "more than 9"},
		{"a FIFO (would hang a plain open)", fifo, 10, "a FIFO"},
		{"a directory", dir, 10, "a directory"},
		{"nothing", filepath.Join(dir, "none"), 10, "no such file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data, err := ReadRegular(tt.path, tt.limit)
			if tt.wantErr == "" {
				if err != nil || string(data) != "0123456789" {
					t.Fatalf("got %q, %v", data, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want one with %q", err, tt.wantErr)
			}
		})
	}
}

// TestKernelFilesAreRefusedBeforeTheyAreOpened: procfs's and sysfs's
// "regular" files, reached directly or through a link a local user could
// plant (a certificate re-pointed at /proc/kmsg), and a magic link, are
// refused from the O_PATH descriptor's fstat and fstatfs, before any open
// for reading. /proc/kmsg was opened and its read waited for the next
// kernel message for ever, holding the certificate watcher's lock.
func TestKernelFilesAreRefusedBeforeTheyAreOpened(t *testing.T) {
	dir := t.TempDir()
	regular := filepath.Join(dir, "regular")
	if err := os.WriteFile(regular, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	open, err := os.Open(regular)
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	tests := []struct {
		name, target, want string
		root               bool // only root reads it (a read as another user fails at once)
	}{
		{"/proc/kmsg through a link", "/proc/kmsg", "procfs", true},
		{"a procfs file", "/proc/self/stat", "procfs", false},
		{"a sysfs file", "/sys/kernel/uevent_seqnum", "sysfs", false},
		{"a magic link", "/proc/self/fd/" + strconv.Itoa(int(open.Fd())), "too many levels of symbolic links", false},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.root && os.Geteuid() != 0 {
				t.Skip("needs root")
			}
			if _, err := os.Lstat(tt.target); err != nil {
				t.Skipf("%s: %v", tt.target, err)
			}
			link := filepath.Join(dir, "key"+strconv.Itoa(i)+".pem")
			if err := os.Symlink(tt.target, link); err != nil {
				t.Fatal(err)
			}
			for _, p := range []string{link, tt.target} {
				done := make(chan error, 1)
				go func() {
					_, err := ReadRegular(p, 1<<20)
					done <- err
				}()
				select {
				case err := <-done:
					if err == nil || !strings.Contains(err.Error(), tt.want) {
						t.Fatalf("ReadRegular(%s) = %v, want an error with %q", p, err, tt.want)
					}
				case <-time.After(10 * time.Second):
					t.Fatalf("ReadRegular(%s) has not returned after 10 s: the read waits for the kernel", p)
				}
			}
		})
	}
}

// TestWithoutOpenat2: where openat2 cannot be called (a seccomp filter
// that does not know it answers EPERM, as systemd 247's @system-service
// with the unit's SystemCallErrorNumber=EPERM did on Debian 11; a kernel
// older than 5.6 answers ENOSYS), a regular file is read all the same and
// a kernel file is still refused. The filter is a stand-in: openat2 is
// replaced by a function that answers as it does.
func TestWithoutOpenat2(t *testing.T) {
	dir := t.TempDir()
	regular := filepath.Join(dir, "regular")
	if err := os.WriteFile(regular, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, errno := range []syscall.Errno{syscall.EPERM, syscall.ENOSYS} {
		t.Run(errno.Error(), func(t *testing.T) {
			calls := 0
			openat2 = func(int, string, *unix.OpenHow) (int, error) { calls++; return -1, errno }
			t.Cleanup(func() { openat2 = unix.Openat2 })
			data, err := ReadRegular(regular, 1<<20)
			if err != nil || string(data) != "x" {
				t.Errorf("ReadRegular(regular) = %q, %v; want \"x\"", data, err)
			}
			if _, err := ReadRegular("/proc/self/stat", 1<<20); err == nil || !strings.Contains(err.Error(), "procfs") {
				t.Errorf("ReadRegular(/proc/self/stat) = %v, want it refused as procfs", err)
			}
			if calls == 0 {
				t.Error("the stand-in openat2 was never called")
			}
		})
	}
}

// TestReadIsBoundedInTime: a read that does not return (the stand-in for a
// file system that stops answering: a pipe nobody writes, read through
// readBounded itself, since the kinds of files ReadRegular opens never
// block on a healthy system) fails after the bound, and reads of that file
// system fail at once once maxStuckReads are waiting.
func TestReadIsBoundedInTime(t *testing.T) {
	defer func(d time.Duration) { readTimeout = d }(readTimeout)
	readTimeout = 50 * time.Millisecond
	const dev = ^uint64(0) // a device no real file has
	var writers []*os.File
	defer func() {
		for _, w := range writers {
			w.Close()
		}
	}()
	for i := 0; i < maxStuckReads; i++ {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		writers = append(writers, w)
		start := time.Now()
		if _, err := readBounded(r, dev, 10); err == nil || !strings.Contains(err.Error(), "not read within") {
			t.Fatalf("read %d: %v, want the time bound's error", i, err)
		}
		t.Logf("read %d failed after %s", i, time.Since(start).Round(time.Millisecond))
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := readBounded(r, dev, 10); err == nil || !strings.Contains(err.Error(), "have not returned") {
		t.Fatalf("with %d reads waiting: %v, want a refusal at once", maxStuckReads, err)
	}
	for _, w := range writers {
		w.Close() // the stuck reads return
	}
	writers = nil
	ok := false
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		stuck.Lock()
		ok = stuck.reads[dev] == 0
		stuck.Unlock()
		if ok {
			break
		}
	}
	if !ok {
		t.Fatal("the stuck reads are still counted after they returned")
	}
}

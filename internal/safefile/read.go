//go:build linux

package safefile

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// ReadRegular reads a file the agent is told to read (its TOML, Envoy's
// bootstrap, a certificate or key). The path is resolved as openat2(2)
// does with RESOLVE_NO_MAGICLINKS, to a descriptor that reads nothing
// (O_PATH); what it names is judged on that descriptor, before any open
// that could block or do something: only a regular file on a file system
// that keeps data (not procfs, sysfs, tracefs, debugfs and the like, whose
// "regular" files wait for the kernel's events) is opened, and read within
// limit bytes and ReadTimeout.
func ReadRegular(path string, limit int64) ([]byte, error) {
	data, _, err := ReadIdentified(path, limit)
	return data, err
}

// ReadIdentified is ReadRegular that also says which file it read.
func ReadIdentified(path string, limit int64) ([]byte, Identity, error) {
	pf, err := openPath(path)
	if err != nil {
		return nil, Identity{}, err
	}
	defer pf.Close()
	return ReadOpened(pf, limit)
}

// ReadOpened reads the file open at pf, a descriptor that reads nothing
// (O_PATH, as filetrust's walk returns the file it judged), with
// ReadRegular's checks and bounds: what is read is that very file, never
// what its path names by then. pf stays open.
func ReadOpened(pf *os.File, limit int64) ([]byte, Identity, error) {
	f, id, err := reopen(pf)
	if err != nil {
		return nil, Identity{}, err
	}
	if id.size > limit {
		f.Close()
		return nil, Identity{}, fmt.Errorf("%s is %d bytes; more than %d is not a configuration file", pf.Name(), id.size, limit)
	}
	data, err := readBounded(f, id.dev, limit) // closes f
	if err != nil {
		return nil, Identity{}, err
	}
	return data, id, nil
}

// OpenRegular opens path for reading, after ReadRegular's checks, and
// returns it only when it is a regular file on a file system that keeps
// data. Reads of it are not bounded in time: use ReadRegular to read.
func OpenRegular(path string) (*os.File, error) {
	pf, err := openPath(path)
	if err != nil {
		return nil, err
	}
	defer pf.Close()
	f, _, err := reopen(pf)
	return f, err
}

// openPath resolves path to an O_PATH descriptor: openat2 with
// RESOLVE_NO_MAGICLINKS, or plain open(2) where openat2 cannot be called:
// a kernel older than it (5.6, ENOSYS), or a seccomp filter that does not
// know it (EPERM: systemd 247's @system-service, Debian 11's, with the
// unit's SystemCallErrorNumber=EPERM; an O_PATH open has no EPERM of its
// own). Either way judge still refuses what is not a regular file on a
// file system that keeps data. Opening with O_PATH reads nothing, so
// nothing at the path can block it.
func openPath(path string) (*os.File, error) {
	how := &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_MAGICLINKS}
	fd, err := openat2(unix.AT_FDCWD, path, how)
	if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM) {
		fd, err = unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
	}
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}

// openat2 is unix.Openat2; a test puts a seccomp filter's EPERM in its
// place.
var openat2 = unix.Openat2

// reopen judges the file open at pf (O_PATH) and opens that same file for
// reading: through /proc/self/fd, which reaches the open file itself, not
// a path. The file is opened without blocking and checked again (the same
// inode) before it is returned.
func reopen(pf *os.File) (*os.File, Identity, error) {
	name := pf.Name()
	var st unix.Stat_t
	if err := unix.Fstat(int(pf.Fd()), &st); err != nil {
		return nil, Identity{}, &os.PathError{Op: "stat", Path: name, Err: err}
	}
	if err := judge(name, int(pf.Fd()), &st); err != nil {
		return nil, Identity{}, err
	}
	fd, err := unix.Open("/proc/self/fd/"+strconv.Itoa(int(pf.Fd())), unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, Identity{}, &os.PathError{Op: "open", Path: name, Err: err}
	}
	f := os.NewFile(uintptr(fd), name)
	var got unix.Stat_t
	if err := unix.Fstat(fd, &got); err != nil || got.Dev != st.Dev || got.Ino != st.Ino {
		f.Close()
		return nil, Identity{}, fmt.Errorf("%s changed while it was opened", name)
	}
	// Reads of a regular file never block; clear the flag all the same.
	if err := unix.SetNonblock(fd, false); err != nil {
		f.Close()
		return nil, Identity{}, fmt.Errorf("%s: %w", name, err)
	}
	return f, identity(&got), nil
}

// judge refuses anything but a regular file on a file system that keeps
// data.
func judge(name string, fd int, st *unix.Stat_t) error {
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fmt.Errorf("%s is not a regular file (%s)", name, fileKind(st.Mode))
	}
	var fs unix.Statfs_t
	if err := unix.Fstatfs(fd, &fs); err != nil {
		return &os.PathError{Op: "statfs", Path: name, Err: err}
	}
	if what, ok := pseudoFS[int64(fs.Type)]; ok {
		return fmt.Errorf("%s is on %s, not a file system that keeps data: its files are the kernel's, whose reads can wait for its events for ever", name, what)
	}
	return nil
}

// pseudoFS are the kernel's file systems whose regular files are not data
// at rest: a read of /proc/kmsg or tracefs's trace_pipe waits for the next
// kernel event, others answer with the kernel's state. Their magic numbers
// (statfs(2)) name them.
var pseudoFS = map[int64]string{
	unix.PROC_SUPER_MAGIC:    "procfs",
	unix.SYSFS_MAGIC:         "sysfs",
	unix.TRACEFS_MAGIC:       "tracefs",
	unix.DEBUGFS_MAGIC:       "debugfs",
	unix.SECURITYFS_MAGIC:    "securityfs",
	unix.CGROUP_SUPER_MAGIC:  "cgroupfs",
	unix.CGROUP2_SUPER_MAGIC: "cgroup2",
	unix.BPF_FS_MAGIC:        "bpffs",
	unix.PSTOREFS_MAGIC:      "pstore",
	unix.EFIVARFS_MAGIC:      "efivarfs",
	unix.SELINUX_MAGIC:       "selinuxfs",
	unix.SMACK_MAGIC:         "smackfs",
	unix.BINFMTFS_MAGIC:      "binfmt_misc",
	unix.DEVPTS_SUPER_MAGIC:  "devpts",
	unix.NSFS_MAGIC:          "nsfs",
	unix.HUGETLBFS_MAGIC:     "hugetlbfs",
	unix.ANON_INODE_FS_MAGIC: "anon_inodefs",
	unix.PIPEFS_MAGIC:        "pipefs",
	unix.SOCKFS_MAGIC:        "sockfs",
	unix.DEVMEM_MAGIC:        "devmem",
	configfsMagic:            "configfs",
	fusectlMagic:             "fusectl",
	mqueueMagic:              "mqueue",
}

// Magic numbers golang.org/x/sys/unix does not name (linux/magic.h).
const (
	configfsMagic = 0x62656570
	fusectlMagic  = 0x65735543
	mqueueMagic   = 0x19800202
)

func fileKind(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFIFO:
		return "a FIFO"
	case unix.S_IFSOCK:
		return "a socket"
	case unix.S_IFCHR, unix.S_IFBLK:
		return "a device"
	case unix.S_IFDIR:
		return "a directory"
	case unix.S_IFLNK:
		return "a symbolic link"
	}
	return "not a file"
}

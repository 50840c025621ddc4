//go:build linux

// inotify's per-user limits on this host and what a user holds of them:
// Envoy opens an inotify instance for each file it reads resources from
// (a path_config_source), and the agent one for its certificates' watch.

package hostfiles

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Inotify is a user's inotify use against the host's limits.
type Inotify struct {
	// MaxInstances and MaxWatches are fs.inotify.max_user_instances and
	// fs.inotify.max_user_watches.
	MaxInstances, MaxWatches int
	// Instances and Watches are what the user's processes hold now, as far
	// as /proc shows them (a process of the user's whose fds cannot be
	// read is not counted).
	Instances, Watches int
}

// The limits' files.
const (
	maxInstancesFile = "/proc/sys/fs/inotify/max_user_instances"
	maxWatchesFile   = "/proc/sys/fs/inotify/max_user_watches"
)

// InotifyOf reads the host's inotify limits and what the processes whose
// effective user is uid hold: each anon_inode:inotify fd in /proc/PID/fd is
// an instance, each "inotify wd:" line of its fdinfo a watch (the kernel
// charges both to the effective user).
func InotifyOf(uid int) (Inotify, error) {
	var in Inotify
	var err error
	if in.MaxInstances, err = readInt(maxInstancesFile); err != nil {
		return in, err
	}
	if in.MaxWatches, err = readInt(maxWatchesFile); err != nil {
		return in, err
	}
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return in, err
	}
	for _, p := range procs {
		if _, err := strconv.Atoi(p.Name()); err != nil || effectiveUID(p.Name()) != uid {
			continue
		}
		fds, err := os.ReadDir(filepath.Join("/proc", p.Name(), "fd"))
		if err != nil {
			continue // gone, or not ours to read
		}
		for _, fd := range fds {
			if l, err := os.Readlink(filepath.Join("/proc", p.Name(), "fd", fd.Name())); err != nil || l != "anon_inode:inotify" {
				continue
			}
			in.Instances++
			in.Watches += countLines(filepath.Join("/proc", p.Name(), "fdinfo", fd.Name()), "inotify wd:")
		}
	}
	return in, nil
}

func readInt(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return n, nil
}

// effectiveUID is the effective user of process pid (-1 when unknown).
func effectiveUID(pid string) int {
	f, err := os.Open(filepath.Join("/proc", pid, "status"))
	if err != nil {
		return -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "Uid:"); ok {
			if f := strings.Fields(rest); len(f) >= 2 {
				if uid, err := strconv.Atoi(f[1]); err == nil {
					return uid
				}
			}
			return -1
		}
	}
	return -1
}

// countLines counts the lines of path that start with prefix.
func countLines(path, prefix string) int {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), prefix) {
			n++
		}
	}
	return n
}

//go:build linux

// inotify's per-user limits on this host and what a user has left of them:
// Envoy opens an inotify instance for each file it reads resources from
// (a path_config_source), and the agent one for its certificates' watch.

package hostfiles

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// InotifyRoom is what this process's user can still have of inotify, as a
// probe found it (ProbeInotify).
type InotifyRoom struct {
	// MaxInstances and MaxWatches are fs.inotify.max_user_instances and
	// fs.inotify.max_user_watches.
	MaxInstances, MaxWatches int
	// Instances is how many inotify instances the probe could make, at
	// most the number it was asked for: fewer means the user has exactly
	// that many left.
	Instances int
	// Watches is how many of the folders it was given the probe could
	// watch before the kernel refused one for fs.inotify.max_user_watches:
	// all of them, or exactly what the user has left.
	Watches int
}

// The limits' files.
const (
	maxInstancesFile = "/proc/sys/fs/inotify/max_user_instances"
	maxWatchesFile   = "/proc/sys/fs/inotify/max_user_watches"
)

// watchProbeMask is what the probe watches in a folder: enough to be
// charged a watch, the kernel's only concern here.
const watchProbeMask = unix.IN_CREATE

// ProbeInotify asks the kernel what this process's user has left of
// inotify, by taking it: it makes up to instances inotify instances, then
// adds a watch on each of dirs to one of them until the kernel refuses one
// for the user's limit (ENOSPC), and closes them all. The kernel charges
// instances and watches to the user, across all of the user's processes,
// so this is exact where counting them in /proc is not (a process of the
// user's whose fds cannot be read) and costs what it asks, not what the
// host runs: reading every process's fds took 5 to 96 ms of a start on a
// host of a few hundred processes, one of them with thousands of fds. A
// folder that cannot be watched for another reason (gone, not readable)
// counts as watched: it costs the user nothing. An error says the probe
// could not tell (the limits' files unreadable, or the process out of
// file descriptors rather than the user out of instances).
func ProbeInotify(instances int, dirs []string) (InotifyRoom, error) {
	var r InotifyRoom
	var err error
	if r.MaxInstances, err = readInt(maxInstancesFile); err != nil {
		return r, err
	}
	if r.MaxWatches, err = readInt(maxWatchesFile); err != nil {
		return r, err
	}
	var fds []int
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	for len(fds) < instances {
		fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
		if errors.Is(err, unix.EMFILE) && !outOfFiles() {
			break // the user's max_user_instances
		}
		if err != nil {
			return r, fmt.Errorf("inotify_init1: %w", err)
		}
		fds = append(fds, fd)
	}
	r.Instances = len(fds)
	if len(fds) == 0 {
		return r, nil
	}
	for _, d := range dirs {
		if _, err := unix.InotifyAddWatch(fds[0], d, watchProbeMask); errors.Is(err, unix.ENOSPC) {
			break
		}
		r.Watches++
	}
	return r, nil
}

// outOfFiles reports whether this process holds as many file descriptors
// as RLIMIT_NOFILE lets it (the one reading /proc/self/fd included): an
// EMFILE from inotify_init1 is then the process's limit, not the user's
// instances.
func outOfFiles() bool {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
		return true
	}
	open, err := os.ReadDir("/proc/self/fd")
	return err != nil || uint64(len(open)) >= rl.Cur
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

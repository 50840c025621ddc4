package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// userHZ is Linux's USER_HZ, the unit of utime and stime in /proc/PID/stat
// (100 on every architecture Go runs Linux on).
const userHZ = 100

// statusKiB reads a "Key:   123 kB" line of /proc/PID/status.
func statusKiB(pid int, key string) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("proc status: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || k != key {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			break
		}
		n, err := strconv.Atoi(f[0])
		if err != nil {
			return 0, fmt.Errorf("proc status %s: %w", key, err)
		}
		return n, nil
	}
	return 0, fmt.Errorf("proc status of pid %d: no %s", pid, key)
}

// cpuTicks is utime+stime of the process (every thread, live or gone).
func cpuTicks(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("proc stat: %w", err)
	}
	s := string(b)
	i := strings.LastIndex(s, ")")
	if i < 0 {
		return 0, fmt.Errorf("proc stat of pid %d: no command name", pid)
	}
	// After the command name: state is field 3; utime, stime are 14, 15.
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("proc stat of pid %d: too few fields", pid)
	}
	var total int64
	for _, x := range f[11:13] {
		n, err := strconv.ParseInt(x, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("proc stat of pid %d: %w", pid, err)
		}
		total += n
	}
	return time.Duration(total) * time.Second / userHZ, nil
}

// cpuSched is the run time of the process's live threads from
// /proc/PID/task/*/schedstat, in nanoseconds.
func cpuSched(pid int) (time.Duration, error) {
	files, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	if err != nil || len(files) == 0 {
		return 0, fmt.Errorf("schedstat of pid %d: none", pid)
	}
	var total int64
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // the thread ended
		}
		fields := strings.Fields(string(b))
		if len(fields) == 0 {
			continue
		}
		n, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", f, err)
		}
		total += n
	}
	return time.Duration(total), nil
}

// threads counts the process's threads.
func threads(pid int) int {
	files, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*", pid))
	return len(files)
}

// children lists the process's child pids.
func children(pid int) []int {
	files, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	var out []int
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, x := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(x); err == nil {
				out = append(out, n)
			}
		}
	}
	return out
}

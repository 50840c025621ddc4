//go:build !linux

package envoy

// envoy-agent supervises Envoy the Linux way (a parent-death signal,
// process groups, SO_PEERCRED, /proc, /dev/shm, sd_notify), so its packages
// build on Linux only. This file stands alone on other systems, where the
// name below is the whole error the compiler reports.
var _ = envoyAgentBuildsOnLinuxOnly

//go:build linux

// Package safefile reads the files the agent is told to read and writes its
// private ones without being tricked by what stands at the path: a FIFO or a
// device that would hang a read, a "regular" file of procfs, sysfs or
// tracefs whose read waits for the kernel (/proc/kmsg), a magic link, a file
// too large to be a configuration, a file system that stops answering (each
// read is bounded in size and time), a symbolic link or a file someone made
// in advance where the agent creates one. A file is judged on a descriptor
// that reads nothing (O_PATH) before it is opened for reading. It is shared
// by package envoy (bootstrap copies, admin address files), envoy/certs
// (certificates and keys) and the service (the configuration, the handover
// state).
package safefile

//go:build linux

// Package safefile reads the files the agent is told to read and writes its
// private ones without being tricked by what stands at the path: a FIFO or a
// device that would hang a read, a file too large to be a configuration, a
// symbolic link or a file someone made in advance where the agent creates
// one. It is shared by package envoy (bootstrap copies, admin address
// files) and the service (the configuration, the handover state).
package safefile

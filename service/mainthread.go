//go:build linux

package service

import (
	"github.com/envoy-agent/envoy-agent/envoy"
	"github.com/envoy-agent/envoy-agent/envoy/reexec"
)

// ServeForkerOnMainThread runs main on a goroutine while the calling
// goroutine, which must be locked to the process's main thread, forks every
// Envoy and re-executes the agent on an upgrade (envoy/reexec). It returns
// main's result. The command's main calls it so that it needs service only.
func ServeForkerOnMainThread(main func() int) int { return reexec.ServeForkerOnMainThread(main) }

// AdminAddressError is a start that stopped because Envoy's admin bound an
// address other than the configured one (an exit 3, like a bad file).
type AdminAddressError = envoy.AdminAddressError

//go:build linux

package service

import (
	"fmt"
	"net"

	"github.com/envoy-agent/envoy-agent/service/config"
)

// The new agent's side of a live upgrade: what it adopts from the agent
// that re-executed into it (s.handover, package handover). The old agent's
// side is upgrade.go; README.md "Upgrading envoy-agent".

// openPorts binds the status and metrics ports, or takes them over from
// the agent that handed over (no moment without them).
func (s *supervisor) openPorts(cfg *config.Config) (statusLn, promLn net.Listener, err error) {
	if st := s.handover; st != nil {
		return st.AdoptListeners()
	}
	return bindPorts(cfg)
}

// adoptedNote is what READY's STATUS= adds after a handover.
func (s *supervisor) adoptedNote() string {
	if st := s.handover; st != nil {
		return fmt.Sprintf("; adopted epoch %d from envoy-agent %s", s.proxy.Epoch(), st.FromAgentVersion)
	}
	return ""
}

//go:build linux

package service

import (
	"context"

	"github.com/envoy-agent/envoy-agent/service/control"
)

// reopenLogs has every live Envoy epoch reopen its log files (SIGUSR1, POST /reopen_logs).
func (s *supervisor) reopenLogs(ctx context.Context) control.ReopenResult {
	if !s.live() {
		res := control.ReopenResult{Error: "envoy is not serving (starting or stopping): no logs to reopen"}
		s.log.Warnf("reopening logs refused: %s", res.Error)
		return res
	}
	ctx, cancel := context.WithTimeout(ctx, control.ReopenTimeout)
	defer cancel()
	n, err := s.proxy.ReopenLogs(ctx)
	if err != nil {
		s.log.WithField("epochs", n).Errorf("reopening envoy's logs: %v", err)
		return control.ReopenResult{Epochs: n, Error: err.Error()}
	}
	s.log.WithField("epochs", n).Infof("envoy reopened its log files")
	return control.ReopenResult{OK: true, Epochs: n}
}

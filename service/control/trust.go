//go:build linux

package control

import (
	"os"

	"github.com/envoy-agent/envoy-agent/service/config"
)

// believes reports whether a client believes an answer on the socket in d
// from server: root, the client's own user, or the owner of the folder (the
// service user, whom root gave it).
func believes(d config.ControlDir, server peerCred) error {
	switch server.UID {
	case 0, uint32(os.Geteuid()), d.Owner:
		return nil
	}
	return config.Untrusted("the process serving it (pid %d) runs as uid %d, neither root, you (uid %d) nor the owner of %s (uid %d): not the agent, not believed",
		server.Pid, server.UID, os.Geteuid(), d.Path, d.Owner)
}

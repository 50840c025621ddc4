//go:build linux

package config

import (
	"fmt"
	"path/filepath"

	"go.yaml.in/yaml/v3"

	"github.com/envoy-agent/envoy-agent/envoy/certs"
	"github.com/envoy-agent/envoy-agent/internal/bootyaml"
	"github.com/envoy-agent/envoy-agent/internal/hostfiles"
)

// What Envoy and the agent still watch with inotify, counted against the
// host's per-user limit before Envoy starts (validate and run): Envoy opens
// an instance for each file it reads resources from, and aborts at its
// start when it cannot have one ("assert failure: inotify_fd_ >= 0",
// Envoy 1.40.0). The routes, the secrets and the certificates reach it
// over ADS, and cost none.

// inotifyNearShare is how much of what the user has left Envoy and the
// agent may need before validate and run warn: the user's other processes
// (a second instance, an editor, a shell's tools) take some too.
const inotifyNearShare = 0.75

// InotifyNeed is what Envoy and the agent will hold of inotify, per the
// bootstrap.
type InotifyNeed struct {
	// Files are the files each Envoy epoch watches: lds.yaml and cds.yaml
	// with resource files, and every path_config_source, watched_directory
	// and runtime disk_layer of the operator's bootstrap.
	Files int
	// Instances is what they need at most: the files twice (two epochs
	// during a hot restart), and one for the agent's certificates' watch.
	Instances int
	// Folders are the folders of the certificates the agent watches, each
	// an inotify watch.
	Folders []string
	// Secrets counts the certificates the agent serves over ADS: with
	// any, Envoy runs with a node (inplace.EditRunningCopy).
	Secrets int
}

// Certificates counts the certificates the agent serves Envoy over ADS
// (read from their files, and watched), as the check counted them in the
// bootstrap.
func (c *Config) Certificates() int { return c.inotify.Secrets }

// inotifyNeed counts what Envoy and the agent will watch for the decoded
// bootstrap doc (the certificates' files are not read); rewritable says
// whether the agent rewrites it (a YAML or JSON file). It turns the
// certificates named by file into secrets, as the agent's copy does.
func (c *Config) inotifyNeed(doc *yaml.Node, rewritable bool) InotifyNeed {
	if !rewritable {
		return InotifyNeed{Instances: 1}
	}
	n := InotifyNeed{Files: watchedSources(doc)}
	if c.Agent.InPlace() && bootyaml.Value(bootyaml.Root(doc), "dynamic_resources") == nil {
		n.Files += 2 // lds.yaml, cds.yaml (one too many when envoy/inplace cannot split the bootstrap)
	}
	n.Instances = 2*n.Files + 1
	res, _ := certs.Edit(doc, c.RunDir()) // names the files; reads none
	n.Secrets = len(res.Secrets)
	// A file's folder and the folder its links lead to (certbot's live/
	// and archive/): one file of each folder is resolved.
	dirs := map[string]bool{}
	for _, s := range res.Secrets {
		for _, f := range []string{s.CertFile, s.KeyFile} {
			if d := filepath.Dir(f); f != "" && !dirs[d] {
				dirs[d] = true
				n.Folders = append(n.Folders, d)
				if real, err := filepath.EvalSymlinks(f); err == nil && !dirs[filepath.Dir(real)] {
					dirs[filepath.Dir(real)] = true
					n.Folders = append(n.Folders, filepath.Dir(real))
				}
			}
		}
	}
	return n
}

// watchedSources counts the path_config_source, watched_directory and
// disk_layer keys under n (either spelling): a watcher each.
func watchedSources(n *yaml.Node) int {
	count := 0
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			if k := n.Content[i].Value; bootyaml.SameField(k, "path_config_source") || bootyaml.SameField(k, "watched_directory") || bootyaml.SameField(k, "disk_layer") {
				count++
			}
		}
	}
	for _, c := range n.Content {
		count += watchedSources(c)
	}
	return count
}

// CheckInotify checks that Envoy and the agent, run by this process's user
// with this configuration, will have the inotify instances they need:
// what fs.inotify.max_user_instances leaves once the user's processes took
// theirs, which the kernel says (hostfiles.ProbeInotify). Over it, a
// *ConfigError naming the limit, the count and the fix; near it
// (inotifyNearShare), or short of watches for the certificates' folders,
// warnings. A bootstrap that was not counted (it does not parse: Envoy's
// validation, or its start, says what is wrong with it) or a host that
// does not say is not checked.
func (c *Config) CheckInotify() (warnings []string, err error) {
	need := c.inotify
	if need.Instances == 0 {
		return nil, nil
	}
	// Asked for one more than the share that warns: with that many, the
	// user has room enough, and when fewer come, exactly what it has.
	room, err := hostfiles.ProbeInotify(int(float64(need.Instances)/inotifyNearShare)+1, need.Folders)
	if err != nil {
		return nil, nil
	}
	return inotifyVerdict(c.Envoy.ConfigPath, need, room)
}

// inotifyVerdict is CheckInotify's judgement of need on the room the user
// has for the bootstrap file.
func inotifyVerdict(file string, need InotifyNeed, room hostfiles.InotifyRoom) (warnings []string, err error) {
	left := room.Instances
	held := room.MaxInstances - left
	what := fmt.Sprintf("Envoy and the agent need %d inotify instances (%d files Envoy watches, twice during a hot restart, and the agent's certificates' watch), and fs.inotify.max_user_instances is %d with %d held by this user's processes now",
		need.Instances, need.Files, room.MaxInstances, held)
	fix := fmt.Sprintf("raise it: echo 'fs.inotify.max_user_instances = %d' > /etc/sysctl.d/60-envoy-agent.conf && sysctl --system", max(1024, 2*(held+need.Instances)))
	switch {
	case need.Instances > left:
		return nil, &ConfigError{Problems: []Problem{{File: file, Msg: fmt.Sprintf("%s: Envoy would abort at its start; %s (or read fewer files by path_config_source)", what, fix)}}}
	case float64(need.Instances) > inotifyNearShare*float64(left):
		warnings = append(warnings, fmt.Sprintf("%s: %s: close to the limit; %s", file, what, fix))
	}
	if folders := len(need.Folders); folders > room.Watches {
		watchesLeft, watchesHeld := room.Watches, room.MaxWatches-room.Watches
		warnings = append(warnings, fmt.Sprintf("%s: the agent watches %d folders of certificates and fs.inotify.max_user_watches leaves %d (%d of %d held now): renewals in the others are read every %s instead of at once; raise it: echo 'fs.inotify.max_user_watches = %d' > /etc/sysctl.d/60-envoy-agent.conf && sysctl --system",
			file, folders, watchesLeft, watchesHeld, room.MaxWatches, certs.DefaultPoll, 2*(watchesHeld+folders)))
	}
	return warnings, nil
}

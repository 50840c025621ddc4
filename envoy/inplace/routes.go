// The routes of an HTTP connection manager, moved out of its listener into
// a route configuration of their own that Envoy reads from a file (RDS with
// a path_config_source), so that a change of routes alone is a route
// update: Envoy swaps the route table under the running connections, and
// drains none. A route change inside the listener would be a listener
// update, which drains every connection of that listener for
// --drain-time-s and then closes what is left.

package inplace

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"strconv"

	"go.yaml.in/yaml/v3"

	"github.com/envoy-agent/envoy-agent/internal/bootyaml"
)

const (
	routeType = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
	hcmType   = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
)

// maxRouteFiles bounds how many connection managers get an RDS file: Envoy
// opens an inotify instance for every file it reads resources from, and
// Linux allows 128 of them to a user by default (fs.inotify.max_user_instances,
// shared by all of that user's processes). With 1,000 listeners each
// reading its routes from a file, Envoy 1.40 aborted at its start
// ("assert failure: inotify_fd_ >= 0"). The first maxRouteFiles connection
// managers of the bootstrap, in order, get one; the others keep their
// routes inline, and a change of those is a listener change.
const maxRouteFiles = 32

// watchBudget is how many watched files the agent lets one Envoy have in
// all (the LDS and CDS files, the SDS files of the certificates the agent
// serves, the operator's own path_config_sources, the static secrets' SDS
// files and the route files), out of the 128 inotify instances a user gets
// by default: the static secrets are given what is left, then the route
// files what the secrets left.
const watchBudget = 96

// watchesLeft is how many SDS and route files a bootstrap whose tree root
// already names other path_config_sources may have.
func watchesLeft(root *yaml.Node) int {
	n := 2 // lds.yaml, cds.yaml
	var count func(*yaml.Node)
	count = func(m *yaml.Node) {
		if m.Kind == yaml.MappingNode {
			for i := 0; i+1 < len(m.Content); i += 2 {
				if m.Content[i].Value == "path_config_source" {
					n++
				}
			}
		}
		for _, c := range m.Content {
			count(c)
		}
	}
	count(root)
	return max(0, watchBudget-n)
}

// safeName is what a route configuration's name and its connection
// manager's stat_prefix may hold for the agent to find the route's stats
// (http.<stat_prefix>.rds.<name>.*) as it wrote them: Envoy rewrites some
// characters in stat names (a colon), and keeps these (measured with
// Envoy 1.40.0: http.ingress_http.rds.[__]_10000/0/0.version_text, for
// the route of an unnamed listener on [::]:10000, names.go).
var safeName = regexp.MustCompile(`^[A-Za-z0-9_./\[\]-]+$`)

// routeFile is the name of the RDS file of the route configuration name
// in a resource folder.
func routeFile(name string) string {
	sum := sha256.Sum256([]byte(name))
	return "rds-" + hex.EncodeToString(sum[:8]) + ".yaml"
}

// moveRoutes takes every inline route_config of an HTTP connection manager
// in listeners out into a route configuration named
// <listener>/<filter chain>/<filter> (<listener>/default/<filter> in the
// default filter chain), and puts in its place an RDS source that reads
// it from its file. A connection manager whose stat_prefix or listener
// name has characters outside safeName, or past the first budget of them
// (what the secrets left of watchesLeft), keeps its routes inline (a change of them is then a
// listener update). It changes the listeners' nodes and digests.
func moveRoutes(listeners []resource, budget int) ([]resource, map[string]string) {
	var routes []resource
	prefixes := map[string]string{}
	for li := range listeners {
		l := &listeners[li]
		moved := false
		// Names are unique: listener names are, and each adds exactly two
		// parts without a slash.
		move := func(chain string, filters *yaml.Node) {
			if filters == nil || filters.Kind != yaml.SequenceNode {
				return
			}
			for fi, f := range filters.Content {
				tc := bootyaml.Value(f, "typed_config")
				rc := bootyaml.Value(tc, "route_config")
				if rc == nil || rc.Kind != yaml.MappingNode || bootyaml.Text(bootyaml.Value(tc, "@type")) != hcmType {
					continue
				}
				name := fmt.Sprintf("%s/%s/%d", l.name, chain, fi)
				if len(routes) >= budget || !safeName.MatchString(name) || !safeName.MatchString(bootyaml.Text(bootyaml.Value(tc, "stat_prefix"))) {
					continue
				}
				prefixes[name] = bootyaml.Text(bootyaml.Value(tc, "stat_prefix"))
				route := bootyaml.Shallow(rc)
				bootyaml.Del(route, "name")
				route.Content = append([]*yaml.Node{bootyaml.Key("name"), bootyaml.Str(name)}, route.Content...)
				routes = append(routes, resource{name: name, node: route, sum: digest(route)})
				source := bootyaml.Mapping("route_config_name", bootyaml.Str(name), "config_source",
					bootyaml.Mapping("path_config_source", bootyaml.Mapping("path", bootyaml.Str(folderToken+"/"+routeFile(name))), "resource_api_version", bootyaml.Str("V3")))
				for i := 0; i+1 < len(tc.Content); i += 2 {
					if tc.Content[i].Value == "route_config" {
						tc.Content[i], tc.Content[i+1] = bootyaml.Key("rds"), source
					}
				}
				moved = true
			}
		}
		if chains := bootyaml.Value(l.node, "filter_chains"); chains != nil && chains.Kind == yaml.SequenceNode {
			for ci, c := range chains.Content {
				move(strconv.Itoa(ci), bootyaml.Value(c, "filters"))
			}
		}
		move("default", bootyaml.Value(bootyaml.Value(l.node, "default_filter_chain"), "filters"))
		if moved {
			l.sum = digest(l.node)
		}
	}
	return routes, prefixes
}

// Routes are the names of the route configurations served from files.
func (b *Bootstrap) Routes() []string { return names(b.routes) }

// routeData is the text of the RDS file of one route configuration, whose SDS sources
// (a filter's per-route secret) read from the resource folder dir.
func routeData(r resource, dir string) ([]byte, error) {
	return resourceData(routeType, []resource{r}, dir)
}

// routeKind is the RDS file of the route configuration name, and the stats
// of its subscription: http.<stat_prefix>.rds.<name>.*, with the stat
// prefix of the connection manager that reads it (after a hot restart, or
// an in-place listener update, the old stat prefix's counters are there
// too).
func routeKind(name, statPrefix string) kind {
	return kind{file: routeFile(name), stats: "http." + statPrefix + ".rds." + name, what: "route configuration"}
}

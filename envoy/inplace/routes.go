// The routes of an HTTP connection manager, moved out of its listener into
// a route configuration of their own that Envoy is served over ADS (RDS),
// so that a change of routes alone is a route update: Envoy swaps the route
// table under the running connections, and drains none. A route change
// inside the listener would be a listener update, which drains every
// connection of that listener for --drain-time-s and then closes what is
// left.

package inplace

import (
	"fmt"
	"strconv"

	"go.yaml.in/yaml/v3"

	"github.com/envoy-agent/envoy-agent/envoy/xds/ads"
	"github.com/envoy-agent/envoy-agent/internal/bootyaml"
)

const (
	routeType = string(ads.RouteType)
	hcmType   = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
)

// moveRoutes takes every inline route_config of an HTTP connection manager
// in listeners out into a route configuration named
// <listener>/<filter chain>/<filter> (<listener>/default/<filter> in the
// default filter chain), converted by convert, and puts in its place an RDS
// source that reads it over ADS. A route configuration that does not set
// validate_clusters gets it true: Envoy checks a static route's clusters
// (validate_clusters defaults to true there) and not an RDS one's (false by
// default), and a route to a cluster that does not exist must be refused
// as the operator's static bootstrap is. One that convert refuses keeps its
// routes inline (a change of them is then a listener update), and why says
// so. It changes the listeners' nodes and digests.
func moveRoutes(listeners []resource, convert ads.Convert) (routes []resource, why []string) {
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
				route := bootyaml.Shallow(rc)
				bootyaml.Del(route, "name")
				route.Content = append([]*yaml.Node{bootyaml.Key("name"), bootyaml.Str(name)}, route.Content...)
				if bootyaml.Value(route, "validate_clusters") == nil {
					route.Content = append(route.Content, bootyaml.Key("validate_clusters"), &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: "true"})
				}
				r := resource{name: name, node: route, sum: digest(route), owner: l.name}
				if convert != nil {
					var err error
					if r.served, err = convert(ads.RouteType, route); err != nil {
						why = append(why, fmt.Sprintf("the routes of listener %s (route configuration %s) stay in the listener: %v", l.name, name, err))
						continue
					}
				}
				routes = append(routes, r)
				source := bootyaml.Mapping("route_config_name", bootyaml.Str(name), "config_source", ads.ConfigSource())
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
	return routes, why
}

// Routes are the names of the route configurations served over ADS.
func (b *Bootstrap) Routes() []string { return names(b.routes) }

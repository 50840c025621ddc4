// Package inplace turns an operator's Envoy bootstrap into what the agent
// runs, and changes a running Envoy's resources in place on a reload. The
// whole rewrite, from the operator's file to what Envoy reads:
//
//	operator's file (envoy.config_path: .yaml, .yml or .json; .pb runs as it is)
//	  │
//	  │ 1. certificates (envoy/certs: Rewrite; Manager reads, watches and serves them)
//	  │    each certificate and CA a TLS context names by file becomes an SDS
//	  │    reference read over ADS (ads.ConfigSource), a secret the agent renews
//	  │ 2. RunningCopy (runcopy.go)
//	  │    the admin where the agent reaches it (none, or TCP while the agent's is a
//	  │    socket: the agent's socket); node.id and node.cluster where empty (DefaultNode)
//	  ▼
//	epoch copy: <run_dir>/epoch-N-SEQ-<file> (0600, one per epoch: envoy/epochfiles)
//	  what a reload validates and compares, and what a failed hot restart restores
//	  │
//	  │ 3. Parse (bootstrap.go), with reload_method "auto", in this order:
//	  │    a. listeners without a name get one from their address (names.go)
//	  │    b. listeners and clusters taken out of static_resources
//	  │    c. clusters something outside them names put back: they stay static
//	  │    d. static secrets only moved resources name moved to ADS (secrets.go)
//	  │    e. each connection manager's inline routes moved to RDS over ADS (routes.go)
//	  │    f. the rest, which two bootstraps compare as text
//	  │    (d and e convert each resource, envoy/xds.Convert; one that does not
//	  │    convert stays where it was, and Inline says why)
//	  │ 4. Write (files.go)
//	  ▼
//	<epoch copy>.d/ (0700): bootstrap.yaml   the rest, with dynamic_resources reading
//	                        lds.yaml         the listeners (LDS)
//	                        cds.yaml         the dynamic clusters (CDS)
//	                        and ads_config   the route configurations and secrets, which
//	                                         the agent's ADS server (envoy/xds) serves the
//	                                         epoch: Bootstrap.Served, set before Envoy starts
//
// A bootstrap is run as the epoch copy is (Parse returns a
// *NotRewritableError) when it already has dynamic_resources, is not YAML
// or JSON, or uses YAML anchors or aliases: every reload then hot-restarts.
// Such a copy that reads certificates over ADS runs wired to the server
// (Runnable), as does every copy with reload_method "hot_restart".
//
// A reload compares the serving epoch's copy with the new one (Compare),
// which says what changes (a Change) or that only a hot restart can
// (*RestartError), and Apply carries a Change out in the serving Envoy: it
// plans the steps (a listener or cluster file each, or route configurations
// or secrets over ADS, in an order that serves nothing of the new
// configuration on existing listeners before every step that can fail on
// the host has passed) and runs them, each confirmed (Envoy's admin API for
// a file, its ACK over ADS), putting back what Envoy had when it rejects one
// (apply.go; how a step reaches Envoy and is confirmed: confirm.go).
package inplace

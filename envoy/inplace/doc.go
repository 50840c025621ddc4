// Package inplace turns an operator's Envoy bootstrap into what the agent
// runs, and changes a running Envoy's resources in place on a reload. The
// whole rewrite, from the operator's file to the files Envoy reads:
//
//	operator's file (envoy.config_path: .yaml, .yml or .json; .pb runs as it is)
//	  │
//	  │ 1. certificates (envoy/certs: Rewrite; Manager writes and watches the files)
//	  │    each certificate and CA a TLS context names by file becomes an SDS
//	  │    reference to <run_dir>/SecretFile(name), a secret the agent renews
//	  │ 2. RunningCopy (runcopy.go)
//	  │    the admin where the agent reaches it (none, or TCP while the agent's is a
//	  │    socket: the agent's socket); node.id and node.cluster where empty (DefaultNode)
//	  ▼
//	epoch copy: <run_dir>/epoch-N-SEQ-<file> (0600, one per epoch: envoy/snapshot.go)
//	  what a reload validates and compares, and what a failed hot restart restores
//	  │
//	  │ 3. Parse (bootstrap.go), with reload_method "auto", in this order:
//	  │    a. listeners without a name get one from their address (names.go)
//	  │    b. listeners and clusters taken out of static_resources
//	  │    c. clusters something outside them names put back: they stay static
//	  │    d. static secrets only moved resources name moved to SDS (secrets.go)
//	  │    e. each connection manager's inline routes moved to RDS (routes.go)
//	  │    f. the rest, which two bootstraps compare as text
//	  │ 4. Write (files.go)
//	  ▼
//	<epoch copy>.d/ (0700): bootstrap.yaml   the rest, with dynamic_resources reading
//	                        lds.yaml         the listeners (LDS)
//	                        cds.yaml         the dynamic clusters (CDS)
//	                        rds-<h>.yaml     one route configuration each (RDS)
//	                        sds-<name>.yaml  one static secret each (SDS)
//
// A bootstrap is run as the epoch copy is (Parse returns a
// *NotRewritableError) when it already has dynamic_resources, is not YAML
// or JSON, or uses YAML anchors or aliases: every reload then hot-restarts.
//
// A reload compares the serving epoch's copy with the new one (Compare),
// which says what changes (a Change) or that only a hot restart can
// (*RestartError), and Apply carries a Change out in the serving Envoy: it
// plans the steps (one file each, in an order that serves nothing of the
// new configuration on existing listeners before every step that can fail
// on the host has passed) and runs them, each confirmed from Envoy's
// admin API, putting the previous files back when Envoy rejects one
// (apply.go; how a file is written and confirmed: confirm.go).
package inplace

//go:build linux

package config

import (
	"reflect"
	"strings"
)

// KeyDoc documents one key of the configuration file. The README's key table and the
// envoy-agent.toml(5) man page are generated from KeyDocs, and tests check that it names every key
// the loader accepts, with the loader's default and whether a reload applies it.
type KeyDoc struct {
	Key     string // table.key
	Default string // the default, as TOML
	Meaning string // one sentence; `code` in backquotes
	Reload  string // "yes", "yes (...)" or "no" (a restart-only key)
}

// KeyDocs lists every key of the configuration file, in the order of the example file.
var KeyDocs = []KeyDoc{
	{Key: "envoy.binary_path", Default: "\"envoy\"", Meaning: "the Envoy binary; a bare name is looked up in `PATH`", Reload: "yes (same hot-restart version)"},
	{Key: "envoy.config_path", Default: "\"/etc/envoy/envoy.yaml\"", Meaning: "Envoy's bootstrap (YAML, JSON or proto text by extension)", Reload: "yes"},
	{Key: "envoy.admin_port", Default: "0", Meaning: "Envoy's admin port on `agent.localhost`, for a TCP admin; unset (0), the admin is on `admin_socket`. Must match the bootstrap's admin `socket_address` (checked from the file, and again from the address Envoy really bound); a bootstrap without an admin runs with this one. Not with `admin_socket`. `validate` and `run` warn once when it is set: every local user can reach a TCP admin (`/config_dump` shows the bootstrap's secrets, `POST /logging` raises Envoy's log level, `POST /quitquitquit` stops Envoy)", Reload: "no"},
	{Key: "envoy.admin_socket", Default: `""`, Meaning: "Envoy's admin on this unix socket; `\"\"` with no `admin_port` is `admin.sock` in `run_dir` (`/run/envoy-agent/admin.sock` for the packages). A bootstrap's `admin.address.pipe.path` must be this path (a relative path there is taken from the agent's working folder, as Envoy does), checked from the file and from the address Envoy bound, and the pipe's `mode` must give others nothing (`mode: 0600`); a bootstrap without an admin, or with one on TCP, runs with this socket instead (the TCP address is not used: a warning says so once, and a cluster that reached it reaches the socket); at most 107 bytes", Reload: "no"},
	{Key: "envoy.log_level", Default: "\"info\"", Meaning: "Envoy's `-l`; Istio-style `\"info,upstream:warning\"` sets component levels too; `trace` and `debug` are refused, for any component (Envoy then logs the bootstrap's secrets and request headers)", Reload: "yes"},
	{Key: "envoy.component_log_level", Default: "\"\"", Meaning: "`--component-log-level`, e.g. `\"upstream:warning,connection:error\"` (not `debug` or `trace`)", Reload: "yes"},
	{Key: "envoy.log_as_json", Default: "false", Meaning: "Envoy writes its log lines as JSON (`--log-format`)", Reload: "yes"},
	{Key: "envoy.concurrency", Default: "0", Meaning: "`--concurrency` when above 0 (lowering it on a reload drops connections queued in the old workers)", Reload: "yes"},
	{Key: "envoy.node_ips", Default: "[]", Meaning: "`--local-address-ip-version v6` only when every one is IPv6", Reload: "yes"},
	{Key: "envoy.drain_duration", Default: "\"45s\"", Meaning: "`--drain-time-s`: graceful drains and a replaced epoch's drain", Reload: "yes"},
	{Key: "envoy.parent_shutdown_duration", Default: "\"60s\"", Meaning: "`--parent-shutdown-time-s`: when a replaced epoch is told to exit; must exceed `drain_duration`", Reload: "yes"},
	{Key: "envoy.base_id", Default: "0", Meaning: "`--base-id`, the hot-restart namespace; unique per Envoy on a host", Reload: "no"},
	{Key: "envoy.extra_args", Default: "[]", Meaning: "appended to Envoy's command line, last", Reload: "yes"},
	{Key: "envoy.drain_inbound_only", Default: "false", Meaning: "drain only `INBOUND` listeners (`drain_listeners?inboundonly`); listeners with no direction are then left alone", Reload: "yes"},
	{Key: "envoy.allow_remote_admin", Default: "false", Meaning: "accept an admin listener bound beyond loopback (otherwise refused)", Reload: "yes"},
	{Key: "agent.localhost", Default: "\"127.0.0.1\"", Meaning: "a loopback address: the status server listens there and Envoy's admin is reached there", Reload: "no"},
	{Key: "agent.status_port", Default: "15020", Meaning: "the agent's status server", Reload: "no"},
	{Key: "agent.prometheus_port", Default: "15090", Meaning: "merged metrics; `0` disables them", Reload: "no"},
	{Key: "agent.prometheus_address", Default: "\"127.0.0.1\"", Meaning: "where the metrics listen (`\"0.0.0.0\"` for a remote Prometheus)", Reload: "no"},
	{Key: "agent.termination_drain_duration", Default: "\"5s\"", Meaning: "the longest a stop drains", Reload: "yes"},
	{Key: "agent.min_drain_duration", Default: "\"5s\"", Meaning: "the least a stop drains before it may end at zero connections; at most the above", Reload: "yes"},
	{Key: "agent.exit_on_zero_active_connections", Default: "false", Meaning: "end a stop's drain as soon as no downstream connection is left", Reload: "yes"},
	{Key: "agent.start_timeout", Default: "\"60s\"", Meaning: "Envoy (and a reload's new epoch) must be LIVE by then", Reload: "yes"},
	{Key: "agent.log_level", Default: "\"info\"", Meaning: "the agent's own log level", Reload: "yes"},
	{Key: "agent.log_format", Default: "\"text\"", Meaning: "`\"text\"` or `\"json\"`", Reload: "yes"},
	{Key: "agent.run_dir", Default: `""`, Meaning: "where the agent keeps runtime files (the control socket, bootstrap copies, admin address files); `\"\"` is `/run/envoy-agent`, the unit's `RuntimeDirectory=`, or `/run/envoy-agent-NAME` for `/etc/envoy-agent/NAME.toml` (the template unit's instance NAME), fixed so that `envoy-agent reload` and `status` find the socket from the file alone (change both together); Envoy's hot-restart sockets are files there too, so it must leave room for their names (`validate` says how long it may be; about 80 bytes)", Reload: "no"},
	{Key: "agent.control_socket", Default: `""`, Meaning: "the control socket (reload, drain, quit, status, reopen-logs); `\"\"` is `<run_dir>/control.sock`; at most 107 bytes", Reload: "no"},
	{Key: "agent.reload_method", Default: `""`, Meaning: "`\"\"` or `\"auto\"`: Envoy runs the bootstrap's listeners, their routes and its clusters from LDS, RDS and CDS files of the agent's, and a reload that changes only routes or clusters, or adds listeners, changes them in the serving Envoy (in place, no connection drained), any other change (a listener changed beside its routes too) hot restarts; `\"hot_restart\"`: every reload starts a new epoch (a change of the key itself takes effect with the next new epoch; [Reload in place](operations.md#reload-in-place-the-default))", Reload: "yes"},
	{Key: "agent.reload_guard", Default: `"0s"`, Meaning: "for this long after a reload, the reload guard compares Envoy's traffic with the 5 minutes before it (5xx answers, each cluster's answers, failed connections, timeouts and healthy hosts, listeners, `reload_guard_url`) and rolls a clear regression back to the configuration before (the files are not touched); `\"0s\"` turns it off, else at least `\"3s\"` ([The reload guard](operations.md#the-reload-guard))", Reload: "yes"},
	{Key: "agent.reload_guard_url", Default: `""`, Meaning: "a URL that must keep answering 2xx after a reload, asked every second, such as `http://127.0.0.1:8080/healthz` through Envoy; judged only when it answered 2xx just before the reload; no user or password in it (it is logged)", Reload: "yes"},
	{Key: "agent.reload_guard_error_rise", Default: "0.1", Meaning: "a regression is a share of failures (5xx answers, failed connection attempts, timeouts, connections closed at once) risen by this much over its share before the reload: 0.1 is 10 points", Reload: "yes"},
	{Key: "agent.reload_guard_min_requests", Default: "50", Meaning: "how many requests (connections, connection attempts) a share must count after the reload before it is judged, and before it for its share then to count; a listener counts as gone only when it took at least this many connections in the 5 minutes before", Reload: "yes"},
	{Key: "agent.reload_guard_healthy_share", Default: "0.5", Meaning: "a cluster that had healthy hosts before the reload must keep at least this share of them; 0 turns this signal off", Reload: "yes"},
}

// tomlKeys lists the toml tag names of a struct's fields.
func tomlKeys(v any) []string {
	t := reflect.TypeOf(v)
	var keys []string
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("toml"), ",")
		if name != "" && name != "-" {
			keys = append(keys, name)
		}
	}
	return keys
}

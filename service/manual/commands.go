package manual

// DefaultConfig is the configuration file the commands use without --config.
const DefaultConfig = "/etc/envoy-agent/config.toml"

// Command is one envoy-agent command.
type Command struct {
	Name string
	// Args is the synopsis after the name: "[--config FILE]", or "".
	Args string
	// Summary is the one line `envoy-agent help` prints.
	Summary string
	// Description is what it does, for README's table, the man page and COMMAND --help: one
	// paragraph; `code` in backquotes.
	Description string
	// ConfigFlag is true for the commands that take --config FILE.
	ConfigFlag bool
	// Flags are the command's switches besides --config FILE, in the
	// order Args names them: the command line defines them from here, so
	// that `COMMAND --help` lists each (the Ansible role looks there for
	// `reload --wait` and `validate --plan`).
	Flags []Flag
}

// Flag is a command's switch, off unless given.
type Flag struct {
	Name string // without dashes: "wait"
	// Usage is what it does, for --help and the man page: one sentence
	// without its period; `code` in backquotes.
	Usage string
}

// FlagNamed is c's flag of that name.
func (c Command) FlagNamed(name string) (Flag, bool) {
	for _, f := range c.Flags {
		if f.Name == name {
			return f, true
		}
	}
	return Flag{}, false
}

// Commands lists envoy-agent's commands in the order help shows them.
var Commands = []Command{
	{
		Name: "run", Args: "[--config FILE]", ConfigFlag: true,
		Summary:     "start Envoy, notify systemd, drain on SIGTERM",
		Description: "start Envoy, notify systemd, feed the watchdog, drain on SIGTERM, reload on SIGHUP, have Envoy reopen its logs on SIGUSR1",
	},
	{
		Name: "validate", Args: "[--config FILE] [--plan]", ConfigFlag: true,
		Summary:     "check the configuration and Envoy's bootstrap",
		Description: "check the TOML and run `envoy --mode validate` on the copy of the bootstrap that `run` starts; prints `OK: ...` or each problem as `file:line: key: what is wrong` (the unit's `ExecStartPre=`); warns of a certificate the bootstrap names that has expired or expires within 14 days; counts the files Envoy will watch against `fs.inotify.max_user_instances` (exit 3 over it, a warning close to it); notes what the agent changes in its copy (the admin, the node, names for unnamed listeners). With `--plan`, then asks the agent running on this file's control socket (whichever configuration it runs) what a reload into these files would do, as `reload --dry-run` prints it; nothing changes (the Ansible role's check mode)",
		Flags:       []Flag{{Name: "plan", Usage: "then print what a reload into these files would do on the running agent, as `reload --dry-run` does; nothing changes"}},
	},
	{
		Name: "reload", Args: "[--config FILE] [--wait] [--force] [--dry-run]", ConfigFlag: true,
		Summary:     "make the running agent apply its edited files",
		Description: "ask the agent running with this file to reload (on its control socket, checking that the agent answering runs this file), wait, print `reloaded in place: <what changed>; epoch N keeps serving (T ms)`, `reloaded: epoch N is serving (T ms); hot restart: <why>` or the reason it failed (the unit's `ExecReload=`); a reload that must first wait for a draining epoch says so at once. `--wait` also waits for the reload guard's verdict (`agent.reload_guard`) and exits 5 when it rolled the reload back; `--force` takes files the reload guard rolled back, which a reload otherwise refuses (exit 3); `--dry-run` prints what a reload would do (in place, hot restart, or drain and restart, with the reason, and the listeners, routes, clusters and secrets added, changed or removed) and changes nothing",
		Flags: []Flag{
			{Name: "wait", Usage: "also wait for the reload guard's verdict, and exit 5 when it rolled the reload back"},
			{Name: "force", Usage: "take files the reload guard rolled back (refused otherwise, exit 3)"},
			{Name: "dry-run", Usage: "print what a reload would do, and change nothing"},
		},
	},
	{
		Name: "upgrade", Args: "[--config FILE]", ConfigFlag: true,
		Summary:     "make the running agent re-execute the installed binary, Envoy kept",
		Description: "ask the agent running with this file to re-execute its binary (the one installed now) on its control socket, handing the running Envoy over with no request dropped; wait until the new agent serves. Exits 4 when the running agent cannot hand over (it predates live upgrades): restart the unit then (the packages do)",
	},
	{
		Name: "status", Args: "[--config FILE] [--json]",
		Summary:     "what the running agent and its Envoy are doing",
		Description: "what the agent running with this file and its Envoy are doing: state, epochs, versions, connections, listeners, drain, last reload, whether the files on disk are what Envoy serves, the certificates in use with their expiry; `--json` for the documented JSON (schema_version 1). Exits 0 when the agent answers, 3 when none runs, 4 when the file or the answer cannot be read",
	},
	{
		Name: "reopen-logs", Args: "[--config FILE]", ConfigFlag: true,
		Summary:     "make every running Envoy reopen its log files",
		Description: "ask the agent running with this file to have every live Envoy epoch reopen its access logs (after logrotate renamed them); prints `reopened: N epochs` (the logrotate rule's `postrotate`)",
	},
	{
		Name: "version", Args: "[--handover] [--handover-check FILE]",
		Summary:     "print the version",
		Description: "print the version; with `--handover`, also the handover state versions this binary reads (what a live upgrade checks); with `--handover-check FILE`, read a running agent's handover state and say whether this binary can adopt it (what a live upgrade runs before its exec)",
	},
	{
		Name: "help", Args: "",
		Summary:     "print this help",
		Description: "usage",
	},
}

// Lookup returns the command called name.
func Lookup(name string) (Command, bool) {
	for _, c := range Commands {
		if c.Name == name {
			return c, true
		}
	}
	return Command{}, false
}

// Signal is a signal the agent handles while it runs.
type Signal struct {
	Name    string
	Meaning string
}

// Signals lists what `envoy-agent run` does on each signal.
var Signals = []Signal{
	{"SIGTERM, SIGINT", "drain Envoy (health checks fail, listeners drain, requests in flight finish, up to `agent.termination_drain_duration`), stop it and exit 0; a second one ends the drain at once"},
	{"SIGHUP", "reload, as `envoy-agent reload` does; the outcome is only logged"},
	{"SIGUSR1", "have every live Envoy epoch reopen its log files, as `envoy-agent reopen-logs` does; the outcome is only logged"},
	{"SIGABRT", "systemd's watchdog fired (the unit's `WatchdogSignal=`): stop Envoy without a drain and exit 0, with no Go stack dump; the cause was logged at error priority when the pings stopped"},
}

// ExitCode is one exit status of envoy-agent.
type ExitCode struct {
	Code    int
	Meaning string
}

// ExitCodes lists envoy-agent's exit statuses.
var ExitCodes = []ExitCode{
	{0, "success: a drained stop, a stop through `/quitquitquit` or `/drain` on the control socket, a stop before Envoy was LIVE, a valid configuration, a successful reload or log reopening"},
	{1, "runtime failure: Envoy exited by itself (its reason and last log lines are printed; SIGKILL gets an OOM hint), Envoy was not LIVE within `start_timeout`, a port of the agent's was taken (the error names who holds it), Envoy's shared memory for the `base_id` is made or mapped by a process the agent did not start (the error names its pid and uid), its control socket is served by another live process, a reload failed at run time (the serving Envoy kept serving), no agent answered `reload` or `reopen-logs`"},
	{2, "command-line usage error"},
	{3, "invalid configuration: a TOML error, an unknown key, a wrong type, a bad value, a missing or non-executable binary or one that is not an Envoy, a missing bootstrap, a bootstrap Envoy rejects (`validate`, `reload`), a bootstrap that was being written in place while a reload read it (write it beside and rename it over), files the reload guard rolled back reloaded again without `--force`, an admin address that does not match `admin_port` or `admin_socket`, a `run_dir`, an admin socket's folder or a claims folder that anyone but root and the agent's user can write, replace or make first (every folder above counts), an Envoy binary, a bootstrap or a configuration file that anyone but root and the agent's user can change or whose path cannot be walked as the kernel opens it (the error names the file or folder and who can write it), a `base_id` or a port another agent on this host holds, more files for Envoy to watch than `fs.inotify.max_user_instances` leaves the user (Envoy would abort at its start); nothing was started. The unit has `RestartPreventExitStatus=3`: restarting cannot fix a bad file"},
	{4, "`upgrade` only: the running agent cannot hand over (it predates live upgrades, or it and the new binary share no handover version); `systemctl restart` switches with a drain. (`status` has its own codes: 0 running, 3 stopped, 4 unknown)"},
	{5, "`reload --wait` only: the reload guard saw Envoy's traffic get worse after the reload and rolled it back (the configuration before serves, the files on disk are not what it serves), or its rollback failed; the answer says which signal, with its figures"},
}

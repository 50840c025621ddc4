package manual

import (
	"fmt"
	"strings"

	"github.com/envoy-agent/envoy-agent/service/config"
)

// ReadmeTables returns the tables of README.md and docs/configuration.md that come from this package, keyed by their header
// line: the commands, the exit codes and the configuration keys.
func ReadmeTables() map[string]string {
	var cmds strings.Builder
	for _, c := range Commands {
		syn := "envoy-agent " + c.Name
		if c.Args != "" {
			syn += " " + c.Args
		}
		if c.Name == "help" {
			syn += "`, `COMMAND --help"
		}
		fmt.Fprintf(&cmds, "| `%s` | %s |\n", syn, c.Description)
	}
	var codes strings.Builder
	for _, e := range ExitCodes {
		fmt.Fprintf(&codes, "| %d | %s |\n", e.Code, e.Meaning)
	}
	var keys strings.Builder
	for _, k := range config.KeyDocs {
		fmt.Fprintf(&keys, "| `%s` | `%s` | %s | %s |\n", k.Key, k.Default, k.Meaning, k.Reload)
	}
	return map[string]string{
		"| command | what it does |\n|---|---|\n":                   cmds.String(),
		"| code | meaning |\n|---|---|\n":                           codes.String(),
		"| key | default | meaning | reload |\n|---|---|---|---|\n": keys.String(),
	}
}

// Usage is `envoy-agent help`.
func Usage() string {
	var b strings.Builder
	b.WriteString("envoy-agent supervises one Envoy under systemd.\n\nUsage:\n")
	for _, c := range Commands {
		fmt.Fprintf(&b, "  envoy-agent %-12s %-16s %s\n", c.Name, c.Args, c.Summary)
	}
	b.WriteString("\nRun \"envoy-agent COMMAND --help\" for a command's flags.\n")
	b.WriteString("The default configuration file is " + DefaultConfig + ".\n")
	b.WriteString("See envoy-agent(8) and envoy-agent.toml(5).\n")
	return b.String()
}

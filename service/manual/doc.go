// Package manual is the one source of envoy-agent's user documentation that must not drift: the
// commands, their options, the signals and the exit codes, declared here as data, and the
// configuration keys (config.KeyDocs). `envoy-agent help` and `COMMAND --help` print from it,
// the man pages envoy-agent(8) and envoy-agent.toml(5) are rendered from it (cmd/genman, at
// package time), and a test checks that README.md's tables say the same.
package manual

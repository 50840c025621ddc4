//go:build linux

package config

import "github.com/BurntSushi/toml"

// LoadUnchecked reads what a command that reaches the running agent needs
// from its file (reload, status, upgrade, reopen-logs): where the control
// socket is, and the timeouts. Unlike LoadConfig it checks nothing else:
// the agent re-reads and checks the whole file itself.
func LoadUnchecked(path string) (*Config, error) {
	data, err := readConfigFile(path)
	if err != nil {
		return nil, &ConfigError{Problems: []Problem{{File: path, Msg: err.Error()}}}
	}
	if err := checkNesting(data); err != nil {
		return nil, &ConfigError{Problems: []Problem{err.problem(path)}}
	}
	cfg := DefaultConfig()
	cfg.File = path
	if _, err := toml.Decode(string(data), &cfg); err != nil {
		return nil, &ConfigError{Problems: []Problem{decodeProblem(path, err)}}
	}
	cfg.resolvePaths()
	return &cfg, nil
}

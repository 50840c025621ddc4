//go:build linux

package config

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/BurntSushi/toml"
	"github.com/agnivade/levenshtein"
	"github.com/envoy-agent/envoy-agent/internal/bootyaml"
	"github.com/envoy-agent/envoy-agent/internal/filetrust"
	"github.com/envoy-agent/envoy-agent/internal/safefile"
)

// maxConfigSize bounds the TOML file the agent reads.
const maxConfigSize = 1 << 20

// LoadConfig reads and checks the configuration file at path. Relative
// paths in it are resolved against the file's folder. Every problem is
// returned in one *ConfigError, each naming the file, line and key.
func LoadConfig(path string) (*Config, error) { return loadConfig(path, false) }

// LoadStartConfig is LoadConfig for a start: the Config also keeps the
// bootstrap as its check read and decoded it, for the first epoch's copy
// (TakeStartBootstrap), which then need not decode it again.
func LoadStartConfig(path string) (*Config, error) { return loadConfig(path, true) }

// TakeStartBootstrap returns, once, the bootstrap a start's check decoded
// (LoadStartConfig); nil after, or for another Config.
func (c *Config) TakeStartBootstrap() *bootyaml.Decoded {
	d := c.start
	c.start = nil
	return d
}

func loadConfig(path string, start bool) (*Config, error) {
	data, trust, err := readTrustedConfigFile(path)
	if err != nil {
		return nil, &ConfigError{Problems: []Problem{{File: path, Msg: err.Error()}}}
	}
	cfg := DefaultConfig()
	cfg.File = path
	cfg.keepStart = start
	cfg.sum = textSum(data)
	cfg.src = newKeyLines(strings.Split(string(data), "\n"))
	ps := &problems{file: path, lines: cfg.src}
	if err := checkNesting(data); err != nil {
		return nil, &ConfigError{Problems: []Problem{err.problem(path)}}
	}
	md, err := toml.Decode(string(data), &cfg)
	if err != nil {
		return nil, &ConfigError{Problems: []Problem{decodeProblem(path, err)}}
	}
	cfg.adminPortSet = md.IsDefined("envoy", "admin_port")
	unknown := map[string]bool{}
	for _, k := range md.Undecoded() {
		unknown[k.String()] = true
		if len(k) > 1 && unknown[k[:len(k)-1].String()] {
			continue // inside an unknown table: the table is the problem
		}
		ps.add(k.String(), unknownKeyMsg+"%s", suggest(k))
	}
	cfg.resolvePaths()
	cfg.check(ps, trust)
	if err := ps.err(); err != nil {
		return nil, err
	}
	return &cfg, nil
}

// typeErrRE matches the errors toml gives for a value of the wrong type,
// which are not ParseErrors; compiled at the first such error.
var typeErrRE = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^toml: line (\d+) \(last key "([^"]*)"\): incompatible types: TOML value has type (\w+); destination has type (\w+)`)
})

// decodeProblem turns an error of toml.Decode into a Problem with the line
// and key where toml gives them.
func decodeProblem(path string, err error) Problem {
	var pe toml.ParseError
	if errors.As(err, &pe) {
		return Problem{File: path, Line: pe.Position.Line, Key: pe.LastKey, Msg: pe.Message}
	}
	if m := typeErrRE().FindStringSubmatch(err.Error()); m != nil {
		line, _ := strconv.Atoi(m[1])
		return Problem{File: path, Line: line, Key: m[2], Msg: fmt.Sprintf("wrong type: want %s, got %s (incompatible types)", article(m[4]), article(m[3]))}
	}
	return Problem{File: path, Msg: err.Error()}
}

func article(typ string) string {
	if strings.ContainsRune("aeiou", rune(typ[0])) {
		return "an " + typ
	}
	return "a " + typ
}

// readTrustedConfigFile reads the configuration the agent runs with
// through the descriptor filetrust judged, so that what is read is the file
// judged; trust is the judgement (nil: only root and the agent's user can
// change it). A file others can change is still read, for its other
// problems, and refused for that one.
func readTrustedConfigFile(path string) (data []byte, trust, err error) {
	r, trust := filetrust.Default().Open(path)
	if trust != nil {
		data, err = readConfigFile(path)
		return data, trust, err
	}
	defer r.File.Close()
	if data, _, err = safefile.ReadOpened(r.File, maxConfigSize); err != nil {
		return nil, nil, fmt.Errorf("cannot read the configuration: %w", err)
	}
	return data, nil, nil
}

// Sum is the SHA-256 (hex) of the text the configuration was loaded from,
// "" for one that was not loaded from its file by this process (handed
// over in a live upgrade): with FileSum, it tells whether the file on disk
// still holds what is in force.
func (c *Config) Sum() string { return c.sum }

// FileSum is the SHA-256 (hex) of the configuration file at path as
// LoadConfig would read it now.
func FileSum(path string) (string, error) {
	data, err := readConfigFile(path)
	if err != nil {
		return "", err
	}
	return textSum(data), nil
}

func textSum(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

func readConfigFile(path string) ([]byte, error) {
	data, err := safefile.ReadRegular(path, maxConfigSize)
	if err != nil {
		return nil, fmt.Errorf("cannot read the configuration: %w", err)
	}
	return data, nil
}

// knownKeys lists every key per table, for suggestions.
var knownKeys = map[string][]string{
	"envoy": tomlKeys(EnvoyConfig{}),
	"agent": tomlKeys(AgentConfig{}),
}

func suggest(k toml.Key) string {
	if len(k) == 1 {
		if _, ok := knownKeys[k[0]]; !ok {
			return " (the tables are [envoy] and [agent])"
		}
		return ""
	}
	keys, ok := knownKeys[k[0]]
	if !ok {
		return " (the tables are [envoy] and [agent])"
	}
	best, bestD := "", 3
	for _, cand := range keys {
		if d := levenshtein.ComputeDistance(k[len(k)-1], cand); d < bestD {
			best, bestD = cand, d
		}
	}
	if best != "" {
		return fmt.Sprintf(" (did you mean %q?)", best)
	}
	return ""
}

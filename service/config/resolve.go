//go:build linux

// Resolution of the paths a configuration names: relative paths, the Envoy
// binary in PATH, the run folder.

package config

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/envoy-agent/envoy-agent/internal/safefile"
	"golang.org/x/sys/unix"
)

// resolvePaths makes config_path absolute against the configuration's
// folder, and binary_path too when it names a relative path with a slash; a
// bare name is looked up in PATH later.
func (c *Config) resolvePaths() {
	dir := filepath.Dir(c.File)
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	if c.Envoy.ConfigPath != "" && !filepath.IsAbs(c.Envoy.ConfigPath) {
		c.Envoy.ConfigPath = filepath.Join(dir, c.Envoy.ConfigPath)
	}
	if strings.Contains(c.Envoy.BinaryPath, "/") && !filepath.IsAbs(c.Envoy.BinaryPath) {
		c.Envoy.BinaryPath = filepath.Join(dir, c.Envoy.BinaryPath)
	}
	if c.Envoy.AdminSocket != "" && !filepath.IsAbs(c.Envoy.AdminSocket) {
		c.Envoy.AdminSocket = filepath.Join(dir, c.Envoy.AdminSocket)
	}
	if c.Agent.RunDir != "" && !filepath.IsAbs(c.Agent.RunDir) {
		c.Agent.RunDir = filepath.Join(dir, c.Agent.RunDir)
	}
	if c.Agent.ControlSocket != "" && !filepath.IsAbs(c.Agent.ControlSocket) {
		c.Agent.ControlSocket = filepath.Join(dir, c.Agent.ControlSocket)
	}
}

// resolveBinary finds an executable Envoy: a bare name in PATH, a path as is.
func resolveBinary(p string) (string, error) {
	if !strings.Contains(p, "/") {
		found, err := exec.LookPath(p)
		if err != nil {
			return "", fmt.Errorf("envoy binary %q not found in PATH (%s)", p, os.Getenv("PATH"))
		}
		p = found
	}
	fi, err := os.Stat(p)
	if err != nil {
		return "", fmt.Errorf("envoy binary %w", err)
	}
	if fi.IsDir() {
		return "", fmt.Errorf("envoy binary %s is a directory", p)
	}
	if err := unix.Access(p, unix.X_OK); err != nil {
		return "", fmt.Errorf("envoy binary %s is not executable: %w", p, err)
	}
	return p, nil
}

func checkReadable(p string) error {
	f, err := safefile.OpenRegular(p)
	if err != nil {
		return err
	}
	return f.Close()
}

// RunDir is where the agent keeps its runtime files: run_dir, else
// DefaultRunDir. It depends on the file alone (not on the environment), so
// that `envoy-agent reload` finds the control socket from any shell.
func (c *Config) RunDir() string {
	if c.Agent.RunDir != "" {
		return c.Agent.RunDir
	}
	return defaultRunDir(c.File)
}

// defaultRunDir is run_dir when the file does not set it: DefaultRunDir for
// /etc/envoy-agent/config.toml (and any other file), and
// /run/envoy-agent-NAME for /etc/envoy-agent/NAME.toml, the file of the
// template unit's instance NAME, whose RuntimeDirectory that is. The agent
// and the commands that reach it (reload, status, reopen-logs) find the same
// folder from the file's name alone.
func defaultRunDir(file string) string {
	abs, err := filepath.Abs(file)
	if err != nil || filepath.Dir(abs) != instanceConfigDir {
		return DefaultRunDir
	}
	name := strings.TrimSuffix(filepath.Base(abs), ".toml")
	if name == "config" || name == filepath.Base(abs) || name == "" {
		return DefaultRunDir
	}
	return DefaultRunDir + "-" + name
}

// instanceConfigDir holds the template unit's instance files (NAME.toml).
const instanceConfigDir = "/etc/envoy-agent"

package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"

	"github.com/BurntSushi/toml"
)

// ReloadError is a reload the running agent refused or that failed; the
// serving Envoy kept serving.
type ReloadError struct {
	Result ReloadResult
}

func (e *ReloadError) Error() string {
	return fmt.Sprintf("reload failed; epoch %d keeps serving: %s", e.Result.Epoch, e.Result.Error)
}

// RequestReload is `envoy-agent reload`: it asks the agent running with the
// configuration at path to reload, waits for the outcome and prints it. It
// reads only the agent's address from the file; the agent itself re-reads
// and checks the whole file.
func RequestReload(ctx context.Context, path string, out io.Writer) error {
	data, err := readConfigFile(path)
	if err != nil {
		return &ConfigError{Problems: []Problem{{File: path, Msg: err.Error()}}}
	}
	cfg := DefaultConfig()
	if _, err := toml.Decode(string(data), &cfg); err != nil {
		return &ConfigError{Problems: []Problem{decodeProblem(path, err)}}
	}
	url := "http://" + net.JoinHostPort(cfg.Agent.Localhost, strconv.Itoa(int(cfg.Agent.StatusPort))) + "/reload"
	ctx, cancel := context.WithTimeout(ctx, 2*cfg.Agent.StartTimeout.D()+2*validateTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
	if err != nil {
		return fmt.Errorf("reload: %w", err)
	}
	resp, err := (&http.Client{Transport: &http.Transport{Proxy: nil}}).Do(req)
	if err != nil {
		return fmt.Errorf("reload: cannot reach the agent at %s (is envoy-agent running with %s? if agent.status_port or agent.localhost was edited, the agent still listens on the old address: restart the service): %w", url, path, err)
	}
	defer resp.Body.Close()
	var res ReloadResult
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&res); err != nil {
		return fmt.Errorf("reload: the agent at %s answered %s, not a reload result: %w", url, resp.Status, err)
	}
	if !res.OK {
		if res.Error == "" {
			res.Error = "no reason given"
		}
		return &ReloadError{Result: res}
	}
	fmt.Fprintf(out, "reloaded: epoch %d is serving (%d ms)\n", res.Epoch, res.TookMs)
	if res.Note != "" {
		fmt.Fprintf(out, "  (%s)\n", res.Note)
	}
	return nil
}

// IsConfigReloadError reports whether err is a reload refused for the
// configuration itself (a bad file, a setting that needs a restart).
func IsConfigReloadError(err error) bool {
	var re *ReloadError
	return errors.As(err, &re) && re.Result.Config
}

//go:build linux

package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/envoy-agent/envoy-agent/envoy/cli"
	"github.com/envoy-agent/envoy-agent/internal/printable"
	"github.com/envoy-agent/envoy-agent/service/config"
)

// statusRequestTimeout bounds `envoy-agent status`: the agent answers at
// once, but asks Envoy's admin API three things (statusAdminTimeout each).
const statusRequestTimeout = 4*StatusAdminTimeout + time.Second

// NotRunningError is `envoy-agent status` finding no agent to answer: the
// state "stopped".
type NotRunningError struct {
	Report StatusReport
}

func (e *NotRunningError) Error() string { return e.Report.Error }

// RequestStatus is `envoy-agent status`: it asks the agent running with the
// configuration at path for its status report and prints it, as text or as
// JSON (the schema of StatusReport). It finds the agent as `envoy-agent
// reload` does, reading only the agent's address from the file. When no
// agent answers, it prints the state "stopped" and returns a
// *NotRunningError.
func RequestStatus(ctx context.Context, path string, asJSON bool, out io.Writer) error {
	cfg, err := config.LoadUnchecked(path)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, statusRequestTimeout)
	defer cancel()
	rep, reached, err := getStatus(ctx, cfg)
	if err != nil && reached {
		return fmt.Errorf("status: %w", err)
	}
	if err != nil {
		rep = StatusReport{SchemaVersion: StatusSchemaVersion, State: StateStopped, Error: err.Error(),
			Agent: AgentStatus{Config: path}, Epochs: []EpochStatus{}}
	} else if rep.Agent.Restarts == nil {
		rep.Agent.Restarts = unitRestarts(ctx, rep.Agent.Unit)
	}
	if asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return fmt.Errorf("status: %w", err)
		}
	} else {
		fmt.Fprint(out, FormatStatus(rep))
	}
	if rep.State == StateStopped {
		return &NotRunningError{Report: rep}
	}
	return nil
}

// getStatus asks the agent for GET /status on its control socket, the way
// RequestReload reaches it, and checks that the answer comes from the agent
// that runs this file. reached is false when nothing answered at all.
func getStatus(ctx context.Context, cfg *config.Config) (rep StatusReport, reached bool, err error) {
	url := cfg.ControlSocketPath()
	resp, server, err := controlRequest(ctx, url, http.MethodGet, "/status", "")
	if ue := (*config.UntrustedControlError)(nil); errors.As(err, &ue) {
		return rep, true, fmt.Errorf("%s: %w", url, err)
	}
	if err != nil {
		return rep, false, fmt.Errorf("no envoy-agent answers on %s (is envoy-agent running with %s?): %w", url, cfg.File, err)
	}
	defer resp.Body.Close()
	if err := checkControlIdentity(resp, server, cfg.File); err != nil {
		return rep, true, err
	}
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return rep, true, fmt.Errorf("%s answered %s, not a status report: %s", url, resp.Status, firstLine(string(body)))
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&rep); err != nil {
		return rep, true, fmt.Errorf("%s answered with something that is not a status report: %w", url, err)
	}
	return rep, true, nil
}

// FormatStatus is the status report as text for people.
func FormatStatus(r StatusReport) string {
	var b strings.Builder
	name := "envoy-agent"
	if r.Agent.Instance != "" {
		name += "@" + r.Agent.Instance
	}
	// Every line's text has its control characters escaped: certificates'
	// names, Envoy's reasons and paths come from files and from Envoy, and
	// reach the operator's terminal (printable).
	fmt.Fprintf(&b, "%s\n", printable.String(fmt.Sprintf("%s: %s (%s)", name, r.State, r.Agent.Config)))
	if r.State == StateStopped {
		fmt.Fprintf(&b, "  %s\n", printable.String(r.Error))
		return b.String()
	}
	line := func(label, format string, args ...any) {
		fmt.Fprintf(&b, "  %-13s %s\n", label+":", printable.String(fmt.Sprintf(format, args...)))
	}
	line("agent", "%s, pid %d, up %s, status server %s", r.Agent.Version, r.Agent.Pid, secs(r.Agent.UptimeSeconds), r.Agent.StatusAddress)
	if r.Agent.Unit != "" {
		restarts := "systemd's restart count unknown"
		if r.Agent.Restarts != nil {
			restarts = fmt.Sprintf("restarted %d times by systemd (NRestarts)", *r.Agent.Restarts)
		}
		line("unit", "%s, %s", r.Agent.Unit, restarts)
	}
	if pe := r.Agent.PreviousExit; pe != nil {
		line("last exit", "%s, agent pid %d: %s", pe.At, pe.Pid, pe.Reason)
	}
	if e := r.Envoy; e != nil {
		line("envoy", "%s, hot-restart version %s, base_id %d, admin %s", orUnknown(e.Version), orUnknown(e.HotRestartVersion), e.BaseID, e.Admin)
		if e.HotRestartVersion == cli.HotRestartDisabled {
			line("reload", "%s", HotRestartOffNote)
		}
		if e.AdminError != "" {
			line("admin API", "%s", e.AdminError)
		}
	}
	if len(r.Epochs) == 0 {
		line("epochs", "none running")
	}
	for i, ep := range r.Epochs {
		label := ""
		if i == 0 {
			label = "epochs"
		}
		text := fmt.Sprintf("epoch %d, pid %d, %s, up %s", ep.Epoch, ep.Pid, ep.Role, secs(ep.AgeSeconds))
		if ep.DrainEndsInSeconds != nil {
			text += fmt.Sprintf(" (drain ends in %s, told to exit in %s)", secs(*ep.DrainEndsInSeconds), secs(*ep.ExitsInSeconds))
		}
		if label == "" {
			fmt.Fprintf(&b, "  %-13s %s\n", "", printable.String(text))
		} else {
			line(label, "%s", text)
		}
	}
	if e := r.Envoy; e != nil {
		if e.ActiveConnections != nil {
			line("connections", "%d active", *e.ActiveConnections)
		}
		var ls []string
		for _, l := range e.Listeners {
			text := l.Name + " " + l.Address
			if l.NamedByAgent {
				text += " (named by the agent)"
			}
			ls = append(ls, text)
		}
		if len(ls) > 0 {
			line("listeners", "%s", strings.Join(ls, ", "))
		}
	}
	if d := r.Drain; d != nil {
		switch {
		case d.Done:
			line("drain", "%s drain ended after %s: %s", d.Kind, secs(d.ElapsedSeconds), d.Reason)
		case d.Kind == "endless":
			line("drain", "endless (POST /drain) for %s; the next stop exits at once", secs(d.ElapsedSeconds))
		default:
			conns := "unknown"
			if d.ActiveConnections != nil {
				conns = strconv.Itoa(*d.ActiveConnections)
			}
			line("drain", "%s active connections, %s elapsed, %s left at most", conns, secs(d.ElapsedSeconds), secs(d.RemainingSeconds))
		}
	}
	if lr := r.LastReload; lr != nil {
		line("last reload", "%s", reloadText(lr))
	} else {
		line("last reload", "none")
	}
	if r.Reloads.RolledBack > 0 {
		line("reloads", "%d ok (%d of them rolled back by the reload guard), %d failed", r.Reloads.OK, r.Reloads.RolledBack, r.Reloads.Failed)
	} else {
		line("reloads", "%d ok, %d failed", r.Reloads.OK, r.Reloads.Failed)
	}
	if f := r.Files; f != nil {
		line("files", "%s", filesText(f))
	}
	for i, c := range r.Certificates {
		label := ""
		if i == 0 {
			label = "certificates"
		}
		kind := ""
		if c.CA {
			kind = "trusted CA, "
		}
		text := fmt.Sprintf("%s: %s%s, DNS %s, not after %s (%d days left)", c.File, kind, c.Subject, orNone(strings.Join(c.DNSNames, " ")), c.NotAfter, c.DaysLeft)
		if c.Error != "" {
			text += "; renewal NOT taken: " + c.Error
		}
		if label == "" {
			fmt.Fprintf(&b, "  %-13s %s\n", "", printable.String(text))
		} else {
			line(label, "%s", text)
		}
	}
	if r.CertificatesPolled != "" {
		line("certificates", "%s", r.CertificatesPolled)
	}
	return b.String()
}

// reloadText is the last reload's line.
func reloadText(lr *ReloadStatus) string {
	if rb := lr.Rollback; lr.Outcome == OutcomeRolledBack && rb != nil {
		if rb.Error != "" {
			return fmt.Sprintf("%s: the reload guard saw a regression at %s and its rollback FAILED: %s; the reloaded configuration serves (epoch %d); regression: %s",
				lr.At, rb.At, firstLine(rb.Error), lr.Epoch, rb.Reason)
		}
		return fmt.Sprintf("%s: ROLLED BACK by the reload guard at %s (%s in %d ms), epoch %d serves the configuration from before: %s",
			lr.At, rb.At, strings.ReplaceAll(rb.Path, "_", " "), rb.TookMs, lr.Epoch, rb.Reason)
	}
	var text string
	switch {
	case !lr.OK:
		return fmt.Sprintf("%s: FAILED after %d ms, epoch %d kept serving: %s", lr.At, lr.TookMs, lr.Epoch, firstLine(lr.Error))
	case lr.Path == PathInPlace:
		text = fmt.Sprintf("%s: ok in place in %d ms (%s), epoch %d serving", lr.At, lr.TookMs, lr.Changed, lr.Epoch)
	default:
		text = fmt.Sprintf("%s: ok in %d ms, epoch %d serving", lr.At, lr.TookMs, lr.Epoch)
	}
	if lr.Outcome == OutcomeGuarding {
		text += "; the reload guard watches it until " + lr.GuardEnds
	}
	return text
}

// filesText is the files' line.
func filesText(f *FilesStatus) string {
	switch f.State {
	case FilesInSync:
		return "as Envoy serves them (taken " + f.ServedSince + ")"
	case FilesDiffer:
		var differ []string
		for _, fs := range []FileStatus{f.Config, f.Bootstrap} {
			if fs.Differs {
				differ = append(differ, fs.Path)
			}
		}
		return fmt.Sprintf("%s NOT what Envoy serves: %s", strings.Join(differ, " and "), f.Reason)
	}
	return "unknown: " + f.Reason
}

func secs(s float64) string {
	return time.Duration(s * float64(time.Second)).Round(100 * time.Millisecond).String()
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// firstLine is the first line of s, for one-line error messages.
func firstLine(s string) string {
	first, _, _ := strings.Cut(s, "\n")
	return first
}

// HotRestartOffNote is how the agent says it, in STATUS=, the log and the
// reload's answer.
const HotRestartOffNote = "hot restart is compiled out of this Envoy: reload drains and restarts (connections are closed)"

//go:build linux

package control

import (
	"strings"
	"testing"
)

// TestFormatStatusEscapesControlCharacters: what a status shows from files
// and from Envoy (a certificate's subject and DNS names, a refused
// renewal's reason, a failed reload's reason, the previous run's end)
// reached the operator's terminal raw: a forged window title, a line
// erased and a forged one. Every control character is escaped now, and no
// field adds a line.
func TestFormatStatusEscapesControlCharacters(t *testing.T) {
	const hostile = "x\x1b]0;forged title\x07\r\x1b[2K\x1b[32mOK\x1b[0m\n\x1b[1A  forged line"
	clean := StatusReport{State: "live", Agent: AgentStatus{Config: "/etc/envoy-agent/config.toml"},
		LastReload:   &ReloadStatus{At: "now", Error: "envoy rejects it"},
		Certificates: []CertificateStatus{{File: "/c.pem", Subject: "CN=a", DNSNames: []string{"a"}, Error: "e"}}}
	forged := clean
	forged.Agent.Config = "/etc/envoy-agent/" + hostile
	forged.Agent.PreviousExit = &PreviousExit{At: "then", Reason: hostile}
	forged.LastReload = &ReloadStatus{At: "now", Error: hostile}
	forged.Certificates = []CertificateStatus{{File: "/" + hostile, Subject: hostile, DNSNames: []string{hostile}, Error: hostile}}
	out := FormatStatus(forged)
	if strings.ContainsAny(out, "\x1b\x07\r") {
		t.Fatalf("FormatStatus wrote control characters:\n%q", out)
	}
	clean.Agent.PreviousExit = &PreviousExit{At: "then", Reason: "x"}
	if got, want := strings.Count(out, "\n"), strings.Count(FormatStatus(clean), "\n"); got != want {
		t.Fatalf("FormatStatus wrote %d lines, %d without the forged fields:\n%s", got, want, out)
	}
	if !strings.Contains(out, `\x1b]0;forged title\x07`) {
		t.Fatalf("the forged title is not shown escaped:\n%s", out)
	}
	t.Logf("\n%s", out)
}

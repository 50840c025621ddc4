//go:build linux

package systemd

import (
	"bytes"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
)

func TestPriorityFormatter(t *testing.T) {
	tests := []struct {
		level  logrus.Level
		format string
		want   string
	}{
		{logrus.ErrorLevel, "text", "<3>level=error"},
		{logrus.WarnLevel, "text", "<4>level=warning"},
		{logrus.InfoLevel, "text", "<6>level=info"},
		{logrus.DebugLevel, "text", "<7>level=debug"},
		{logrus.ErrorLevel, "json", `<3>{"level":"error"`},
	}
	for _, tt := range tests {
		var buf bytes.Buffer
		log := logrus.New()
		log.SetOutput(&buf)
		log.SetLevel(logrus.DebugLevel)
		var inner logrus.Formatter = &logrus.TextFormatter{DisableTimestamp: true, DisableColors: true}
		if tt.format == "json" {
			inner = &logrus.JSONFormatter{DisableTimestamp: true}
		}
		log.SetFormatter(priorityFormatter{inner})
		log.Log(tt.level, "the reason")
		if !strings.HasPrefix(buf.String(), tt.want) || strings.Count(buf.String(), "\n") != 1 {
			t.Errorf("%s %s: %q, want it to start with %q", tt.format, tt.level, buf.String(), tt.want)
		}
	}
}

func TestPrioritiesOnlyOnTheJournal(t *testing.T) {
	// A buffer is never the journal: the text stays as it would be read by hand.
	var buf bytes.Buffer
	log := NewLogger(&buf, "info", "text")
	log.Warn("careful")
	if strings.HasPrefix(buf.String(), "<") || !strings.Contains(buf.String(), "level=warning") {
		t.Errorf("off the journal: %q", buf.String())
	}
	if EnvoyOutputFor(&buf) != &buf {
		t.Error("Envoy's output is wrapped though it does not go to the journal")
	}
	if got := ErrorLines(&buf, "a\nb\n"); got != "a\nb\n" {
		t.Errorf("ErrorLines off the journal = %q", got)
	}
}

func TestEnvoyOutputPriorities(t *testing.T) {
	tests := []struct{ line, want string }{
		{"[2026-12-03 09:09:55.560][1][warning][main] [x.cc:1] no limit\n", "<4>["},
		{"[2026-12-03 09:09:55.560][1][critical][main] [x.cc:1] cannot bind\n", "<2>["},
		{"[2026-12-03 09:09:55.560][1][error][upstream] [x.cc:1] x\n", "<3>["},
		{"[2026-12-03 09:09:55.560][1][info][main] [x.cc:1] x\n", "<6>["},
		{"[2026-12-03 09:09:55.560][1][trace][main] [x.cc:1] x\n", "<7>["},
		{"  static_resources {\n", "<6>  static"},
	}
	for _, tt := range tests {
		var buf bytes.Buffer
		n, err := envoyOutput{w: &buf}.Write([]byte(tt.line))
		if err != nil || n != len(tt.line) {
			t.Fatalf("Write = %d, %v", n, err)
		}
		if !strings.HasPrefix(buf.String(), tt.want) || !strings.HasSuffix(buf.String(), tt.line) {
			t.Errorf("%q relayed as %q, want the prefix %q", tt.line, buf.String(), tt.want)
		}
	}
}

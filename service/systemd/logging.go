//go:build linux

package systemd

import (
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/coreos/go-systemd/v22/journal"
	"github.com/sirupsen/logrus"

	"github.com/envoy-agent/envoy-agent/envoy/output"
)

// Journal priorities (syslog's, sd-daemon(3)): journald reads a line's priority from a "<N>"
// prefix on a service's standard error (SyslogLevelPrefix=, on by default) and strips it.
const (
	prioCrit    = 2
	prioErr     = 3
	prioWarning = 4
	prioInfo    = 6
	prioDebug   = 7
)

// onJournal reports whether w is the agent's standard error and that is a journal stream
// (systemd set JOURNAL_STREAM to it): only then do lines carry a "<N>" prefix, so that output
// read by hand stays plain.
func onJournal(w io.Writer) bool {
	if b, ok := w.(BestEffortWriter); ok {
		w = b.W // the agent's stderr, written best-effort (sigpipe.go)
	}
	if f, ok := w.(*os.File); !ok || f != os.Stderr {
		return false
	}
	is, _ := journal.StderrIsJournalStream()
	return is
}

// NewLogger builds the agent's logger: text or JSON on w. On the journal, lines carry no
// timestamp (journald stamps each line itself) and start with their level's priority.
func NewLogger(w io.Writer, level, format string) *logrus.Logger {
	log := logrus.New()
	log.SetOutput(w)
	if lvl, err := logrus.ParseLevel(level); err == nil {
		log.SetLevel(lvl)
	}
	journaled := onJournal(w)
	var f logrus.Formatter
	if format == "json" {
		f = &logrus.JSONFormatter{}
	} else {
		f = &logrus.TextFormatter{DisableTimestamp: journaled, FullTimestamp: true, DisableColors: true}
	}
	if journaled {
		f = priorityFormatter{f}
	}
	log.SetFormatter(f)
	return log
}

// priorityFormatter puts the journal priority of an entry's level before what inner formats.
type priorityFormatter struct{ inner logrus.Formatter }

func (p priorityFormatter) Format(e *logrus.Entry) ([]byte, error) {
	b, err := p.inner.Format(e)
	if err != nil {
		return nil, err
	}
	return append([]byte("<"+strconv.Itoa(logrusPriority(e.Level))+">"), b...), nil
}

func logrusPriority(l logrus.Level) int {
	switch l {
	case logrus.PanicLevel, logrus.FatalLevel:
		return prioCrit
	case logrus.ErrorLevel:
		return prioErr
	case logrus.WarnLevel:
		return prioWarning
	case logrus.InfoLevel:
		return prioInfo
	default:
		return prioDebug
	}
}

// envoyPriority maps a level of Envoy's log to a journal priority; lines without a level (the
// rest of a multi-line message, a configuration dump) are info.
func envoyPriority(level string) int {
	switch level {
	case "critical":
		return prioCrit
	case "error":
		return prioErr
	case "warning":
		return prioWarning
	case "trace", "debug":
		return prioDebug
	default:
		return prioInfo
	}
}

// envoyOutput relays Envoy's output to the agent's standard error. envoy/output writes it
// one whole line per Write; on the journal each line gets the priority of Envoy's level.
type envoyOutput struct {
	w io.Writer
}

// EnvoyOutputFor is what Envoy's output is relayed through to w.
func EnvoyOutputFor(w io.Writer) io.Writer {
	if !onJournal(w) {
		return w
	}
	return envoyOutput{w: w}
}

func (o envoyOutput) Write(line []byte) (int, error) {
	prefix := "<" + strconv.Itoa(envoyPriority(output.LogLevel(line))) + ">"
	if _, err := o.w.Write(append([]byte(prefix), line...)); err != nil {
		return 0, err
	}
	return len(line), nil
}

// ErrorLines marks every line of text as an error for journald ("<3>") when w is the agent's
// standard error and that is the journal (the unit's ExecStartPre= and ExecReload= commands);
// otherwise it returns text as it is.
func ErrorLines(w io.Writer, text string) string {
	if !onJournal(w) {
		return text
	}
	lines := strings.SplitAfter(text, "\n")
	var b strings.Builder
	for _, l := range lines {
		if l == "" {
			continue
		}
		b.WriteString("<" + strconv.Itoa(prioErr) + ">")
		b.WriteString(l)
	}
	return b.String()
}

package service

import (
	"io"

	"github.com/coreos/go-systemd/v22/journal"
	"github.com/sirupsen/logrus"
)

// newLogger builds the agent's logger: text or JSON on w, without
// timestamps when w is the journal (journald stamps each line itself).
func newLogger(w io.Writer, level, format string) *logrus.Logger {
	log := logrus.New()
	log.SetOutput(w)
	if lvl, err := logrus.ParseLevel(level); err == nil {
		log.SetLevel(lvl)
	}
	onJournal, _ := journal.StderrIsJournalStream()
	if format == "json" {
		log.SetFormatter(&logrus.JSONFormatter{})
	} else {
		log.SetFormatter(&logrus.TextFormatter{DisableTimestamp: onJournal, FullTimestamp: true, DisableColors: true})
	}
	return log
}

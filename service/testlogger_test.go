//go:build linux

package service

import (
	"io"

	"github.com/sirupsen/logrus"
)

// testLogger is a logger whose output goes nowhere.
func testLogger() *logrus.Logger {
	l := logrus.New()
	l.SetOutput(io.Discard)
	return l
}

//go:build linux

package main

import (
	"runtime"
	"testing"
)

func TestOneProcessorUnlessTheOperatorSetsGOMAXPROCS(t *testing.T) {
	before := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { runtime.GOMAXPROCS(before) })
	tests := []struct {
		name, env string
		start     int
		want      int
	}{
		{"unset: one processor", "", 4, 1},
		{"set by the operator: kept", "3", 3, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("GOMAXPROCS", tt.env)
			runtime.GOMAXPROCS(tt.start)
			oneProcessor()
			if got := runtime.GOMAXPROCS(0); got != tt.want {
				t.Fatalf("GOMAXPROCS=%q: %d processors after oneProcessor, want %d", tt.env, got, tt.want)
			}
		})
	}
}

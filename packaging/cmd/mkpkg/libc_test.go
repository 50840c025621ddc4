package main

import (
	"os"
	"path/filepath"
	"testing"
)

func TestGlibcVersionOfAScript(t *testing.T) {
	p := filepath.Join(t.TempDir(), "envoy-agent")
	if err := os.WriteFile(p, []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if v, err := glibcVersion(p); err != nil || v != "2.0" {
		t.Fatalf("glibcVersion(a script) = %q, %v; want 2.0, nil", v, err)
	}
}

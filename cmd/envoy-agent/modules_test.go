//go:build linux

package main

import (
	"flag"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

var updateModules = flag.Bool("update-modules", false, "rewrite modules.txt, the modules the agent binary links")

// TestLinkedModules pins the modules the agent binary links, as Tailscale's depaware does: a
// new dependency of the shipped binary is a decision, and tooling (nfpm, gonum/plot, vegeta)
// never leaks into it.
func TestLinkedModules(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{with .Module}}{{.Path}}{{end}}", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	var mods []string
	for m := range strings.FieldsSeq(string(out)) {
		if !slices.Contains(mods, m) {
			mods = append(mods, m)
		}
	}
	slices.Sort(mods)
	got := strings.Join(mods, "\n") + "\n"
	if *updateModules {
		if err := os.WriteFile("modules.txt", []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile("modules.txt")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range mods {
		if !slices.Contains(strings.Fields(string(want)), m) {
			t.Errorf("the agent binary now links module %s: if that is meant, run go test ./cmd/envoy-agent -run TestLinkedModules -update-modules and commit modules.txt", m)
		}
	}
	for w := range strings.FieldsSeq(string(want)) {
		if !slices.Contains(mods, w) {
			t.Errorf("the agent binary no longer links module %s: run go test ./cmd/envoy-agent -run TestLinkedModules -update-modules and commit modules.txt", w)
		}
	}
}

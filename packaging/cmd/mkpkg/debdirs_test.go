package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
)

// TestDebOwnsNoUnitDirectory builds the package from packaging/nfpm.yaml (a script stands in for
// the agent binary: mkpkg reads no more than its first bytes) and reads its data archive back:
// the units are there, /usr/lib/systemd and /usr/lib/systemd/system are not entries of their
// own (so dpkg never counts the package as their owner), and every file is still listed.
func TestDebOwnsNoUnitDirectory(t *testing.T) {
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	stage := t.TempDir()
	for _, f := range []string{"config.toml", "envoy.yaml", "man/envoy-agent.8.gz", "man/envoy-agent.toml.5.gz"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(stage, f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(stage, f), []byte("x\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(stage, "envoy-agent")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	t.Chdir(root)
	t.Setenv("PKG_STAGE", stage)
	if err := run([]string{"-config", "packaging/nfpm.yaml", "-formats", "deb", "-arch", "amd64", "-version", "1.2.3",
		"-date", "2026-12-03", "-binary", bin, "-out", out}); err != nil {
		t.Fatal(err)
	}
	debs, _ := filepath.Glob(filepath.Join(out, "*.deb"))
	if len(debs) != 1 {
		t.Fatalf("packages: %v", debs)
	}
	if _, err := exec.LookPath("dpkg-deb"); err != nil {
		t.Skip("no dpkg-deb to read the package back")
	}
	data, err := exec.Command("dpkg-deb", "--fsys-tarfile", debs[0]).Output()
	if err != nil {
		t.Fatalf("dpkg-deb --fsys-tarfile: %v", err)
	}
	var names []string
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
	}
	for _, want := range []string{"./usr/lib/systemd/system/envoy-agent.service", "./usr/lib/systemd/system/envoy-agent@.service",
		"./usr/bin/envoy-agent", "./etc/envoy-agent/config.toml", "./usr/lib/"} {
		if !slices.Contains(names, want) {
			t.Errorf("the package has no %s: %v", want, names)
		}
	}
	for _, bad := range []string{"./usr/lib/systemd/", "./usr/lib/systemd/system/", "./lib/"} {
		if slices.Contains(names, bad) {
			t.Errorf("the package owns %s", bad)
		}
	}
}

func TestFilterTarGz(t *testing.T) {
	var in bytes.Buffer
	zw := gzip.NewWriter(&in)
	tw := tar.NewWriter(zw)
	for _, h := range []*tar.Header{
		{Name: "./usr/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "./usr/lib/systemd/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "./usr/lib/systemd/system/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "./usr/lib/systemd/system/a.service", Typeflag: tar.TypeReg, Mode: 0o644, Size: 3},
	} {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			tw.Write([]byte("abc"))
		}
	}
	tw.Close()
	zw.Close()
	got, err := filterTarGz(in.Bytes(), unownedDebDirs)
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(got))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(tr)
		if h.Typeflag == tar.TypeReg && string(body) != "abc" {
			t.Errorf("%s: body %q", h.Name, body)
		}
		names = append(names, h.Name)
	}
	if want := []string{"./usr/", "./usr/lib/systemd/system/a.service"}; !slices.Equal(names, want) {
		t.Errorf("entries %v, want %v", names, want)
	}
}

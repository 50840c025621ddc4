package main

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeELF writes a minimal 64-bit ELF executable for machine to a temporary file: a header and,
// when interp is not empty, a PT_INTERP program header naming it. It has no sections, so no
// dynamic section and no symbol versions: what a pure Go binary's loader-facing parts reduce to.
func writeELF(t *testing.T, machine elf.Machine, interp string) string {
	t.Helper()
	const ehsize, phsize = 64, 56
	var phnum uint16
	if interp != "" {
		phnum = 1
	}
	h := elf.Header64{
		Type: uint16(elf.ET_DYN), Machine: uint16(machine), Version: uint32(elf.EV_CURRENT),
		Phoff: ehsize, Ehsize: ehsize, Phentsize: phsize, Phnum: phnum,
	}
	copy(h.Ident[:], elf.ELFMAG)
	h.Ident[elf.EI_CLASS] = byte(elf.ELFCLASS64)
	h.Ident[elf.EI_DATA] = byte(elf.ELFDATA2LSB)
	h.Ident[elf.EI_VERSION] = byte(elf.EV_CURRENT)
	var b bytes.Buffer
	if err := binary.Write(&b, binary.LittleEndian, h); err != nil {
		t.Fatal(err)
	}
	if interp != "" {
		s := interp + "\x00"
		p := elf.Prog64{Type: uint32(elf.PT_INTERP), Flags: uint32(elf.PF_R), Off: ehsize + phsize,
			Filesz: uint64(len(s)), Memsz: uint64(len(s)), Align: 1}
		if err := binary.Write(&b, binary.LittleEndian, p); err != nil {
			t.Fatal(err)
		}
		b.WriteString(s)
	}
	path := filepath.Join(t.TempDir(), "envoy-agent")
	if err := os.WriteFile(path, b.Bytes(), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestReadLibcNeed(t *testing.T) {
	script := filepath.Join(t.TempDir(), "envoy-agent")
	if err := os.WriteFile(script, []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	short := filepath.Join(t.TempDir(), "envoy-agent")
	if err := os.WriteFile(short, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name           string
		path, goarch   string
		want           libcNeed
		deb, rpm       string
		wantErrContain string
	}{
		{name: "script", path: script, goarch: "amd64", want: libcNeed{}},
		{name: "script shorter than an ELF header", path: short, goarch: "amd64", want: libcNeed{}},
		{name: "static, no interpreter", path: writeELF(t, elf.EM_X86_64, ""), goarch: "amd64", want: libcNeed{}},
		{
			name: "pure Go PIE: glibc's loader only", path: writeELF(t, elf.EM_X86_64, "/lib64/ld-linux-x86-64.so.2"),
			goarch: "amd64", want: libcNeed{Needed: true, Interp: "/lib64/ld-linux-x86-64.so.2"}, deb: "libc6", rpm: "glibc",
		},
		{
			name: "arm64 PIE", path: writeELF(t, elf.EM_AARCH64, "/lib/ld-linux-aarch64.so.1"),
			goarch: "arm64", want: libcNeed{Needed: true, Interp: "/lib/ld-linux-aarch64.so.1"}, deb: "libc6", rpm: "glibc",
		},
		{
			name: "amd64 binary packaged as arm64", path: writeELF(t, elf.EM_X86_64, "/lib64/ld-linux-x86-64.so.2"),
			goarch: "arm64", wantErrContain: "not one for arm64",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := readLibcNeed(tt.path, tt.goarch)
			if tt.wantErrContain != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErrContain) {
					t.Fatalf("readLibcNeed = %+v, %v; want an error containing %q", got, err, tt.wantErrContain)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("readLibcNeed = %+v, %v; want %+v", got, err, tt.want)
			}
			if d := got.dependency("deb"); d != tt.deb {
				t.Errorf("deb dependency %q, want %q", d, tt.deb)
			}
			if d := got.dependency("rpm"); d != tt.rpm {
				t.Errorf("rpm dependency %q, want %q", d, tt.rpm)
			}
		})
	}
}

// TestReadLibcNeedOfAGlibcProgram: a C program of the host (linked against glibc) needs a
// versioned glibc, as dpkg-shlibdeps would say.
func TestReadLibcNeedOfAGlibcProgram(t *testing.T) {
	const prog = "/bin/true"
	f, err := elf.Open(prog)
	if err != nil {
		t.Skipf("%s is not an ELF binary here: %v", prog, err)
	}
	f.Close()
	goarch := map[elf.Machine]string{elf.EM_X86_64: "amd64", elf.EM_AARCH64: "arm64"}[f.Machine]
	got, err := readLibcNeed(prog, goarch)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Needed || !strings.HasPrefix(got.Version, "2.") || got.Interp == "" {
		t.Fatalf("readLibcNeed(%s) = %+v; want a glibc 2.x version and an interpreter", prog, got)
	}
	if d := got.dependency("deb"); d != "libc6 (>= "+got.Version+")" {
		t.Errorf("deb dependency %q", d)
	}
	if d := got.dependency("rpm"); d != "glibc >= "+got.Version {
		t.Errorf("rpm dependency %q", d)
	}
}

func TestCompareDotted(t *testing.T) {
	if compareDotted([]int{2, 34}, []int{2, 4}) <= 0 || compareDotted([]int{2, 3, 4}, []int{2, 3}) <= 0 ||
		compareDotted([]int{2, 28}, []int{2, 28, 0}) != 0 {
		t.Error("compareDotted does not order versions numerically")
	}
}

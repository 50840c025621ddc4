package main

import (
	"debug/elf"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// libcNeed is what an ELF binary needs from the C library, read from the binary itself: what
// dpkg-shlibdeps and rpm's elfdeps would derive.
type libcNeed struct {
	// Needed is false when the binary needs no C library at all: a script, or a static ELF
	// with neither a program interpreter nor DT_NEEDED entries.
	Needed bool
	// Version is the oldest glibc that provides every GLIBC_x.y symbol version the binary
	// needs, or "" when it needs none (a pure Go PIE, which glibc's dynamic loader relocates but
	// which calls nothing in libc: any glibc runs it).
	Version string
	// Interp is the binary's program interpreter (PT_INTERP), "" when it has none.
	Interp string
}

// dependency is the package relation on the C library for format (deb or rpm): libc6 or
// glibc, versioned when the binary needs symbol versions; "" when it needs no C library.
func (n libcNeed) dependency(format string) string {
	if !n.Needed {
		return ""
	}
	switch {
	case format == "deb" && n.Version != "":
		return "libc6 (>= " + n.Version + ")"
	case format == "deb":
		return "libc6"
	case n.Version != "":
		return "glibc >= " + n.Version
	default:
		return "glibc"
	}
}

// String says what the binary needs, for mkpkg's output.
func (n libcNeed) String() string {
	switch {
	case !n.Needed:
		return "no C library"
	case n.Version == "":
		return "glibc's dynamic loader " + n.Interp + " only (no libc symbol)"
	default:
		return "glibc >= " + n.Version
	}
}

// elfMachines maps GOARCH names to the ELF machine of their binaries.
var elfMachines = map[string]elf.Machine{
	"amd64": elf.EM_X86_64,
	"arm64": elf.EM_AARCH64,
}

// readLibcNeed reads what the binary at path needs from the C library (see libcNeed), and checks
// that it is an ELF binary for goarch. A file that is not ELF (a script) needs nothing.
func readLibcNeed(path, goarch string) (libcNeed, error) {
	fd, err := os.Open(path)
	if err != nil {
		return libcNeed{}, err
	}
	magic := make([]byte, len(elf.ELFMAG))
	_, _ = io.ReadFull(fd, magic) // a shorter file is no ELF file
	fd.Close()
	if string(magic) != elf.ELFMAG {
		// A script (the e2e's broken stand-in agent): it needs no particular C library.
		return libcNeed{}, nil
	}
	f, err := elf.Open(path)
	if err != nil {
		return libcNeed{}, err
	}
	defer f.Close()
	if want, ok := elfMachines[goarch]; ok && f.Machine != want {
		return libcNeed{}, fmt.Errorf("%s is a %s binary, not one for %s", path, f.Machine, goarch)
	}
	var n libcNeed
	for _, p := range f.Progs {
		if p.Type != elf.PT_INTERP {
			continue
		}
		b := make([]byte, p.Filesz)
		if _, err := p.ReadAt(b, 0); err != nil {
			return libcNeed{}, fmt.Errorf("%s: reading its program interpreter: %w", path, err)
		}
		n.Interp = strings.TrimRight(string(b), "\x00")
	}
	libs, err := f.ImportedLibraries()
	if err != nil {
		return libcNeed{}, fmt.Errorf("%s: reading its DT_NEEDED entries: %w", path, err)
	}
	n.Needed = n.Interp != "" || len(libs) > 0
	var needs []elf.DynamicVersionNeed
	if f.SectionByType(elf.SHT_GNU_VERNEED) != nil {
		if needs, err = f.DynamicVersionNeeds(); err != nil {
			return libcNeed{}, fmt.Errorf("%s: reading its symbol versions: %w", path, err)
		}
	}
	var best []int
	for _, need := range needs {
		for _, d := range need.Needs {
			v, ok := strings.CutPrefix(d.Dep, "GLIBC_")
			if !ok {
				continue
			}
			nums, err := parseDotted(v)
			if err != nil {
				continue // GLIBC_PRIVATE and the like
			}
			if best == nil || compareDotted(nums, best) > 0 {
				best = nums
			}
		}
	}
	if best != nil {
		parts := make([]string, len(best))
		for i, x := range best {
			parts[i] = strconv.Itoa(x)
		}
		n.Version = strings.Join(parts, ".")
	}
	return n, nil
}

func parseDotted(s string) ([]int, error) {
	var out []int
	for _, p := range strings.Split(s, ".") {
		n, err := strconv.Atoi(p)
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, nil
}

func compareDotted(a, b []int) int {
	for i := 0; i < len(a) || i < len(b); i++ {
		var x, y int
		if i < len(a) {
			x = a[i]
		}
		if i < len(b) {
			y = b[i]
		}
		if x != y {
			return x - y
		}
	}
	return 0
}

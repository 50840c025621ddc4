package main

import (
	"debug/elf"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// glibcVersion is the oldest glibc that provides every GLIBC_x.y symbol version the ELF binary at
// path needs: what dpkg-shlibdeps would put in a libc6 dependency.
func glibcVersion(path string) (string, error) {
	f, err := elf.Open(path)
	var notELF *elf.FormatError
	if errors.As(err, &notELF) {
		// A script (the e2e's broken stand-in agent): it needs no particular glibc.
		return "2.0", nil
	}
	if err != nil {
		return "", err
	}
	defer f.Close()
	needs, err := f.DynamicVersionNeeds()
	if err != nil {
		return "", fmt.Errorf("%s: reading its symbol versions: %w", path, err)
	}
	best := []int{2, 0}
	found := false
	for _, n := range needs {
		for _, d := range n.Needs {
			v, ok := strings.CutPrefix(d.Dep, "GLIBC_")
			if !ok {
				continue
			}
			nums, err := parseDotted(v)
			if err != nil {
				continue // GLIBC_PRIVATE and the like
			}
			found = true
			if compareDotted(nums, best) > 0 {
				best = nums
			}
		}
	}
	if !found {
		return "", fmt.Errorf("%s needs no GLIBC_ symbol version: is it linked against glibc?", path)
	}
	parts := make([]string, len(best))
	for i, n := range best {
		parts[i] = strconv.Itoa(n)
	}
	return strings.Join(parts, "."), nil
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

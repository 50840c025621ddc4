// Command mkpkg builds the envoy-agent .deb and .rpm packages with nfpm, used as a library so that
// packaging needs nothing beyond the module's own dependencies (no tool download at build time).
//
// It reads an nfpm configuration (packaging/nfpm.yaml), in which ${VERSION}, ${ARCH} and ${BINARY}
// come from its flags and every other ${VAR} comes from the environment. The dependency on the C
// library is read from the binary and added to both packages (see libcNeed): libc6/glibc with the
// oldest version that has every GLIBC_ symbol version it needs, unversioned when it needs only
// glibc's dynamic loader (a pure Go PIE), none when it needs no C library. The binary must be an
// ELF binary for -arch (or a script). The packages' changelog is CHANGELOG.md,
// converted for this version (see changelog.go). It writes one package per format into the output directory
// under the format's conventional file name:
//
//	go run ./packaging/cmd/mkpkg -version "$(git describe --tags --always --dirty)" \
//	    -binary bin/envoy-agent -changelog CHANGELOG.md -date 2026-12-03 -out dist
//
// Paths in the configuration are relative to the working directory (the repository root).
//
// The version is normalized for dpkg and rpm, which need it to start with a digit and to sort the
// way releases do: "v1.2.3" becomes 1.2.3, "v1.2.3-4-gabc123-dirty" (git describe after a tag)
// becomes 1.2.3+4.gabc123.dirty, and a bare commit "abc123" or "g0123456" becomes
// 0.0.0+git.abc123 or 0.0.0+git.0123456.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"time"

	"github.com/goreleaser/nfpm/v2"
	_ "github.com/goreleaser/nfpm/v2/deb" // registers the "deb" packager
	"github.com/goreleaser/nfpm/v2/files"
	_ "github.com/goreleaser/nfpm/v2/rpm" // registers the "rpm" packager
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "mkpkg:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("mkpkg", flag.ContinueOnError)
	config := fs.String("config", "packaging/nfpm.yaml", "nfpm configuration file")
	out := fs.String("out", "dist", "directory the packages are written to")
	version := fs.String("version", os.Getenv("VERSION"), "package version (git describe output is accepted)")
	binary := fs.String("binary", "bin/envoy-agent", "the envoy-agent binary to package")
	arch := fs.String("arch", defaultArch(), "target architecture, in GOARCH terms")
	formats := fs.String("formats", "deb,rpm", "comma-separated package formats")
	changelog := fs.String("changelog", "CHANGELOG.md", "the changelog the packages carry (Markdown, see changelog.go)")
	date := fs.String("date", "", "YYYY-MM-DD of a development build's changelog entry (default: today)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	pkgVersion, err := normalizeVersion(*version)
	if err != nil {
		return err
	}
	buildDate := time.Now().UTC()
	if *date != "" {
		if buildDate, err = time.Parse(time.DateOnly, *date); err != nil {
			return fmt.Errorf("-date: %w", err)
		}
	}
	libc, err := readLibcNeed(*binary, *arch)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "mkpkg: %s (%s) needs %s\n", *binary, *arch, libc)
	stage, err := os.MkdirTemp("", "mkpkg-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(stage)
	chglogPath := filepath.Join(stage, "changelog.yml")
	vars := map[string]string{"VERSION": pkgVersion, "ARCH": *arch, "BINARY": *binary}
	cfg, err := nfpm.ParseFileWithEnvMapping(*config, func(name string) string {
		if v, ok := vars[name]; ok {
			return v
		}
		return os.Getenv(name)
	})
	if err != nil {
		return fmt.Errorf("reading %s: %w", *config, err)
	}
	debChangelog := filepath.Join(stage, "changelog.Debian.gz")
	if err := writeChangelog(*changelog, chglogPath, debChangelog, cfg.Name, pkgVersion, cfg.Release, cfg.Maintainer, buildDate); err != nil {
		return fmt.Errorf("changelog: %w", err)
	}
	cfg.Changelog = chglogPath
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return fmt.Errorf("creating output directory: %w", err)
	}
	for _, format := range strings.Split(*formats, ",") {
		path, err := build(&cfg, strings.TrimSpace(format), *out, debChangelog, libc)
		if err != nil {
			return fmt.Errorf("building the %s package: %w", format, err)
		}
		fmt.Println(path)
	}
	return nil
}

// build writes the package of one format into dir and returns its path. The .deb gets
// debChangelog, mkpkg's own rendering of the changelog (see debianChangelog), instead of nfpm's;
// both get the dependency on the C library that libc says the binary needs.
func build(cfg *nfpm.Config, format, dir, debChangelog string, libc libcNeed) (string, error) {
	info, err := cfg.Get(format)
	if err != nil {
		return "", fmt.Errorf("merging the %s overrides: %w", format, err)
	}
	if dep := libc.dependency(format); dep != "" {
		info.Depends = append([]string{dep}, info.Depends...)
	}
	if format == "deb" {
		info.Changelog = ""
		info.Contents = append(info.Contents, &files.Content{
			Source:      debChangelog,
			Destination: "/usr/share/doc/" + info.Name + "/changelog.Debian.gz",
			FileInfo:    &files.ContentFileInfo{Mode: 0o644},
		})
	}
	info = nfpm.WithDefaults(info)
	if err := nfpm.PrepareForPackager(info, format); err != nil {
		return "", fmt.Errorf("checking the configuration: %w", err)
	}
	pkg, err := nfpm.Get(format)
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, pkg.ConventionalFileName(info))
	info.Target = path
	if err := write(path, func(f *os.File) error { return pkg.Package(info, f) }); err != nil {
		return "", err
	}
	if format == "deb" {
		if err := dropDebDirs(path); err != nil {
			_ = os.Remove(path)
			return "", err
		}
	}
	return path, nil
}

// write creates path with fill, leaving no partial file behind on failure.
func write(path string, fill func(*os.File) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	err = fill(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(path)
	}
	return err
}

var (
	// describeRe matches `git describe --tags` output some commits after a tag: TAG-N-gHASH.
	describeRe = regexp.MustCompile(`^(.+)-([0-9]+)-g([0-9a-f]+)$`)
	// commitRe matches `git describe --always` output when there is no tag: an abbreviated
	// commit hash (with at least one letter, so that a numeric tag is not taken for one).
	commitRe = regexp.MustCompile(`^[0-9a-f]*[a-f][0-9a-f]*$`)
	// gCommitRe matches the Makefile's VERSION when there is no tag: g and an abbreviated
	// commit hash, which may have no letter of its own.
	gCommitRe = regexp.MustCompile(`^g([0-9a-f]{7,})$`)
	// versionRe is what dpkg and rpm both accept.
	versionRe = regexp.MustCompile(`^[0-9][0-9A-Za-z.+~-]*$`)
)

// normalizeVersion turns a git-describe style version into one dpkg and rpm accept and order
// correctly (see the package documentation).
func normalizeVersion(v string) (string, error) {
	v = strings.TrimPrefix(strings.TrimSpace(v), "v")
	if v == "" {
		return "", errors.New("no version: pass -version or set VERSION")
	}
	base, dirty := strings.CutSuffix(v, "-dirty")
	var meta []string
	if m := describeRe.FindStringSubmatch(base); m != nil {
		base, meta = strings.TrimPrefix(m[1], "v"), []string{m[2], "g" + m[3]}
	} else if m := gCommitRe.FindStringSubmatch(base); m != nil {
		base, meta = "0.0.0", []string{"git", m[1]}
	} else if len(base) >= 7 && commitRe.MatchString(base) {
		base, meta = "0.0.0", []string{"git", base}
	}
	if dirty {
		meta = append(meta, "dirty")
	}
	if len(meta) > 0 {
		base += "+" + strings.Join(meta, ".")
	}
	if !versionRe.MatchString(base) {
		return "", fmt.Errorf("version %q: a package version must start with a digit", v)
	}
	return base, nil
}

// defaultArch is $GOARCH when set (cross builds), else the architecture mkpkg runs on.
func defaultArch() string {
	if a := os.Getenv("GOARCH"); a != "" {
		return a
	}
	return runtime.GOARCH
}

package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/blakesmith/ar"
)

// unownedDebDirs are directories the .deb puts files in but must not own. nfpm writes an entry
// for every parent directory of a file, and dpkg then records the package as an owner of each.
// /usr/lib/systemd/system (and /usr/lib/systemd) belong to systemd on Debian 12 and 13, but to no
// package on Debian 11, whose packages own the /lib/systemd/system alias instead: a .deb that
// owns them alone there makes dpkg try to remove them on purge ("directory
// '/usr/lib/systemd/system' not empty so not removed"). Without the entries dpkg records only
// the units; the preinstall script creates the directory on a split-/usr system that lacks it.
var unownedDebDirs = map[string]bool{"./usr/lib/systemd/": true, "./usr/lib/systemd/system/": true}

// dropDebDirs rewrites the .deb at path without the directory entries in unownedDebDirs in its
// data.tar.gz; the other members (debian-binary, control.tar.gz) are copied unchanged (the
// md5sums list files only, never directories).
func dropDebDirs(path string) error {
	in, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var out bytes.Buffer
	r := ar.NewReader(bytes.NewReader(in))
	w := ar.NewWriter(&out)
	if err := w.WriteGlobalHeader(); err != nil {
		return err
	}
	for {
		hdr, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("%s: reading the ar archive: %w", path, err)
		}
		body, err := io.ReadAll(r)
		if err != nil {
			return fmt.Errorf("%s: reading %s: %w", path, hdr.Name, err)
		}
		name := strings.TrimSuffix(hdr.Name, "/")
		if strings.HasPrefix(name, "data.tar") {
			if name != "data.tar.gz" {
				return fmt.Errorf("%s: %s: only a gzip data member can be rewritten", path, name)
			}
			if body, err = filterTarGz(body, unownedDebDirs); err != nil {
				return fmt.Errorf("%s: %s: %w", path, name, err)
			}
		}
		hdr.Size = int64(len(body))
		if err := w.WriteHeader(hdr); err != nil {
			return err
		}
		if _, err := w.Write(body); err != nil {
			return err
		}
	}
	return os.WriteFile(path, out.Bytes(), 0o644)
}

// filterTarGz is the gzip-compressed tar archive data without the directory entries named in
// drop.
func filterTarGz(data []byte, drop map[string]bool) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	tr := tar.NewReader(zr)
	var out bytes.Buffer
	zw := gzip.NewWriter(&out)
	tw := tar.NewWriter(zw)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		if hdr.Typeflag == tar.TypeDir && drop[hdr.Name] {
			continue
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

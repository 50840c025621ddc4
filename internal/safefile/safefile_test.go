//go:build linux

package safefile

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestCreatePrivate(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "target")
	tests := []struct {
		name    string
		prepare func(path string) error
		wantErr bool
	}{
		{"a new file", func(string) error { return nil }, false},
		{"a file stands there", func(p string) error { return os.WriteFile(p, []byte("x"), 0o644) }, true},
		{"a link stands there", func(p string) error { return os.Symlink(target, p) }, true},
		{"a dangling link stands there", func(p string) error { return os.Symlink(filepath.Join(dir, "none"), p) }, true},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, "f"+string(rune('0'+i)))
			if err := tt.prepare(path); err != nil {
				t.Fatal(err)
			}
			err := CreatePrivate(path, []byte("secret"))
			if tt.wantErr {
				if err == nil {
					t.Fatal("CreatePrivate wrote over what stood at the path")
				}
				if _, err := os.Stat(target); err == nil {
					t.Fatal("CreatePrivate wrote through a link")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if got, _ := os.ReadFile(path); string(got) != "secret" || fi.Mode().Perm() != 0o600 {
				t.Fatalf("wrote %q with mode %04o, want \"secret\" with 0600", got, fi.Mode().Perm())
			}
		})
	}
}

func TestReadRegular(t *testing.T) {
	dir := t.TempDir()
	small := filepath.Join(dir, "small")
	if err := os.WriteFile(small, []byte("0123456789"), 0o600); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, path string
		limit      int64
		wantErr    string
	}{
		{"a regular file", small, 10, ""},
		{"one larger than the limit", small, 9, "more than 9"},
		{"a FIFO (would hang a plain open)", fifo, 10, "a FIFO"},
		{"a directory", dir, 10, "a directory"},
		{"nothing", filepath.Join(dir, "none"), 10, "no such file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data, err := ReadRegular(tt.path, tt.limit)
			if tt.wantErr == "" {
				if err != nil || string(data) != "0123456789" {
					t.Fatalf("got %q, %v", data, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want one with %q", err, tt.wantErr)
			}
		})
	}
}

// Command genman writes envoy-agent's man pages (service/manual) into a directory, for the
// packages (`make package`):
//
//	go run ./service/manual/cmd/genman -version 1.2.3 -date 2026-12-03 -gzip -out .cache/package/man
//
// With -gzip the pages are compressed as Debian wants them (maximum compression, no name or time
// in the gzip header, so that the same input gives the same bytes).
package main

import (
	"bytes"
	"compress/gzip"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/envoy-agent/envoy-agent/service/manual"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "genman:", err)
		os.Exit(1)
	}
}

func run() error {
	out := flag.String("out", "man", "directory to write the pages to")
	version := flag.String("version", "dev", "envoy-agent's version, shown in the pages' footer")
	date := flag.String("date", "", "the pages' date, YYYY-MM-DD (required)")
	gz := flag.Bool("gzip", false, "write NAME.N.gz instead of NAME.N")
	flag.Parse()
	if *date == "" {
		return fmt.Errorf("-date is required")
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	for _, p := range manual.Pages {
		var buf bytes.Buffer
		if err := p.Write(&buf, *version, *date); err != nil {
			return fmt.Errorf("%s: %w", p.File(), err)
		}
		name, data := p.File(), buf.Bytes()
		if *gz {
			var z bytes.Buffer
			zw, err := gzip.NewWriterLevel(&z, gzip.BestCompression)
			if err != nil {
				return err
			}
			if _, err := zw.Write(data); err != nil {
				return err
			}
			if err := zw.Close(); err != nil {
				return err
			}
			name, data = name+".gz", z.Bytes()
		}
		if err := os.WriteFile(filepath.Join(*out, name), data, 0o644); err != nil {
			return err
		}
		fmt.Println(filepath.Join(*out, name))
	}
	return nil
}

// Command bench measures envoy-agent against a bare Envoy with a real Envoy
// binary: start-up to readiness, config reloads under load, stops under
// load, the agent's own overhead, how the admin calls the agent makes
// grow with the number of listeners, the agent's reload in place
// against its hot restart, and the agent at scale (a thousand
// certificates, a thousand listeners). It prints a markdown table and writes
// results.md, results.json and reload.svg to the output folder.
//
// Run it with `make bench`, or by hand:
//
//	go run ./bench -agent bin/envoy-agent -envoy "$ENVOY_BIN" -out bench-results
//
// All traffic goes to 127.0.0.1. Every request loop is bounded in count and
// in time, and the whole run is bounded by -timeout.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"
)

// options are the command line.
type options struct {
	agentBin       string
	launcherBin    string
	envoyBin       string
	outDir         string
	timeout        time.Duration
	starts         int
	reloads        int
	idle           time.Duration
	workers        int
	rate           float64 // requests per second, all workers together
	keepWorkDir    bool
	scenarioList   string
	scaleListeners int

	// The scale scenario's sizes.
	scaleCerts         int
	scaleCertStarts    int
	scaleHTTPListeners int
	scaleStartRuns     int
	scaleStartsPerRun  int
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	var o options
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.agentBin, "agent", "bin/envoy-agent", "the envoy-agent `binary` to measure")
	fs.StringVar(&o.launcherBin, "launcher", "", "the floor `binary` for the start scenario (bench/launcher, built as the agent is); \"\": no floor row")
	fs.StringVar(&o.envoyBin, "envoy", os.Getenv("ENVOY_BIN"), "the real Envoy `binary` (default $ENVOY_BIN)")
	fs.StringVar(&o.outDir, "out", "bench-results", "where results.md, results.json and reload.svg go")
	fs.DurationVar(&o.timeout, "timeout", 20*time.Minute, "the longest the whole run may take")
	fs.IntVar(&o.starts, "starts", 60, "starts per side in the start scenario (at least 10; a median of 20 moves by ±3 ms between runs on a shared 2-core machine)")
	fs.IntVar(&o.reloads, "reloads", 10, "config changes per side in the reload scenario")
	fs.DurationVar(&o.idle, "idle", 30*time.Second, "the idle period of the overhead scenario")
	fs.IntVar(&o.workers, "workers", 4, "load workers (each keeps its own keep-alive connection)")
	fs.Float64Var(&o.rate, "rate", 300, "load requests per second, all workers together")
	fs.BoolVar(&o.keepWorkDir, "keep", false, "keep the temporary work folder (bootstraps, configs)")
	fs.StringVar(&o.scenarioList, "scenarios", "start,reload,stop,overhead,growth,inplace,scale", "comma-separated scenarios to run")
	fs.IntVar(&o.scaleListeners, "inplace-listeners", 1000, "listeners of the in-place scenario's reloads at scale (0: none)")
	fs.IntVar(&o.scaleCerts, "scale-certs", 1000, "the scale scenario's file-named certificates, one per SNI filter chain (0: none)")
	fs.IntVar(&o.scaleCertStarts, "scale-cert-starts", 3, "starts per side on those certificates, taking turns")
	fs.IntVar(&o.scaleHTTPListeners, "scale-listeners", 1000, "the scale scenario's HTTP listeners, whose first, middle and last route are edited (0: none)")
	fs.IntVar(&o.scaleStartRuns, "scale-start-runs", 5, "the scale scenario's runs of small-bootstrap starts")
	fs.IntVar(&o.scaleStartsPerRun, "scale-starts-per-run", 15, "starts per side in each of those runs, taking turns")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "bench: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if o.starts < 10 {
		fmt.Fprintln(stderr, "bench: -starts must be at least 10")
		return 2
	}
	if o.scaleCertStarts < 1 || o.scaleStartRuns < 1 || o.scaleStartsPerRun < 1 || o.scaleCerts < 0 || o.scaleHTTPListeners < 0 {
		fmt.Fprintln(stderr, "bench: the -scale- counts must be positive (-scale-certs and -scale-listeners may be 0)")
		return 2
	}
	if o.workers < 1 || o.rate <= 0 || o.reloads < 1 || o.scaleListeners < 0 {
		fmt.Fprintln(stderr, "bench: -workers, -rate and -reloads must be positive, -inplace-listeners not negative")
		return 2
	}

	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	ctx, stopSignals := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stopSignals()

	res, err := runAll(ctx, o, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "bench: %v\n", err)
		return 1
	}
	md := renderMarkdown(res)
	fmt.Fprint(stdout, md)
	if err := writeOutputs(o.outDir, res, md); err != nil {
		fmt.Fprintf(stderr, "bench: %v\n", err)
		return 1
	}
	fmt.Fprintf(stderr, "bench: wrote %s, %s and %s\n", filepath.Join(o.outDir, "results.md"),
		filepath.Join(o.outDir, "results.json"), filepath.Join(o.outDir, "reload.svg"))
	if len(res.Errors) > 0 {
		fmt.Fprintf(stderr, "bench: %d scenario(s) failed to run: see the table\n", len(res.Errors))
		return 1
	}
	return 0
}

// writeOutputs writes results.md, results.json and reload.svg to dir.
func writeOutputs(dir string, res *Results, md string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("output folder: %w", err)
	}
	js, err := res.JSON()
	if err != nil {
		return err
	}
	files := map[string][]byte{
		"results.md":   []byte(md),
		"results.json": js,
		"reload.svg":   []byte(renderReloadSVG(res.Reload)),
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return fmt.Errorf("write %s: %w", name, err)
		}
	}
	return nil
}

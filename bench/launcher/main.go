//go:build linux

// Command launcher is the benchmark's floor for a start: the least a Go
// supervisor of Envoy can do. It execs Envoy with the arguments it is given,
// polls Envoy's GET /ready every 2 ms as the agent does, sends READY=1 on
// $NOTIFY_SOCKET when it answers 200, and on SIGTERM stops Envoy and exits.
// It reads no configuration, claims nothing, checks no file and binds no
// port: the start scenario runs it beside the agent and a bare Envoy, so the
// table can tell what any Go supervisor pays (its own exec, Go's start-up,
// a fork) from the agent's own work.
//
//	launcher ADMIN_PORT ENVOY [ARG...]
package main

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"time"
)

// pollEvery is the agent's readyPollMin (service/startup.go).
const pollEvery = 2 * time.Millisecond

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: launcher ADMIN_PORT ENVOY [ARG...]")
		os.Exit(2)
	}
	port, err := strconv.Atoi(os.Args[1])
	if err != nil {
		fmt.Fprintf(os.Stderr, "launcher: admin port %q: %v\n", os.Args[1], err)
		os.Exit(2)
	}
	os.Exit(run(port, os.Args[2], os.Args[3:]))
}

func run(port int, envoy string, args []string) int {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	cmd := exec.Command(envoy, args...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "launcher: %v\n", err)
		return 1
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	client := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil}}
	url := "http://127.0.0.1:" + strconv.Itoa(port) + "/ready"
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	// Poll until Envoy is ready, then tell the notify socket and stop
	// polling; before and after, Envoy's exit ends the run and a signal
	// stops Envoy.
	ready := false
	for {
		if !ready && answersReady(client, url) {
			ready = true
			tick.Stop()
			if err := notifyReady(); err != nil {
				fmt.Fprintf(os.Stderr, "launcher: %v\n", err)
			}
		}
		select {
		case err := <-exited:
			fmt.Fprintf(os.Stderr, "launcher: envoy exited (ready: %t): %v\n", ready, err)
			return 1
		case <-sigs:
			return stop(cmd, exited)
		case <-tick.C:
		}
	}
}

// answersReady reports whether GET url answers 200.
func answersReady(client *http.Client, url string) bool {
	resp, err := client.Get(url)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// stop ends Envoy with SIGTERM and waits for it.
func stop(cmd *exec.Cmd, exited <-chan error) int {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	<-exited
	return 0
}

// notifyReady sends READY=1 to systemd's notify socket, if there is one.
func notifyReady() error {
	path := os.Getenv("NOTIFY_SOCKET")
	if path == "" {
		return nil
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		return fmt.Errorf("notify socket: %w", err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("READY=1")); err != nil {
		return fmt.Errorf("notify socket: %w", err)
	}
	return nil
}

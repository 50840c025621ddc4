// Command flood measures the agent's RSS before and after N idle keep-alive
// connections to one of its ports, each having sent one GET, with the real
// Envoy. Run it inside /work/bin/nsrun or another private network namespace:
// it uses the default ports (admin 15000, status 15020, metrics 15090).
//
//	go run ./bench/flood AGENT_BINARY ENVOY_BINARY N HOLD PORT PATH
//	go run ./bench/flood bin/envoy-agent $ENVOY_BIN 5000 20s 15020 /healthz/ready
package main

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func rss(pid int, field string) string {
	data, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, l := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(l, field+":") {
			return strings.TrimSpace(strings.TrimPrefix(l, field+":"))
		}
	}
	return "?"
}

func countConns(pid int) int {
	fds, _ := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", pid))
	n := 0
	for _, fd := range fds {
		if t, _ := os.Readlink(fd); strings.HasPrefix(t, "socket:") {
			n++
		}
	}
	return n
}

func main() {
	agent, envoyBin := os.Args[1], os.Args[2]
	n, _ := strconv.Atoi(os.Args[3])
	hold, _ := time.ParseDuration(os.Args[4])
	port, path := os.Args[5], os.Args[6]
	_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: 65536, Max: 65536})
	dir, _ := os.MkdirTemp("", "rss")
	defer os.RemoveAll(dir)
	os.WriteFile(filepath.Join(dir, "envoy.yaml"), []byte(`admin:
  address: {socket_address: {address: 127.0.0.1, port_value: 15000}}
static_resources:
  listeners:
  - name: l
    address: {socket_address: {address: 127.0.0.1, port_value: 10000}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: h
          route_config: {virtual_hosts: [{name: v, domains: ["*"], routes: [{match: {prefix: "/"}, direct_response: {status: 200}}]}]}
          http_filters: [{name: envoy.filters.http.router, typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}}]
`), 0o644)
	os.WriteFile(filepath.Join(dir, "config.toml"), []byte(fmt.Sprintf("[envoy]\nbinary_path = %q\nconfig_path = \"envoy.yaml\"\nlog_level = \"warning\"\nconcurrency = 1\n[agent]\nrun_dir = \"run\"\n", envoyBin)), 0o644)
	cmd := exec.Command(agent, "run", "--config", filepath.Join(dir, "config.toml"))
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		panic(err)
	}
	defer func() { cmd.Process.Signal(syscall.SIGINT); cmd.Wait() }()
	for {
		r, err := http.Get("http://127.0.0.1:15020/healthz/ready")
		if err == nil {
			r.Body.Close()
			if r.StatusCode == 200 {
				break
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	pid := cmd.Process.Pid
	time.Sleep(time.Second)
	fmt.Printf("agent %s: idle VmRSS %s, sockets %d\n", agent, rss(pid, "VmRSS"), countConns(pid))
	answered := make(chan bool, n)
	conns := make([]net.Conn, 0, n)
	for i := 0; i < n; i++ {
		c, err := net.Dial("tcp", "127.0.0.1:"+port)
		if err != nil {
			fmt.Println("dial:", err)
			break
		}
		conns = append(conns, c)
		go func(c net.Conn) {
			fmt.Fprint(c, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n")
			c.SetReadDeadline(time.Now().Add(hold))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			answered <- err == nil && resp.StatusCode == 200
		}(c)
	}
	start := time.Now()
	peakSock := 0
	for time.Since(start) < hold {
		if s := countConns(pid); s > peakSock {
			peakSock = s
		}
		time.Sleep(200 * time.Millisecond)
	}
	ok := 0
	for range conns {
		if <-answered {
			ok++
		}
	}
	fmt.Printf("agent %s: %d connections held %s: VmRSS %s, VmHWM %s, peak sockets in the agent %d, answered 200 within the hold %d\n",
		agent, len(conns), hold, rss(pid, "VmRSS"), rss(pid, "VmHWM"), peakSock, ok)
	for _, c := range conns {
		c.Close()
	}
	time.Sleep(2 * time.Second)
	fmt.Printf("agent %s: after closing them: VmRSS %s\n", agent, rss(pid, "VmRSS"))
}

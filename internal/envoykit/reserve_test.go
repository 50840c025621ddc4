package envoykit

import (
	"bufio"
	"os"
	"os/exec"
	"strconv"
	"testing"
)

// holdEnv makes this test binary a process that reserves one number and
// holds it until its standard input closes.
const holdEnv = "ENVOYKIT_TEST_HOLD"

func TestMain(m *testing.M) {
	if n := os.Getenv(holdEnv); n != "" {
		id, _ := strconv.Atoi(n)
		if !reserve("test", id) {
			os.Exit(3)
		}
		os.Stdout.WriteString("held\n")
		bufio.NewReader(os.Stdin).ReadString('\n')
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// A number another process holds is not handed out here, and it is free
// again once that process exits: two test binaries of go test (run side
// by side) never take the same port or base id.
func TestReserveIsHostWide(t *testing.T) {
	id := 1_000_000 + os.Getpid() // no port nor base id: only this test uses it
	holder := exec.Command(os.Args[0])
	holder.Env = append(os.Environ(), holdEnv+"="+strconv.Itoa(id))
	stdin, err := holder.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "held\n" {
		t.Fatalf("the holder said %q, %v; want held", line, err)
	}
	if reserve("test", id) {
		t.Fatalf("reserved %d while another process holds it", id)
	}
	stdin.Close()
	if err := holder.Wait(); err != nil {
		t.Fatalf("the holder: %v", err)
	}
	if !reserve("test", id) {
		t.Fatalf("%d still taken after its holder exited", id)
	}
}

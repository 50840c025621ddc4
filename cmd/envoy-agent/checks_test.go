//go:build linux

package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/envoy-agent/envoy-agent/internal/envoykit"
)

// TestValidateRefusesWhatRunWouldRefuse: each of these passed validate and
// then failed run (or every reload) under systemd, a restart loop. With the
// real Envoy as the binary, validate and run now both refuse them, exit 3,
// naming file, line and key.
func TestValidateRefusesWhatRunWouldRefuse(t *testing.T) {
	dir := t.TempDir()
	bin := envoykit.Binary(t)
	ports := envoykit.NewPorts(t)
	ports.Upstream = envoykit.FreePort(t)
	envoykit.WriteBootstrap(t, dir, "envoy.yaml", envoykit.BootstrapOptions{Ports: ports})
	head := "[envoy]\nconfig_path = \"envoy.yaml\"\nadmin_port = " + strconv.Itoa(ports.Admin) + "\n"
	tail := "[agent]\nstatus_port = " + strconv.Itoa(ports.Status) + "\nprometheus_port = 0\n"
	binary := "binary_path = " + strconv.Quote(bin) + "\n"
	tests := []struct {
		name, text, want string
	}{
		{"--base-id in extra_args", head + binary + "extra_args = [\"--base-id\", \"7\"]\n" + tail, "config.toml:5: envoy.extra_args: \"--base-id\" is set by the agent; use envoy.base_id"},
		{"--restart-epoch= in extra_args", head + binary + "extra_args = [\"--restart-epoch=3\"]\n" + tail, "config.toml:5: envoy.extra_args: \"--restart-epoch=3\" is set by the agent"},
		{"--admin-address-path in extra_args", head + binary + "extra_args = [\"--admin-address-path\", \"/tmp/x\"]\n" + tail, "config.toml:5: envoy.extra_args: \"--admin-address-path\" is set by the agent"},
		{"drain_duration overflow", head + binary + "drain_duration = \"2562047h\"\nparent_shutdown_duration = \"2562047h1m\"\n" + tail, "config.toml:5: envoy.drain_duration: 2562047h0m0s is more than the 1h0m0s the agent allows"},
		{"start_timeout overflow", head + binary + tail + "start_timeout = \"2562047h\"\n", "config.toml:8: agent.start_timeout: 2562047h0m0s is more than the 1h0m0s"},
		{"base_id wraps", head + binary + "base_id = 4294967295\n" + tail, "config.toml:5: envoy.base_id: 4294967295 is more than 429496729"},
		{"binary is not an Envoy", head + "binary_path = \"/bin/true\"\n" + tail, "config.toml:4: envoy.binary_path: /bin/true is not an Envoy: it printed no Envoy version"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := filepath.Join(dir, "config.toml")
			if err := os.WriteFile(cfg, []byte(tt.text), 0o644); err != nil {
				t.Fatal(err)
			}
			for _, cmd := range []string{"validate", "run"} {
				code, stdout, stderr := runAgent(t, cmd, "--config", cfg)
				if tt.name == "binary is not an Envoy" && cmd == "run" {
					// run does not repeat validate's checks of Envoy (the
					// unit's ExecStartPre does): Envoy not starting says it.
					if code == 0 {
						t.Fatalf("run with /bin/true: exit 0")
					}
					continue
				}
				if code != 3 || !strings.Contains(stderr, tt.want) {
					t.Fatalf("%s: exit %d, want 3 with %q:\n%s%s", cmd, code, tt.want, stdout, stderr)
				}
			}
			assertNoEnvoyFor(t, dir)
		})
	}
}

// TestRefusesFilesOthersCanWrite: the binary (a wrapper script) and the
// bootstrap (mode 0666) in a folder of uid 1001, as an unprivileged local
// user would leave them. validate said OK and run went LIVE, running the
// wrapper as the agent's user (root, by hand). Now validate and run both
// refuse, exit 3, naming each file and who can write it; the TOML file in
// such a folder is refused the same way. A file the bootstrap names for
// Envoy to read (here a runtime layer) that uid 1001 can change is warned
// about: validate still says OK.
func TestRefusesFilesOthersCanWrite(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the files are made for uid 1001")
	}
	const other = 1001
	userDir, err := os.MkdirTemp("", "uid1001-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(userDir) })
	if err := os.Chmod(userDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(userDir, other, other); err != nil {
		t.Fatal(err)
	}
	ports := envoykit.NewPorts(t)
	rootDir := t.TempDir()
	goodBootstrap := envoykit.WriteBootstrap(t, rootDir, "envoy.yaml", envoykit.BootstrapOptions{Ports: ports})
	data, err := os.ReadFile(goodBootstrap)
	if err != nil {
		t.Fatal(err)
	}
	userBootstrap := filepath.Join(userDir, "envoy.yaml")
	if err := os.WriteFile(userBootstrap, data, 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(userBootstrap, 0o666); err != nil {
		t.Fatal(err)
	}
	wrapper := filepath.Join(userDir, "envoy")
	if err := os.WriteFile(wrapper, []byte("#!/bin/sh\nexec "+envoykit.Binary(t)+" \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(wrapper, other, other); err != nil {
		t.Fatal(err)
	}
	toml := func(binary, bootstrap string) string {
		return "[envoy]\nbinary_path = " + strconv.Quote(binary) + "\nconfig_path = " + strconv.Quote(bootstrap) +
			"\nadmin_port = " + strconv.Itoa(ports.Admin) + "\n[agent]\nstatus_port = " + strconv.Itoa(ports.Status) + "\nprometheus_port = 0\n"
	}
	rootToml := filepath.Join(rootDir, "config.toml")
	userToml := filepath.Join(userDir, "config.toml")
	tests := []struct {
		name, file, text string
		want             []string
	}{
		{"binary and bootstrap in uid 1001's folder", rootToml, toml(wrapper, userBootstrap), []string{
			"config.toml:2: envoy.binary_path: " + wrapper + " can be replaced by uid 1001",
			"config.toml:3: envoy.config_path: " + userBootstrap + " can be replaced by uid 1001",
		}},
		{"the TOML file in uid 1001's folder", userToml, toml(envoykit.Binary(t), goodBootstrap), []string{
			userToml + ": " + userToml + " can be replaced by uid 1001",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := os.WriteFile(tt.file, []byte(tt.text), 0o644); err != nil {
				t.Fatal(err)
			}
			for _, cmd := range []string{"validate", "run"} {
				code, stdout, stderr := runAgent(t, cmd, "--config", tt.file)
				for _, want := range tt.want {
					if code != 3 || !strings.Contains(stderr, want) {
						t.Fatalf("%s: exit %d, want 3 with %q:\n%s%s", cmd, code, want, stdout, stderr)
					}
				}
				if cmd == "validate" {
					t.Logf("%s", stderr)
				}
			}
			assertNoEnvoyFor(t, userDir)
		})
	}

	// A runtime layer in uid 1001's folder: a warning, and OK.
	runtimeDir := filepath.Join(userDir, "runtime")
	if err := os.Mkdir(runtimeDir, 0o755); err != nil {
		t.Fatal(err)
	}
	withRuntime := filepath.Join(rootDir, "runtime.yaml")
	layer := "\nlayered_runtime:\n  layers:\n  - name: disk\n    disk_layer: { symlink_root: " + runtimeDir + " }\n"
	if err := os.WriteFile(withRuntime, append(data, layer...), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(rootToml, []byte(toml(envoykit.Binary(t), withRuntime)), 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runAgent(t, "validate", "--config", rootToml)
	want := "warning: " + runtimeDir + " can be replaced by uid 1001"
	if code != 0 || !strings.Contains(stdout, want) || !strings.Contains(stdout, "layered_runtime.layers.0.disk_layer.symlink_root") || !strings.Contains(stdout, "OK: ") {
		t.Fatalf("validate with a runtime layer in uid 1001's folder: exit %d, want 0 with %q:\n%s%s", code, want, stdout, stderr)
	}
	t.Logf("%s", stdout)

	// run serves it and logs the same warning (a start judges the files
	// the bootstrap names once Envoy is exec'd).
	runBootstrap := filepath.Join(t.TempDir(), "envoy.yaml")
	p := startAgentWith(t, procOptions{bootstrapFile: runBootstrap}, func(ports envoykit.Ports) {
		text, err := envoykit.RenderBootstrap(envoykit.BootstrapOptions{Ports: ports})
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, runBootstrap, string(text)+layer)
	})
	logged := runtimeDir + " can be replaced by uid 1001"
	if !envoykit.Eventually(10*time.Second, func() bool { return strings.Contains(p.stderr.String(), logged) }) {
		t.Fatalf("run did not warn of %s:\n%s", runtimeDir, p.stderr)
	}
}

// TestRunDirOthersCanWriteIsRefused: a run_dir that its group or others can
// write, or that another user owns, is refused before Envoy starts (exit 3,
// naming agent.run_dir); a private one serves, and the admin address file
// the agent makes for Envoy is private too.
func TestRunDirOthersCanWriteIsRefused(t *testing.T) {
	tests := []struct {
		name  string
		mode  os.FileMode
		owner int // -1: the agent's
		want  string
	}{
		{"world-writable", 0o777, -1, "is writable by its group or by others (mode 0777)"},
		{"group-writable", 0o770, -1, "is writable by its group or by others (mode 0770)"},
		{"another user's", 0o700, 65534, "belongs to uid 65534"},
		{"private", 0o700, -1, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rd := filepath.Join(t.TempDir(), "rundir")
			if err := os.Mkdir(rd, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(rd, tt.mode); err != nil {
				t.Fatal(err)
			}
			if tt.owner >= 0 {
				if err := os.Chown(rd, tt.owner, tt.owner); err != nil {
					t.Fatal(err)
				}
			}
			p := startAgent(t, procOptions{noWaitReady: tt.want != "", agent: map[string]string{"run_dir": strconv.Quote(rd)}})
			if tt.want == "" {
				fi, err := os.Stat(filepath.Join(rd, "admin-address-epoch-0"))
				if err != nil || fi.Mode().Perm() != 0o600 {
					t.Fatalf("admin address file: %v, mode %v; want 0600", err, fi.Mode())
				}
				return
			}
			code, _ := p.wait(p.started, 30*time.Second)
			if out := p.stderr.String(); code != 3 || !strings.Contains(out, "config.toml:") || !strings.Contains(out, "agent.run_dir: "+rd+" "+tt.want) {
				t.Fatalf("exit %d, want 3 naming agent.run_dir with %q:\n%s", code, tt.want, out)
			}
			if entries, _ := os.ReadDir(rd); len(entries) != 0 {
				t.Errorf("the agent wrote into the refused run_dir: %v", entries)
			}
		})
	}
}

// TestRefusesPathsTheKernelResolvesElsewhere: paths whose text names
// root's files while the kernel reaches uid 1001's, as root runs the agent.
// A root-owned link into uid 1001's folder followed by ".." (as binary_path,
// as config_path, and as a link's target), and a root link to a folder path
// so long that the path with the rest appended passes PATH_MAX (uid 1001's
// folders deep inside it): validate said OK, and root ran uid 1001's
// wrapper. A path the check cannot walk as the kernel would (a magic link of
// /proc) was trusted by its text too. Now validate and run refuse each,
// exit 3, and the wrapper never runs.
func TestRefusesPathsTheKernelResolvesElsewhere(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the files are made for uid 1001")
	}
	const other = 1001
	chown := func(p string) {
		t.Helper()
		if err := os.Lchown(p, other, other); err != nil {
			t.Fatal(err)
		}
	}
	userDir, err := os.MkdirTemp("", "uid1001-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(userDir) })
	if err := os.Chmod(userDir, 0o755); err != nil {
		t.Fatal(err)
	}
	chown(userDir)
	ran := filepath.Join(t.TempDir(), "ran")
	wrapper := "#!/bin/sh\necho \"ran as uid $(id -u)\" >>" + ran + "\nexec " + envoykit.Binary(t) + " \"$@\"\n"
	for _, d := range []string{"x/y", "bin"} {
		if err := os.MkdirAll(filepath.Join(userDir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{"x", "x/y", "bin"} {
		chown(filepath.Join(userDir, p))
	}
	if err := os.WriteFile(filepath.Join(userDir, "bin/envoy"), []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	chown(filepath.Join(userDir, "bin/envoy"))

	ports := envoykit.NewPorts(t)
	rootDir := shortTempDir(t)
	if err := os.Chmod(rootDir, 0o755); err != nil {
		t.Fatal(err)
	}
	opt := filepath.Join(rootDir, "opt")
	for _, d := range []string{"a", "bin"} {
		if err := os.MkdirAll(filepath.Join(opt, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	rootEnvoy := filepath.Join(opt, "bin/envoy")
	if err := os.WriteFile(rootEnvoy, []byte("#!/bin/sh\nexec "+envoykit.Binary(t)+" \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	bootstrap := envoykit.WriteBootstrap(t, opt, "envoy.yaml", envoykit.BootstrapOptions{Ports: ports})
	data, err := os.ReadFile(bootstrap)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(userDir, "envoy.yaml"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	chown(filepath.Join(userDir, "envoy.yaml"))
	link := filepath.Join(opt, "a/m") // root's link into uid 1001's folder
	if err := os.Symlink(filepath.Join(userDir, "x/y"), link); err != nil {
		t.Fatal(err)
	}
	viaDots := link + "/../../bin/envoy" // as text: opt/bin/envoy, root's
	linkToDots := filepath.Join(opt, "bin-link")
	if err := os.Symlink(viaDots, linkToDots); err != nil {
		t.Fatal(err)
	}
	longPath := longPathInto(t, rootDir, userDir, other)

	toml := func(binary, bootstrap string) string {
		return "[envoy]\nbinary_path = " + strconv.Quote(binary) + "\nconfig_path = " + strconv.Quote(bootstrap) +
			"\nadmin_port = " + strconv.Itoa(ports.Admin) + "\n[agent]\nstatus_port = " + strconv.Itoa(ports.Status) + "\nprometheus_port = 0\n"
	}
	tests := []struct {
		name, binary, bootstrap, want string
	}{
		{"binary_path: a link into uid 1001's folder, then ..", viaDots, bootstrap, "envoy.binary_path: " + viaDots + " can be replaced by uid 1001"},
		{"config_path: a link into uid 1001's folder, then ..", rootEnvoy, link + "/../../envoy.yaml", "envoy.config_path: " + link + "/../../envoy.yaml can be replaced by uid 1001"},
		{"binary_path: a link whose target has ..", linkToDots, bootstrap, "envoy.binary_path: " + linkToDots + " can be replaced by uid 1001"},
		{"binary_path: past PATH_MAX once the link is followed", longPath, bootstrap, "can be replaced by uid 1001"},
		{"binary_path: a magic link", "/proc/self/root" + rootEnvoy, bootstrap, "cannot be judged as the kernel would open it"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := filepath.Join(rootDir, "config.toml")
			if err := os.WriteFile(cfg, []byte(toml(tt.binary, tt.bootstrap)), 0o644); err != nil {
				t.Fatal(err)
			}
			for _, cmd := range []string{"validate", "run"} {
				code, stdout, stderr := runAgent(t, cmd, "--config", cfg)
				if code != 3 || !strings.Contains(stderr, tt.want) {
					t.Fatalf("%s: exit %d, want 3 with %q:\n%s%s", cmd, code, tt.want, stdout, stderr)
				}
				if cmd == "validate" {
					t.Logf("%.400s", stderr)
				}
			}
			if b, err := os.ReadFile(ran); err == nil {
				t.Fatalf("uid 1001's wrapper ran: %s", b)
			}
			assertNoEnvoyFor(t, rootDir)
		})
	}
}

// longPathInto makes, under rootDir, a root link to a root folder path of
// 3,673 bytes, then 300 folders "a" below it, the 250th on uid's, with the
// wrapper of userDir/bin/envoy as "envoy" at the bottom, and returns the
// path through the link (about 600 bytes): the link's target with the rest
// appended is past PATH_MAX.
func longPathInto(t *testing.T, rootDir, userDir string, uid int) string {
	t.Helper()
	long := filepath.Join(rootDir, "long")
	for len(long) < 3673-201 {
		long += "/" + strings.Repeat("d", 200)
	}
	long += "/" + strings.Repeat("d", 3673-len(long)-1)
	if err := os.MkdirAll(long, 0o755); err != nil {
		t.Fatal(err)
	}
	root, err := os.OpenRoot(long) // the deepest folders are past PATH_MAX by their full path
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	rel := "a"
	for i := 0; i < 300; i++ {
		if err := root.Mkdir(rel, 0o755); err != nil {
			t.Fatal(err)
		}
		if i >= 249 {
			if err := root.Lchown(rel, uid, uid); err != nil {
				t.Fatal(err)
			}
		}
		rel += "/a"
	}
	wrapper, err := os.ReadFile(filepath.Join(userDir, "bin/envoy"))
	if err != nil {
		t.Fatal(err)
	}
	bin := strings.TrimSuffix(rel, "/a") + "/envoy"
	if err := root.WriteFile(bin, wrapper, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := root.Lchown(bin, uid, uid); err != nil {
		t.Fatal(err)
	}
	l := filepath.Join(rootDir, "L")
	if err := os.Symlink(long, l); err != nil {
		t.Fatal(err)
	}
	return l + strings.Repeat("/a", 300) + "/envoy"
}

// TestRunDirFoldersAboveAreChecked: the folders above run_dir count. A
// root-owned 0700 run_dir inside uid 1001's folder passed validate; uid
// 1001 then moved it away and made its own, so the control socket was gone,
// reloads were refused and the next start exited 3. A run_dir that does not
// exist yet in a folder every user can write (with the control socket
// elsewhere) was made at run time by whoever came first. Both are refused
// now, exit 3, by validate and by run, naming the folder and who can
// change it.
func TestRunDirFoldersAboveAreChecked(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the folders are made for uid 1001")
	}
	userDir, err := os.MkdirTemp("", "uid1001-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(userDir) })
	if err := os.Chmod(userDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(userDir, 1001, 1001); err != nil {
		t.Fatal(err)
	}
	inHome := filepath.Join(userDir, "rd")
	if err := os.Mkdir(inHome, 0o700); err != nil { // root's
		t.Fatal(err)
	}
	shared := filepath.Join(shortTempDir(t), "tmp")
	if err := os.Mkdir(shared, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(shared, os.ModeSticky|0o777); err != nil {
		t.Fatal(err)
	}
	control := filepath.Join(shortTempDir(t), "control.sock")
	tests := []struct {
		name  string
		agent map[string]string
		want  string
	}{
		{"root's run_dir in uid 1001's folder", map[string]string{"run_dir": strconv.Quote(inHome)},
			"agent.run_dir: " + inHome + " can be replaced by uid 1001"},
		{"a run_dir to make in a folder every user can write", map[string]string{"run_dir": strconv.Quote(filepath.Join(shared, "rd")), "control_socket": strconv.Quote(control)},
			"agent.run_dir: " + filepath.Join(shared, "rd") + " does not exist, and " + shared + ", where it would be made, can be written by every user"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := startAgent(t, procOptions{noWaitReady: true, agent: tt.agent})
			code, _ := p.wait(p.started, 30*time.Second)
			if out := p.stderr.String(); code != 3 || !strings.Contains(out, tt.want) {
				t.Fatalf("run: exit %d, want 3 with %q:\n%s", code, tt.want, out)
			}
			if code, stdout, stderr := runAgent(t, "validate", "--config", p.config); code != 3 || !strings.Contains(stderr, tt.want) {
				t.Fatalf("validate: exit %d, want 3 with %q:\n%s%s", code, tt.want, stdout, stderr)
			}
			if _, err := os.Lstat(filepath.Join(shared, "rd")); err == nil {
				t.Fatalf("the agent made %s", filepath.Join(shared, "rd"))
			}
		})
	}
}

// TestRouteToAMissingClusterIsRefused: Envoy's RDS takes a route to a
// cluster that does not exist (validate_clusters defaults to false there),
// which a static bootstrap refuses. The agent serves every route over RDS,
// and what `envoy --mode validate` refused is still refused: validate
// (exit 3, Envoy's reason), run (Envoy rejects the route, which the agent
// now sets validate_clusters on: exit 1, Envoy's reason, no Envoy left),
// and a reload of a serving agent (refused, exit 3; the routes before go
// on serving).
func TestRouteToAMissingClusterIsRefused(t *testing.T) {
	t.Parallel()
	const why = "unknown cluster 'nowhere'"
	toNowhere := func(text string) string {
		return strings.Replace(text, "cluster: upstream, timeout", "cluster: nowhere, timeout", 1)
	}
	bootstrap := filepath.Join(t.TempDir(), "envoy.yaml")
	var good string
	p := startAgentWith(t, procOptions{bootstrapFile: bootstrap, agent: map[string]string{"reload_method": `"auto"`}}, func(ports envoykit.Ports) {
		text, err := envoykit.RenderBootstrap(envoykit.BootstrapOptions{Ports: ports, ResponseHeader: "v1"})
		if err != nil {
			t.Fatal(err)
		}
		good = string(text)
		writeFile(t, bootstrap, good)
	})
	writeFile(t, bootstrap, toNowhere(good))
	if code, out := p.reload(); code != 3 || !strings.Contains(out, why) {
		t.Fatalf("reload to a missing cluster: exit %d, want 3 naming %q: %s", code, why, out)
	}
	if r, err := envoykit.Get(envoykit.URL(p.ports.Listener, "/"), 5*time.Second); err != nil || r.Code != 200 || r.Header.Get("x-config-version") != "v1" {
		t.Fatalf("after the refused reload: %+v %v; want v1 served", r, err)
	}
	if code, stdout, stderr := runAgent(t, "validate", "--config", p.config); code != 3 || !strings.Contains(stderr, why) {
		t.Fatalf("validate: exit %d, want 3 naming %q: %s%s", code, why, stdout, stderr)
	}

	// run: an agent of its own started on it.
	bad := filepath.Join(t.TempDir(), "envoy.yaml")
	q := startAgentWith(t, procOptions{bootstrapFile: bad, noWaitReady: true, agent: map[string]string{"reload_method": `"auto"`}}, func(ports envoykit.Ports) {
		text, err := envoykit.RenderBootstrap(envoykit.BootstrapOptions{Ports: ports})
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, bad, toNowhere(string(text)))
	})
	code, _ := q.wait(q.started, 60*time.Second)
	if code != 1 || !strings.Contains(q.stderr.String(), why) {
		t.Fatalf("run on a route to a missing cluster: exit %d, want 1 naming %q:\n%s", code, why, q.stderr)
	}
	t.Logf("run: exit %d: %s", code, lastLine(q.stderr.String(), "envoy-agent: "))
	assertNoEnvoyFor(t, q.dir)
}

// lastLine is the last line of text that holds sub.
func lastLine(text, sub string) string {
	lines := strings.Split(text, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], sub) {
			return lines[i]
		}
	}
	return ""
}

package imagetest

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ory/dockertest/v3"
	"github.com/ory/dockertest/v3/docker"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/cairnrun/cairn/internal/testenv"
)

// repoRoot is the repository's root, from this package's folder.
const repoRoot = "../.."

// image is the tag the test builds the Dockerfile as.
const image = "cairn:imagetest"

// podmanCmd is podman with runc: crun, podman's default runtime, refuses the
// cgroup setup of the VMs these tests run on.
func podmanCmd(ctx context.Context, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "podman", append([]string{"--runtime", "runc"}, args...)...)
}

// requirePodman fails the test under CI=true, and skips it elsewhere, when podman
// is missing.
func requirePodman(t *testing.T) {
	t.Helper()
	for _, tool := range []string{"podman", "runc", "mmdebstrap"} {
		if _, err := exec.LookPath(tool); err != nil {
			msg := tool + " is missing: make tools (scripts/install-podman.sh) installs it"
			if os.Getenv("CI") == "true" {
				t.Fatal(msg)
			}
			t.Skip(msg)
		}
	}
}

// run runs cmd in dir and fails the test with its output if it fails.
func run(t *testing.T, dir string, cmd *exec.Cmd) string {
	t.Helper()
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	t.Logf("%s: %s", strings.Join(cmd.Args, " "), time.Since(start).Round(time.Second))
	require.NoError(t, err, "%s:\n%s", strings.Join(cmd.Args, " "), out.String())
	return out.String()
}

// buildImage builds the stand-in base images (kept by podman between runs) and
// the Dockerfile as image.
func buildImage(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Minute)
	defer cancel()
	run(t, repoRoot, exec.CommandContext(ctx, "scripts/image-bases.sh"))
	// Host networking for the build's downloads (Debian's packages, Go modules):
	// no bridge network is set up on these machines.
	nofile, nproc := limits(t)
	run(t, repoRoot, podmanCmd(ctx, "build", "--network", "host", "--tag", image, "--file", "Dockerfile",
		"--ulimit", fmt.Sprintf("nofile=%d:%d", nofile, nofile), "--ulimit", fmt.Sprintf("nproc=%d:%d", nproc, nproc), "."))
}

// limits returns this process's hard limits of open files and processes: runc
// must be given limits within them (--ulimit), as the defaults it would set are
// refused on these VMs ("error setting rlimits for ready process").
func limits(t *testing.T) (nofile, nproc uint64) {
	t.Helper()
	var lim syscall.Rlimit
	require.NoError(t, syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim))
	nofile = lim.Max
	require.NoError(t, syscall.Getrlimit(rlimitNproc, &lim))
	return nofile, min(lim.Max, 4096)
}

// rlimitNproc is RLIMIT_NPROC (Linux), which package syscall does not name.
const rlimitNproc = 6

// podmanService starts `podman system service` on a socket of its own for this
// test and returns dockertest's pool on it.
func podmanService(t *testing.T) *dockertest.Pool {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "podman.sock")
	cmd := podmanCmd(context.Background(), "system", "service", "--time=0", "unix://"+sock)
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	pool, err := dockertest.NewPool("unix://" + sock)
	require.NoError(t, err)
	pool.MaxWait = 2 * time.Minute
	// Waiting for the service to answer on its socket.
	require.NoError(t, pool.Retry(func() error { return pool.Client.Ping() }), "podman system service: %s", log.String())
	return pool
}

// freePort returns a TCP port of 127.0.0.1 that nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// probeBundle writes a workflow whose exec steps print what the sandbox looks
// like from inside: the handler's uid and pid, and the processes it sees.
func probeBundle(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "bin"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "cairn.yaml"), []byte(`name: probe
steps:
  - key: offline
    exec: ["./bin/probe"]
    network: none
  - key: online
    exec: ["./bin/probe"]
`), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "bin", "probe"), []byte(`#!/bin/sh
set -e
procs=$(ls /proc | grep -c '^[0-9]')
printf '{"uid": %s, "pid": %s, "procs": %s}\n' "$(id -u)" "$$" "$procs"
`), 0o755))
	return dir
}

// TestImage: the image built from the Dockerfile starts as non-root, answers
// /readyz against the test PostgreSQL and S3, runs exec steps inside the sandbox
// (nobody in a user namespace of their own, which maps it to the server's uid
// 10001; a PID namespace of their own: few processes), with and without a network,
// under the runtime settings docs/security.md names for containers,
// and exits 0 on SIGTERM within the grace the stop gives it.
func TestImage(t *testing.T) {
	requirePodman(t)
	buildImage(t)
	pool := podmanService(t)

	dbURL := testenv.DatabaseURL(t)
	s3, bucket := testenv.S3Bucket(t)
	cli := testenv.CairnBinary(t)
	port := freePort(t)
	nofile, nproc := limits(t)
	server := fmt.Sprintf("http://127.0.0.1:%d", port)
	const token = "admin-token-for-the-image-test"
	env := append(s3.Env(),
		"CAIRN_DATABASE_URL="+dbURL,
		"CAIRN_BLOBSTORE=s3://"+bucket+"?endpoint="+s3.Endpoint+"&region="+s3.Region,
		"CAIRN_LISTEN="+strings.TrimPrefix(server, "http://"),
		"CAIRN_TOKENS=admin:"+token,
		"CAIRN_SIGNING_KEY=signing-key-of-the-image-test-0123456789",
		"CAIRN_SHUTDOWN_GRACE=5s",
		"CAIRN_LOG_LEVEL=debug",
	)
	res, err := pool.RunWithOptions(&dockertest.RunOptions{
		Repository: "cairn", Tag: "imagetest", Env: env,
		Labels: map[string]string{"cairn.test": "imagetest"},
	}, func(hc *docker.HostConfig) {
		// The test's PostgreSQL and S3 listen on this machine's loopback.
		hc.NetworkMode = "host"
		hc.Ulimits = []docker.ULimit{{Name: "nofile", Soft: int64(nofile), Hard: int64(nofile)}, {Name: "nproc", Soft: int64(nproc), Hard: int64(nproc)}}
		// What the sandbox needs of a container (docs/security.md "Containers"):
		// user namespaces (the default seccomp profile refuses them), /proc
		// unmasked (bwrap mounts a fresh one), and /dev/net/tun for pasta.
		hc.SecurityOpt = []string{"seccomp=unconfined", "systempaths=unconfined"}
		hc.Devices = []docker.Device{{PathOnHost: "/dev/net/tun", PathInContainer: "/dev/net/tun", CgroupPermissions: "rwm"}}
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pool.Purge(res) })
	logs := func() string {
		var out bytes.Buffer
		_ = pool.Client.Logs(docker.LogsOptions{Container: res.Container.ID, OutputStream: &out, ErrorStream: &out, Stdout: true, Stderr: true})
		return out.String()
	}

	// Waiting for the server to be ready: database, blob store, schema.
	var ready struct {
		Status string            `json:"status"`
		Checks map[string]string `json:"checks"`
	}
	err = pool.Retry(func() error {
		resp, err := http.Get(server + "/readyz")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("readyz %d: %s", resp.StatusCode, body)
		}
		return json.Unmarshal(body, &ready)
	})
	require.NoError(t, err, "the server's log:\n%s", logs())
	require.Equal(t, "ok", ready.Status)
	require.True(t, strings.HasPrefix(ready.Checks["exec"], "ok: bubblewrap"), "exec handlers can be sandboxed: %v\n%s", ready.Checks, logs())

	// The server runs as the image's user.
	var id bytes.Buffer
	code, err := res.Exec([]string{"id", "-u"}, dockertest.ExecOptions{StdOut: &id})
	require.NoError(t, err)
	require.Equal(t, 0, code)
	require.Equal(t, "10001", strings.TrimSpace(id.String()))

	// Exec steps run in the sandbox, with and without a network.
	cliEnv := append(os.Environ(), "CAIRN_SERVER="+server, "CAIRN_TOKEN="+token)
	cairn := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(cli, args...)
		cmd.Env = cliEnv
		return run(t, t.TempDir(), cmd)
	}
	cairn("deploy", probeBundle(t))
	runID := strings.TrimSpace(cairn("run", "start", "probe"))
	require.Contains(t, cairn("run", "watch", runID), "run.succeeded", "the server's log:\n%s", logs())
	for _, step := range []string{"offline", "online"} {
		var probe struct{ UID, PID, Procs int }
		require.NoError(t, json.Unmarshal([]byte(cairn("run", "output", runID, step)), &probe), step)
		require.Equal(t, 65534, probe.UID, "%s: the handler is nobody in a user namespace of its own (the server's uid outside)", step)
		require.Less(t, probe.Procs, 10, "%s: the handler sees its own PID namespace (bwrap, its shell and pipeline), not the machine's processes", step)
	}

	// SIGTERM: the server drains and exits 0 within its grace (5 s for attempts,
	// 10 s for HTTP requests); podman's stop would SIGKILL it (137) 30 s after.
	// SIGTERM: the server drains and exits 0 within its grace (5 s for attempts,
	// 10 s for HTTP requests; 30 s given here, as `docker stop` gives 10).
	require.NoError(t, pool.Client.KillContainer(docker.KillContainerOptions{ID: res.Container.ID, Signal: docker.SIGTERM}))
	wctx, wcancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer wcancel()
	code, err = pool.Client.WaitContainerWithContext(res.Container.ID, wctx)
	require.NoError(t, err, "the server did not exit within 30 s of SIGTERM; its log:\n%s", logs())
	require.Equal(t, 0, code, "exit code; the server's log:\n%s", logs())
	require.Contains(t, logs(), `msg="shutting down"`)
}

// composeServices are the services of compose.yaml whose images can be built here
// (the others are pulled from a registry, which these machines cannot reach).
var composeServices = []string{"migrate", "cairn"}

// composeFile writes a Compose file of compose.yaml's buildable services, as
// compose.yaml defines them (build, image, command, environment, security_opt,
// devices, the image's health check) but on the host's network, against the
// test's PostgreSQL and S3 instead of the services that cannot come up here (their
// depends_on dropped), with the ulimits runc needs on these machines.
func composeFile(t *testing.T, env map[string]string, nofile, nproc uint64) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot, "compose.yaml"))
	require.NoError(t, err)
	var doc struct {
		Services map[string]map[string]any `yaml:"services"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &doc))
	root, err := filepath.Abs(repoRoot)
	require.NoError(t, err)
	out := map[string]any{}
	for _, name := range composeServices {
		svc, ok := doc.Services[name]
		require.True(t, ok, "compose.yaml has no service %s", name)
		delete(svc, "depends_on")
		delete(svc, "ports") // the host's network: CAIRN_LISTEN binds 127.0.0.1
		require.Equal(t, ".", svc["build"], "%s is built from the repository's Dockerfile", name)
		svc["build"] = root
		svc["network_mode"] = "host"
		svc["ulimits"] = map[string]any{"nofile": nofile, "nproc": nproc}
		vars, ok := svc["environment"].(map[string]any)
		require.True(t, ok, "%s: environment as a map", name)
		for k, v := range env {
			if _, ok := vars[k]; ok || name == "cairn" {
				vars[k] = v
			}
		}
		out[name] = svc
	}
	b, err := yaml.Marshal(map[string]any{"name": "cairn-imagetest", "services": out})
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "compose.yaml")
	require.NoError(t, os.WriteFile(path, b, 0o644))
	return path
}

// TestCompose: compose.yaml's services that can be built here (migrate, cairn)
// come up with podman-compose: migrate runs `cairn migrate up` and exits 0 (the
// test's database is migrated already: it has nothing to apply), and the server
// answers /readyz on 127.0.0.1 only, with exec steps sandboxed under the settings
// compose.yaml gives it.
func TestCompose(t *testing.T) {
	requirePodman(t)
	if _, err := exec.LookPath("podman-compose"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("podman-compose is missing: make tools (scripts/install-podman.sh) installs it")
		}
		t.Skip("podman-compose is missing")
	}
	buildImage(t)
	// compose.yaml's image for its build: the same Dockerfile, built above with
	// the host's network for its downloads (podman-compose builds without it).
	ctx0, cancel0 := context.WithTimeout(t.Context(), time.Minute)
	defer cancel0()
	run(t, repoRoot, podmanCmd(ctx0, "tag", image, "cairn:local"))
	nofile, nproc := limits(t)
	dbURL := testenv.DatabaseURL(t)
	s3, bucket := testenv.S3Bucket(t)
	port := freePort(t)
	server := fmt.Sprintf("http://127.0.0.1:%d", port)
	env := map[string]string{
		"CAIRN_DATABASE_URL":    dbURL,
		"CAIRN_BLOBSTORE":       "s3://" + bucket + "?endpoint=" + s3.Endpoint + "&region=" + s3.Region,
		"AWS_ACCESS_KEY_ID":     s3.AccessKey,
		"AWS_SECRET_ACCESS_KEY": s3.SecretKey,
		"AWS_REGION":            s3.Region,
		"CAIRN_LISTEN":          strings.TrimPrefix(server, "http://"),
		"CAIRN_PUBLIC_URL":      server,
		// As a user's .env would: podman-compose 1.0.3 does not read
		// compose.yaml's ${CAIRN_SECRET_KEY:-} (an empty default) as empty.
		"CAIRN_SECRET_KEY": base64.StdEncoding.EncodeToString(make([]byte, 32)),
	}
	file := composeFile(t, env, nofile, nproc)
	// podman-compose 1.0.3 (Debian 12's) passes the project's network beside
	// network_mode: host, which podman refuses ("cannot set multiple networks
	// without bridge network mode"); later releases do not. This wrapper of podman
	// drops it, and runs podman with runc.
	wrapper := filepath.Join(t.TempDir(), "podman")
	require.NoError(t, os.WriteFile(wrapper, []byte(`#!/bin/bash
host=0
for a in "$@"; do [[ $a == host ]] && host=1; done
args=()
skip=0
for a in "$@"; do
	if ((skip)); then skip=0; continue; fi
	if ((host)) && [[ $a == --net || $a == --network-alias ]]; then skip=1; continue; fi
	args+=("$a")
done
exec podman --runtime runc "${args[@]}"
`), 0o755))
	compose := func(args ...string) string {
		t.Helper()
		return run(t, filepath.Dir(file), exec.Command("podman-compose",
			append([]string{"--podman-path", wrapper, "-p", "cairn-imagetest", "-f", file}, args...)...))
	}
	t.Cleanup(func() {
		cmd := exec.Command("podman-compose", "--podman-path", wrapper, "-p", "cairn-imagetest", "-f", file, "down", "-t", "10")
		_ = cmd.Run()
	})
	compose("up", "-d")

	// migrate ran once and exited 0; the server is up.
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	out := run(t, repoRoot, podmanCmd(ctx, "wait", "cairn-imagetest_migrate_1"))
	require.Equal(t, "0", strings.TrimSpace(out), "migrate's exit code")
	require.Eventually(t, func() bool {
		resp, err := http.Get(server + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 2*time.Minute, time.Second, "the compose service cairn never became ready: %s",
		run(t, repoRoot, podmanCmd(ctx, "logs", "cairn-imagetest_cairn_1")))
	resp, err := http.Get(server + "/readyz")
	require.NoError(t, err)
	defer resp.Body.Close()
	var ready struct {
		Checks map[string]string `json:"checks"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&ready))
	require.True(t, strings.HasPrefix(ready.Checks["exec"], "ok: bubblewrap"), "compose.yaml gives the sandbox what it needs: %v", ready.Checks)
	// Bound to 127.0.0.1 only: no other address of this machine answers.
	if ip := otherAddress(t); ip != "" {
		_, err := net.DialTimeout("tcp", net.JoinHostPort(ip, strconv.Itoa(port)), time.Second)
		require.Error(t, err, "the server answers on %s", ip)
	}
}

// otherAddress returns an IPv4 address of this machine other than loopback, or ""
// when it has none.
func otherAddress(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	require.NoError(t, err)
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() {
			return n.IP.String()
		}
	}
	return ""
}

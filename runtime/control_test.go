package runtime_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/blobstore"
	"github.com/cairnrun/cairn/catalog"
	cairnruntime "github.com/cairnrun/cairn/runtime"
)

// requireOneTerminalAttempt checks that step key of run id failed after exactly
// one attempt, with the handler's non-retryable "no", although max_attempts
// allowed more.
func requireOneTerminalAttempt(t *testing.T, tb *testBundle, id uuid.UUID, key string) {
	t.Helper()
	run := waitRun(t, tb, id, 2*time.Minute)
	require.Equal(t, catalog.RunFailed, run.Status)
	a := attempts(t, tb, id, key)
	var seen []string
	for _, at := range a {
		seen = append(seen, string(at.Status)+": "+string(at.Error))
	}
	require.Len(t, a, 1, "the handler said not to retry; attempts: %q", seen)
	require.Equal(t, catalog.AttemptFailed, a[0].Status)
	var fe struct {
		Message   string `json:"message"`
		Retryable bool   `json:"retryable"`
		Code      string `json:"code"`
	}
	require.NoError(t, json.Unmarshal(a[0].Error, &fe), "%s", a[0].Error)
	require.Equal(t, "no", fe.Message)
	require.False(t, fe.Retryable)
	require.Equal(t, "function_error", fe.Code)
	st := stepMap(t, tb, id)[key]
	require.Equal(t, catalog.StepFailed, st.Status)
	require.Equal(t, 1, st.Attempts)
}

// checkpointEvents returns the data of the step.checkpointed events of a run,
// in order.
func checkpointEvents(t *testing.T, tb *testBundle, id uuid.UUID) []json.RawMessage {
	t.Helper()
	var out []json.RawMessage
	var after int64
	for {
		events, err := tb.store.EventList(context.Background(), id, after, 1000)
		require.NoError(t, err)
		if len(events) == 0 {
			return out
		}
		for _, e := range events {
			if e.Type == catalog.EventStepCheckpointed {
				out = append(out, json.RawMessage(e.Data))
			}
			after = e.Seq
		}
	}
}

// TestManyCheckpointsThenTerminalError: a handler stores 3,000 checkpoints (a
// database transaction each) and then says not to retry, and exits at once: its
// lines are still in the pipe. Every checkpoint is stored, and the step fails
// after one attempt although max_attempts is 3.
func TestManyCheckpointsThenTerminalError(t *testing.T) {
	t.Parallel()
	_, tb := setup(t)
	startDispatcher(t, tb, cairnruntime.Config{})
	const n = 3000
	v := deploy(t, tb, map[string]string{
		"cairn.yaml": `
name: many-checkpoints
steps:
  - key: work
    exec: ["./bin/work"]
    retry: {max_attempts: 3, backoff: fixed, delay: 100ms}
`,
		"bin/work": "#!/bin/sh\n" +
			"seq 1 " + strconv.Itoa(n) + " | sed 's/.*/{\"checkpoint\":&}/' >&3\n" +
			"echo '{\"error\":{\"message\":\"no\",\"retryable\":false}}' >&3\n" +
			"exit 1\n",
	})
	id := startRun(t, tb, v, "")
	requireOneTerminalAttempt(t, tb, id, "work")

	events := checkpointEvents(t, tb, id)
	require.Len(t, events, n)
	for i, e := range events {
		var d struct{ Checkpoint int }
		require.NoError(t, json.Unmarshal(e, &d))
		require.Equal(t, i+1, d.Checkpoint, "checkpoint %d in order", i+1)
	}
	require.JSONEq(t, strconv.Itoa(n), string(stepMap(t, tb, id)["work"].Checkpoint))
}

// TestCheckpointsDuringBlobStoreOutage: the blob store goes down while a handler
// writes checkpoints too large to be inline, then says not to retry and exits.
// The checkpoints wait for the store (minio-go retries) for longer than the
// invoker waits for a finished handler's pipes; when the store comes back, the
// rest of the lines are read: the step fails after one attempt, not retried.
func TestCheckpointsDuringBlobStoreOutage(t *testing.T) {
	t.Parallel()
	s3 := startOutageS3(t)
	_, tb := setup(t)
	tb.blobs = s3.store(t)
	startDispatcher(t, tb, cairnruntime.Config{InlineLimit: 1024})
	marks := t.TempDir()
	v := deploy(t, tb, map[string]string{
		"cairn.yaml": `
name: blob-outage
steps:
  - key: work
    exec: ["./bin/work", "` + marks + `"]
    retry: {max_attempts: 3, backoff: fixed, delay: 100ms}
`,
		// Checkpoints of 2 KB: over the inline limit, so each is a blob.
		"bin/work": `#!/bin/sh
touch "$1/started"
while [ ! -e "$1/go" ]; do sleep 0.01; done
pad=$(head -c 2000 /dev/zero | tr '\0' x)
for i in 1 2 3 4 5; do echo "{\"checkpoint\":{\"n\":$i,\"pad\":\"$pad\"}}" >&3; done
echo '{"error":{"message":"no","retryable":false}}' >&3
touch "$1/exited"
exit 1
`,
	})
	id := startRun(t, tb, v, "")

	waitFile(t, filepath.Join(marks, "started"), "the handler to start")
	s3.kill()
	require.NoError(t, os.WriteFile(filepath.Join(marks, "go"), nil, 0o644))
	waitFile(t, filepath.Join(marks, "exited"), "the handler to write its lines and exit")
	// The outage outlasts the invoker's kill grace (2 s) and pipe close delay
	// (250 ms) after the handler's exit: the lines wait in the pipe meanwhile.
	time.Sleep(3 * time.Second)
	s3.start()

	requireOneTerminalAttempt(t, tb, id, "work")
}

// waitFile waits until path exists.
func waitFile(t *testing.T, path, what string) {
	t.Helper()
	require.Eventually(t, func() bool {
		_, err := os.Stat(path)
		return err == nil
	}, 30*time.Second, 10*time.Millisecond, "waiting for %s", what)
}

// Credentials of the S3 server of startOutageS3.
const (
	outageS3AccessKey = "runtime-access"
	outageS3SecretKey = "runtime-secret-key-0123"
	outageS3Region    = "us-east-1"
	outageS3Bucket    = "cairn-runtime"
)

// outageS3 is a versitygw process of one test, which the test stops and starts
// again on the same port and data: the shared server of internal/testenv must
// stay up for the other tests.
type outageS3 struct {
	t      *testing.T
	bin    string
	addr   string
	root   string
	n      int // starts so far, to name the logs
	pid    int
	exited chan struct{}
}

// startOutageS3 starts versitygw (posix backend) on a free port with a bucket.
// Without versitygw the test is skipped, or fails under CI=true.
func startOutageS3(t *testing.T) *outageS3 {
	t.Helper()
	bin := versitygwPath()
	if bin == "" {
		msg := "versitygw is not installed (make tools)"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	s := &outageS3{t: t, bin: bin, addr: addr, root: filepath.Join(t.TempDir(), "data")}
	require.NoError(t, os.Mkdir(s.root, 0o700))
	s.start()
	t.Cleanup(s.kill)

	client, err := minio.New(s.addr, &minio.Options{Creds: credentials.NewStaticV4(outageS3AccessKey, outageS3SecretKey, ""), Region: outageS3Region})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, client.MakeBucket(ctx, outageS3Bucket, minio.MakeBucketOptions{Region: outageS3Region}))
	return s
}

// start runs the server and waits until it answers.
func (s *outageS3) start() {
	s.t.Helper()
	s.n++
	logFile, err := os.Create(filepath.Join(filepath.Dir(s.root), fmt.Sprintf("versitygw-%d.log", s.n)))
	require.NoError(s.t, err)
	started := make(chan error, 1)
	exited := make(chan struct{})
	// The parent-death signal comes when the thread that forked ends: lock it for
	// the server's life, so that the server dies with the test binary only.
	go func() {
		runtime.LockOSThread()
		defer logFile.Close()
		defer close(exited)
		cmd := exec.Command(s.bin, "--port", s.addr, "--access", outageS3AccessKey, "--secret", outageS3SecretKey,
			"--region", outageS3Region, "--quiet", "posix", s.root)
		cmd.Stdout, cmd.Stderr = logFile, logFile
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		s.pid = cmd.Process.Pid
		started <- nil
		_ = cmd.Wait()
	}()
	require.NoError(s.t, <-started)
	s.exited = exited
	// Waiting until it answers HTTP (an anonymous request earns a 403: that is up).
	client := &http.Client{Timeout: time.Second}
	require.Eventually(s.t, func() bool {
		resp, err := client.Get("http://" + s.addr + "/")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return true
	}, 30*time.Second, 20*time.Millisecond, "versitygw on %s does not answer", s.addr)
}

// kill stops the server with SIGKILL and waits for it. Safe to call twice.
func (s *outageS3) kill() {
	if s.exited == nil {
		return
	}
	select {
	case <-s.exited:
		return
	default:
	}
	_ = syscall.Kill(s.pid, syscall.SIGKILL)
	<-s.exited
}

// store is a blob store on the server's bucket.
func (s *outageS3) store(t *testing.T) blobstore.Store {
	t.Helper()
	store, err := blobstore.NewS3(blobstore.S3Config{Endpoint: "http://" + s.addr, Bucket: outageS3Bucket,
		Region: outageS3Region, AccessKey: outageS3AccessKey, SecretKey: outageS3SecretKey})
	require.NoError(t, err)
	return store
}

// versitygwPath looks where `make tools` and `go install` put versitygw.
func versitygwPath() string {
	if p, err := exec.LookPath("versitygw"); err == nil {
		return p
	}
	var dirs []string
	if gobin := os.Getenv("GOBIN"); gobin != "" {
		dirs = append(dirs, gobin)
	}
	if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		for _, gopath := range filepath.SplitList(strings.TrimSpace(string(out))) {
			dirs = append(dirs, filepath.Join(gopath, "bin"))
		}
	}
	if home, err := os.UserHomeDir(); err == nil {
		dirs = append(dirs, filepath.Join(home, "go", "bin"))
	}
	for _, dir := range dirs {
		p := filepath.Join(dir, "versitygw")
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	return ""
}

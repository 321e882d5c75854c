package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/blobstore"
)

// Credentials of the S3 servers these tests start themselves.
const (
	s3AccessKey = "e2e-access"
	s3SecretKey = "e2e-secret-key-0123"
	s3Region    = "us-east-1"
)

// s3Server is a versitygw process of one test, which the test may kill and start
// again on the same port and data: the shared server of internal/testenv must stay
// up for the other tests.
type s3Server struct {
	t      *testing.T
	bin    string
	addr   string
	root   string
	bucket string
	n      int // starts so far, to name the logs

	pid    int
	exited chan struct{}
}

// startS3Server starts versitygw (posix backend) on a free port with a new bucket,
// keeping its objects under dataDir (default: a folder of the test). Without
// versitygw the test is skipped, or fails under CI=true.
func startS3Server(t *testing.T, dataDir string) *s3Server {
	t.Helper()
	bin := findVersitygw()
	if bin == "" {
		msg := "versitygw is not installed (make tools)"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	port, err := freePort()
	require.NoError(t, err)
	if dataDir == "" {
		dataDir = t.TempDir()
	}
	s := &s3Server{
		t:      t,
		bin:    bin,
		addr:   net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		root:   filepath.Join(dataDir, "data"),
		bucket: "cairn-e2e",
	}
	require.NoError(t, os.Mkdir(s.root, 0o700))
	s.start()
	t.Cleanup(s.kill)

	client, err := minio.New(s.addr, &minio.Options{Creds: credentials.NewStaticV4(s3AccessKey, s3SecretKey, ""), Region: s3Region})
	require.NoError(t, err)
	ctx, cancel := withTimeout(30 * time.Second)
	defer cancel()
	require.NoError(t, client.MakeBucket(ctx, s.bucket, minio.MakeBucketOptions{Region: s3Region}))
	return s
}

// start runs the server and waits until it answers.
func (s *s3Server) start() {
	s.t.Helper()
	s.n++
	logFile, err := os.Create(filepath.Join(filepath.Dir(s.root), fmt.Sprintf("versitygw-%d.log", s.n)))
	require.NoError(s.t, err)
	started := make(chan error, 1)
	exited := make(chan struct{})
	// As for cairn servers: a locked thread, so that the parent-death signal only
	// comes when the test binary dies.
	go func() {
		runtime.LockOSThread()
		defer logFile.Close()
		defer close(exited)
		cmd := exec.Command(s.bin, "--port", s.addr, "--access", s3AccessKey, "--secret", s3SecretKey,
			"--region", s3Region, "--quiet", "posix", s.root)
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
	// Wait until it answers HTTP (an anonymous request earns a 403: that is up).
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
func (s *s3Server) kill() {
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

// blobURL is the CAIRN_BLOBSTORE of the bucket; query adds parameters.
func (s *s3Server) blobURL(query url.Values) string {
	q := url.Values{"endpoint": {"http://" + s.addr}, "region": {s3Region}}
	for k, v := range query {
		q[k] = v
	}
	return "s3://" + s.bucket + "?" + q.Encode()
}

// env is the credentials of the server, for cairn processes.
func (s *s3Server) env() []string {
	return []string{"AWS_ACCESS_KEY_ID=" + s3AccessKey, "AWS_SECRET_ACCESS_KEY=" + s3SecretKey, "AWS_REGION=" + s3Region}
}

// store is a blob store on the bucket, for checks.
func (s *s3Server) store() blobstore.Store {
	s.t.Helper()
	store, err := blobstore.NewS3(blobstore.S3Config{Endpoint: "http://" + s.addr, Bucket: s.bucket, Region: s3Region,
		AccessKey: s3AccessKey, SecretKey: s3SecretKey})
	require.NoError(s.t, err)
	return store
}

// findVersitygw looks where `make tools` and `go install` put it.
func findVersitygw() string {
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

// requireBlob checks that the object a $blob reference names exists in store with
// the referenced size and that its bytes hash to the referenced digest: never a
// missing or partial object.
func requireBlob(t *testing.T, store blobstore.Store, ref blobstore.Ref) {
	t.Helper()
	key, err := ref.Key()
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rc, obj, err := store.Get(ctx, key, blobstore.GetOptions{})
	if errors.Is(err, blobstore.ErrNotFound) {
		t.Fatalf("the catalog references %s, which is not in the bucket", ref.Digest)
	}
	require.NoError(t, err)
	defer rc.Close()
	h := sha256.New()
	n, err := io.Copy(h, rc)
	require.NoError(t, err)
	require.Equal(t, ref.Size, obj.Size, "stored size of %s", ref.Digest)
	require.Equal(t, ref.Size, n, "bytes read of %s", ref.Digest)
	require.Equal(t, ref.Digest, "sha256:"+hex.EncodeToString(h.Sum(nil)), "content of %s", key)
}

// memoryDir returns a new folder on /dev/shm when that tmpfs has need bytes free and
// keeps extended attributes (versitygw's posix backend stores metadata in them), or
// else a folder of the test. It is removed when the test ends.
func memoryDir(t *testing.T, need uint64) string {
	t.Helper()
	var fs syscall.Statfs_t
	if err := syscall.Statfs("/dev/shm", &fs); err != nil || fs.Bavail*uint64(fs.Bsize) < need {
		t.Logf("/dev/shm is missing or too small: S3 objects go to disk")
		return t.TempDir()
	}
	dir, err := os.MkdirTemp("/dev/shm", "cairn-e2e-")
	if err != nil {
		return t.TempDir()
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := syscall.Setxattr(dir, "user.cairn-e2e", []byte("1"), 0); err != nil {
		t.Logf("/dev/shm keeps no extended attributes (%v): S3 objects go to disk", err)
		return t.TempDir()
	}
	return dir
}

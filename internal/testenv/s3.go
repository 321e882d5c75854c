package testenv

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/ory/dockertest/v3"
	"github.com/ory/dockertest/v3/docker"

	"github.com/cairnrun/cairn/blobstore"
)

// Environment variables that point the tests at an existing S3-compatible server.
const (
	// EnvS3Endpoint is the server's base URL, e.g. "http://127.0.0.1:9000". When
	// set, no server is started.
	EnvS3Endpoint = "CAIRN_TEST_S3_ENDPOINT"
	// EnvS3AccessKey is its access key; default "minioadmin".
	EnvS3AccessKey = "CAIRN_TEST_S3_ACCESS_KEY"
	// EnvS3SecretKey is its secret key; default "minioadmin".
	EnvS3SecretKey = "CAIRN_TEST_S3_SECRET_KEY"
	// EnvS3Region is its region; default "us-east-1".
	EnvS3Region = "CAIRN_TEST_S3_REGION"
)

const (
	s3DefaultKey    = "minioadmin"
	s3DefaultRegion = "us-east-1"
	// Root credentials of the versitygw and MinIO servers the harness starts.
	s3LocalAccessKey = "cairntest"
	s3LocalSecretKey = "cairntest-secret-key"
	// s3MinioRepository and s3MinioTag pin the MinIO image of the Docker fallback.
	s3MinioRepository = "minio/minio"
	s3MinioTag        = "RELEASE.2025-04-22T22-12-26Z"
	// s3ContainerExpiry is how long Docker keeps the MinIO container: there is
	// no hook at the end of a test binary to remove it sooner.
	s3ContainerExpiry = 30 * 60 // seconds
	// s3StartTimeout bounds how long a started server may take to answer.
	s3StartTimeout = 60 * time.Second
	// s3TempDirPrefix names the versitygw data directories; the pid lets a later
	// run remove the directories of test binaries that died.
	s3TempDirPrefix = "cairn-versitygw-"
	s3InstallHint   = "no S3-compatible server for the tests: install versitygw (`make tools`, or " +
		"`go install github.com/versity/versitygw/cmd/versitygw@v1.8.0`), start Docker, or set " +
		EnvS3Endpoint + " (with " + EnvS3AccessKey + " and " + EnvS3SecretKey + ")"
)

// S3Server is an S3-compatible server the tests can use, shared by every test
// of a test binary. Give each test its own bucket (S3Bucket, Blobs).
type S3Server struct {
	// Endpoint is the base URL, "http://127.0.0.1:<port>".
	Endpoint string
	// AccessKey and SecretKey are root credentials.
	AccessKey string
	SecretKey string
	// Region is the server's region.
	Region string
	// Source says where the server comes from: "env", "versitygw" or "docker".
	Source string
}

// Config returns the blob store configuration of bucket on the server.
func (s S3Server) Config(bucket string) blobstore.S3Config {
	return blobstore.S3Config{
		Endpoint:  s.Endpoint,
		Bucket:    bucket,
		Region:    s.Region,
		AccessKey: s.AccessKey,
		SecretKey: s.SecretKey,
	}
}

// URL returns the CAIRN_BLOBSTORE URL of bucket on the server; the credentials
// go in the environment (Env).
func (s S3Server) URL(bucket string) string {
	q := url.Values{"endpoint": {s.Endpoint}, "region": {s.Region}}
	return "s3://" + bucket + "?" + q.Encode()
}

// Env returns the AWS_* variables that carry the server's credentials, in
// os/exec's "KEY=value" form, for a cairn process started by a test.
func (s S3Server) Env() []string {
	return []string{
		"AWS_ACCESS_KEY_ID=" + s.AccessKey,
		"AWS_SECRET_ACCESS_KEY=" + s.SecretKey,
		"AWS_REGION=" + s.Region,
	}
}

func (s S3Server) client() (*minio.Client, error) {
	u, err := url.Parse(s.Endpoint)
	if err != nil {
		return nil, fmt.Errorf("s3 endpoint: %w", err)
	}
	return minio.New(u.Host, &minio.Options{
		Creds:  credentials.NewStaticV4(s.AccessKey, s.SecretKey, ""),
		Secure: u.Scheme == "https",
		Region: s.Region,
	})
}

// s3Shared caches the server of this test binary: the one package-level
// mutable state of the harness, since without TestMain there is no other place
// to keep it.
var s3Shared struct {
	once        sync.Once
	server      S3Server
	err         error  // a server was found but failed to start
	unavailable string // no server could be found
}

// S3Endpoint returns the S3-compatible server of the test binary, starting it
// on first use. In order: the server named by CAIRN_TEST_S3_ENDPOINT; a
// versitygw process (from PATH, $GOBIN or $(go env GOPATH)/bin) on a temporary
// directory and a free port, killed when the test binary exits; a MinIO
// container when a Docker engine answers. Without any of them it skips the test,
// or fails it when CI=true. It fails the test if a server cannot start.
func S3Endpoint(t testing.TB) S3Server {
	t.Helper()
	s3Shared.once.Do(func() {
		s3Shared.server, s3Shared.unavailable, s3Shared.err = s3Start()
	})
	switch {
	case s3Shared.err != nil:
		t.Fatalf("testenv: %v", s3Shared.err)
	case s3Shared.unavailable != "":
		unavailable(t, s3Shared.unavailable)
	}
	return s3Shared.server
}

// S3Bucket creates a bucket with a fresh random name on the test binary's
// server (see S3Endpoint) and returns the server and the bucket's name. The
// bucket is emptied and removed when the test ends, best effort.
func S3Bucket(t testing.TB) (S3Server, string) {
	t.Helper()
	srv := S3Endpoint(t)
	client, err := srv.client()
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatalf("testenv: bucket name: %v", err)
	}
	bucket := "cairn-test-" + hex.EncodeToString(b[:])

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := client.MakeBucket(ctx, bucket, minio.MakeBucketOptions{Region: srv.Region}); err != nil {
		t.Fatalf("testenv: create bucket %s on %s (%s): %v", bucket, srv.Endpoint, srv.Source, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := s3RemoveBucket(ctx, client, bucket); err != nil {
			t.Logf("testenv: remove bucket %s: %v", bucket, err)
		}
	})
	return srv, bucket
}

// Blobs returns an S3Store on a fresh bucket of the test binary's server (see
// S3Bucket), removed when the test ends.
func Blobs(t testing.TB) blobstore.Store {
	t.Helper()
	srv, bucket := S3Bucket(t)
	s, err := blobstore.NewS3(srv.Config(bucket))
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return s
}

// s3RemoveBucket removes every object and incomplete upload of bucket, then
// the bucket.
func s3RemoveBucket(ctx context.Context, client *minio.Client, bucket string) error {
	objects := client.ListObjects(ctx, bucket, minio.ListObjectsOptions{Recursive: true})
	var errs []error
	for rerr := range client.RemoveObjects(ctx, bucket, objects, minio.RemoveObjectsOptions{}) {
		errs = append(errs, fmt.Errorf("remove %s: %w", rerr.ObjectName, rerr.Err))
	}
	for upload := range client.ListIncompleteUploads(ctx, bucket, "", true) {
		if upload.Err != nil {
			errs = append(errs, fmt.Errorf("list uploads: %w", upload.Err))
			break
		}
		if err := client.RemoveIncompleteUpload(ctx, bucket, upload.Key); err != nil {
			errs = append(errs, fmt.Errorf("abort upload of %s: %w", upload.Key, err))
		}
	}
	if err := client.RemoveBucket(ctx, bucket); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// s3Start finds or starts the server. unavailable is set when there is none
// to be had; err when one was found and failed.
func s3Start() (srv S3Server, unavailable string, err error) {
	if endpoint := os.Getenv(EnvS3Endpoint); endpoint != "" {
		srv := S3Server{
			Endpoint:  strings.TrimSuffix(endpoint, "/"),
			AccessKey: s3Getenv(EnvS3AccessKey, s3DefaultKey),
			SecretKey: s3Getenv(EnvS3SecretKey, s3DefaultKey),
			Region:    s3Getenv(EnvS3Region, s3DefaultRegion),
			Source:    "env",
		}
		if err := s3WaitReady(srv.Endpoint+"/", 10*time.Second, nil); err != nil {
			return S3Server{}, "", fmt.Errorf("%s=%s: %w", EnvS3Endpoint, endpoint, err)
		}
		return srv, "", nil
	}
	if bin := s3FindVersitygw(); bin != "" {
		srv, err := s3StartVersitygw(bin)
		return srv, "", err
	}
	srv, found, err := s3StartMinioContainer()
	if !found {
		return S3Server{}, s3InstallHint, nil
	}
	return srv, "", err
}

func s3Getenv(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// s3FindVersitygw returns the path of the versitygw binary, or "".
func s3FindVersitygw() string { return findGoTool("versitygw") }

// s3StartVersitygw runs versitygw with the posix backend on a new temporary
// directory and a free port of 127.0.0.1, and waits until it answers. The
// process gets SIGKILL when the test binary exits (Linux), and its directory
// is removed by a later run once this binary is gone.
func s3StartVersitygw(bin string) (S3Server, error) {
	s3RemoveStaleDirs()
	dir, err := os.MkdirTemp("", s3TempDirPrefix+strconv.Itoa(os.Getpid())+"-")
	if err != nil {
		return S3Server{}, fmt.Errorf("versitygw: %w", err)
	}
	root := filepath.Join(dir, "data")
	if err := os.Mkdir(root, 0o700); err != nil {
		return S3Server{}, fmt.Errorf("versitygw: %w", err)
	}

	// Another process may take the free port between our probe and
	// versitygw's bind: try a few ports.
	var lastErr error
	for attempt := 1; attempt <= 3; attempt++ {
		addr, err := s3FreeAddr()
		if err != nil {
			return S3Server{}, fmt.Errorf("versitygw: %w", err)
		}
		logPath := filepath.Join(dir, fmt.Sprintf("versitygw-%d.log", attempt))
		exited, err := s3RunVersitygw(bin, addr, root, logPath)
		if err != nil {
			return S3Server{}, err
		}
		endpoint := "http://" + addr
		if err := s3WaitReady(endpoint+"/", s3StartTimeout, exited); err != nil {
			logText, _ := os.ReadFile(logPath)
			lastErr = fmt.Errorf("versitygw on %s: %w; its output:\n%s", addr, err, bytes.TrimSpace(logText))
			continue
		}
		return S3Server{
			Endpoint:  endpoint,
			AccessKey: s3LocalAccessKey,
			SecretKey: s3LocalSecretKey,
			Region:    s3DefaultRegion,
			Source:    "versitygw",
		}, nil
	}
	return S3Server{}, lastErr
}

// s3RunVersitygw starts versitygw from a goroutine locked to its OS thread for
// the process's whole life: Linux delivers the parent-death signal when the
// thread that started the child exits, not the process, so the thread must
// outlive the child. exited receives the process's end.
func s3RunVersitygw(bin, addr, root, logPath string) (exited <-chan error, err error) {
	_, exited, err = s3RunVersitygwProcess(bin, addr, root, logPath)
	return exited, err
}

// s3RunVersitygwProcess is s3RunVersitygw that also returns the process, for a
// test that kills it (S3Process).
func s3RunVersitygwProcess(bin, addr, root, logPath string) (proc *os.Process, exited <-chan error, err error) {
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, nil, fmt.Errorf("versitygw: %w", err)
	}
	started := make(chan *os.Process, 1)
	startErr := make(chan error, 1)
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		defer logFile.Close()
		cmd := exec.Command(bin,
			"--port", addr,
			"--access", s3LocalAccessKey,
			"--secret", s3LocalSecretKey,
			"--region", s3DefaultRegion,
			"--quiet",
			"posix", root)
		cmd.Stdout = logFile
		cmd.Stderr = logFile
		cmd.SysProcAttr = s3SysProcAttr()
		if err := cmd.Start(); err != nil {
			startErr <- fmt.Errorf("start versitygw: %w", err)
			return
		}
		started <- cmd.Process
		done <- cmd.Wait()
	}()
	select {
	case err := <-startErr:
		return nil, nil, err
	case proc := <-started:
		return proc, done, nil
	}
}

// s3FreeAddr returns "127.0.0.1:<port>" of a port free a moment ago.
func s3FreeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free port: %w", err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		return "", fmt.Errorf("find a free port: %w", err)
	}
	return addr, nil
}

// s3WaitReady polls url until the server sends any HTTP answer (an anonymous
// request earns a 403: that is ready), the process exits, or timeout passes.
func s3WaitReady(url string, timeout time.Duration, exited <-chan error) error {
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		resp, err := client.Get(url)
		if err == nil {
			_ = resp.Body.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no answer after %s: %w", timeout, err)
		}
		select {
		case werr := <-exited:
			return fmt.Errorf("exited before answering: %v", werr)
		case <-tick.C:
		}
	}
}

// s3RemoveStaleDirs removes the versitygw directories of test binaries that
// are no longer running.
func s3RemoveStaleDirs() {
	matches, _ := filepath.Glob(filepath.Join(os.TempDir(), s3TempDirPrefix+"*"))
	for _, dir := range matches {
		pidText, _, ok := strings.Cut(strings.TrimPrefix(filepath.Base(dir), s3TempDirPrefix), "-")
		if !ok {
			continue
		}
		pid, err := strconv.Atoi(pidText)
		if err != nil || pid == os.Getpid() || s3ProcessAlive(pid) {
			continue
		}
		_ = os.RemoveAll(dir) // best effort
	}
}

// s3StartMinioContainer runs MinIO in Docker. found is false when no Docker
// engine answers.
func s3StartMinioContainer() (srv S3Server, found bool, err error) {
	pool, err := dockertest.NewPool("")
	if err != nil {
		return S3Server{}, false, nil
	}
	if err := pool.Client.Ping(); err != nil {
		return S3Server{}, false, nil
	}
	res, err := pool.RunWithOptions(&dockertest.RunOptions{
		Repository: s3MinioRepository,
		Tag:        s3MinioTag,
		Cmd:        []string{"server", "/data"},
		Env:        []string{"MINIO_ROOT_USER=" + s3LocalAccessKey, "MINIO_ROOT_PASSWORD=" + s3LocalSecretKey},
		Labels:     map[string]string{"cairn.testenv": "s3"},
	}, func(hc *docker.HostConfig) {
		hc.AutoRemove = true
		hc.RestartPolicy = docker.RestartPolicy{Name: "no"}
	})
	if err != nil {
		return S3Server{}, true, fmt.Errorf("start minio container: %w", err)
	}
	_ = res.Expire(s3ContainerExpiry) // best effort: the container removes itself then

	host := "127.0.0.1"
	if u, err := url.Parse(os.Getenv("DOCKER_HOST")); err == nil && u.Scheme == "tcp" && u.Hostname() != "" {
		host = u.Hostname()
	}
	endpoint := "http://" + net.JoinHostPort(host, res.GetPort("9000/tcp"))
	if err := s3WaitReady(endpoint+"/minio/health/live", s3StartTimeout, nil); err != nil {
		_ = pool.Purge(res)
		return S3Server{}, true, fmt.Errorf("minio container at %s: %w", endpoint, err)
	}
	return S3Server{
		Endpoint:  endpoint,
		AccessKey: s3LocalAccessKey,
		SecretKey: s3LocalSecretKey,
		Region:    s3DefaultRegion,
		Source:    "docker",
	}, true, nil
}

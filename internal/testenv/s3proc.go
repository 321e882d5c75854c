package testenv

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/blobstore"
)

// S3Process is a versitygw process of one test, with one bucket, which the test
// may kill and start again on the same port and data to stage an object-store
// outage: the shared server of S3Endpoint must stay up for the other tests.
// Its methods must be called from the test's goroutine.
type S3Process struct {
	// S3Server is the process's endpoint and credentials.
	S3Server
	// Bucket is the bucket StartS3Process created.
	Bucket string

	t      testing.TB
	bin    string
	addr   string
	root   string
	n      int // starts so far, to name the logs
	proc   *os.Process
	exited <-chan error
	dead   bool
}

// StartS3Process starts versitygw (posix backend) on a free port with a new
// bucket, keeping its objects under dataDir (default: a folder of the test), and
// kills it when the test ends. Without versitygw it skips the test, or fails it
// when CI=true.
func StartS3Process(t testing.TB, dataDir string) *S3Process {
	t.Helper()
	bin := s3FindVersitygw()
	if bin == "" {
		unavailable(t, "versitygw is not installed (make tools)")
	}
	addr, err := s3FreeAddr()
	require.NoError(t, err)
	if dataDir == "" {
		dataDir = t.TempDir()
	}
	p := &S3Process{
		S3Server: S3Server{Endpoint: "http://" + addr, AccessKey: s3LocalAccessKey, SecretKey: s3LocalSecretKey,
			Region: s3DefaultRegion, Source: "versitygw"},
		Bucket: "cairn-test",
		t:      t,
		bin:    bin,
		addr:   addr,
		root:   filepath.Join(dataDir, "data"),
	}
	require.NoError(t, os.Mkdir(p.root, 0o700))
	p.Start()
	t.Cleanup(p.Kill)

	client, err := p.client()
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, client.MakeBucket(ctx, p.Bucket, minio.MakeBucketOptions{Region: p.Region}))
	return p
}

// Start runs the server (again, after Kill) and waits until it answers.
func (p *S3Process) Start() {
	p.t.Helper()
	p.n++
	logPath := filepath.Join(filepath.Dir(p.root), fmt.Sprintf("versitygw-%d.log", p.n))
	proc, exited, err := s3RunVersitygwProcess(p.bin, p.addr, p.root, logPath)
	require.NoError(p.t, err)
	p.proc, p.exited, p.dead = proc, exited, false
	if err := s3WaitReady(p.Endpoint+"/", s3StartTimeout, exited); err != nil {
		logText, _ := os.ReadFile(logPath)
		p.Kill()
		p.t.Fatalf("versitygw on %s: %v; its output:\n%s", p.addr, err, logText)
	}
}

// Kill stops the server with SIGKILL and waits for it to end. Safe to call twice.
func (p *S3Process) Kill() {
	if p.proc == nil || p.dead {
		return
	}
	_ = p.proc.Kill()
	<-p.exited
	p.dead = true
}

// BlobURL is the CAIRN_BLOBSTORE of the bucket; query adds parameters (such as
// part_size). The credentials go in the environment (Env).
func (p *S3Process) BlobURL(query url.Values) string {
	q := url.Values{"endpoint": {p.Endpoint}, "region": {p.Region}}
	for k, v := range query {
		q[k] = v
	}
	return "s3://" + p.Bucket + "?" + q.Encode()
}

// Store is a blob store on the bucket, for the test's own reads and writes.
func (p *S3Process) Store() blobstore.Store {
	p.t.Helper()
	store, err := blobstore.NewS3(p.Config(p.Bucket))
	require.NoError(p.t, err)
	return store
}

// Package s3server starts a versitygw S3 gateway (posix backend) for the benchmark,
// found where `make tools` installs it, as internal/testenv does for the tests.
package s3server

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/cairnrun/cairn/bench/internal/proc"
)

// Root credentials and region of the gateway.
const (
	AccessKey = "cairnbench"
	SecretKey = "cairnbench-secret-key"
	Region    = "us-east-1"
)

// Server is a running gateway.
type Server struct {
	Endpoint string // http://127.0.0.1:<port>
	Bin      string
	Version  string
	child    *proc.Child
}

// Find returns the versitygw binary: PATH, $GOBIN, then $(go env GOPATH)/bin.
func Find() (string, error) {
	var dirs []string
	if gobin := os.Getenv("GOBIN"); gobin != "" {
		dirs = append(dirs, gobin)
	}
	if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		for _, p := range filepath.SplitList(strings.TrimSpace(string(out))) {
			dirs = append(dirs, filepath.Join(p, "bin"))
		}
	}
	if p := proc.LookPath("versitygw", dirs); p != "" {
		return p, nil
	}
	return "", fmt.Errorf("versitygw not found in PATH or %s: run `make tools`", strings.Join(dirs, ", "))
}

// Start runs versitygw on dir (posix backend) and creates bucket.
func Start(ctx context.Context, dir, bucket string) (*Server, error) {
	bin, err := Find()
	if err != nil {
		return nil, err
	}
	root := filepath.Join(dir, "data")
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, err
	}
	addr, err := proc.FreeAddr()
	if err != nil {
		return nil, err
	}
	logPath := filepath.Join(dir, "versitygw.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	cmd := exec.Command(bin, "--port", addr, "--access", AccessKey, "--secret", SecretKey,
		"--region", Region, "--quiet", "posix", root)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	child, err := proc.Start(cmd, syscall.SIGKILL)
	if err != nil {
		return nil, err
	}
	s := &Server{Endpoint: "http://" + addr, Bin: bin, Version: moduleVersion(bin), child: child}
	hc := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := hc.Get(s.Endpoint + "/")
		if err == nil {
			resp.Body.Close()
			break
		}
		if child.Exited() || time.Now().After(deadline) {
			child.Kill()
			return nil, fmt.Errorf("versitygw did not answer: %v; log:\n%s", err, proc.TailFile(logPath, 4096))
		}
		time.Sleep(50 * time.Millisecond)
	}
	mc, err := s.Client()
	if err != nil {
		s.Stop()
		return nil, err
	}
	if err := mc.MakeBucket(ctx, bucket, minio.MakeBucketOptions{Region: Region}); err != nil {
		s.Stop()
		return nil, fmt.Errorf("create bucket %s: %w", bucket, err)
	}
	return s, nil
}

// Client returns a minio-go client of the gateway.
func (s *Server) Client() (*minio.Client, error) {
	u, err := url.Parse(s.Endpoint)
	if err != nil {
		return nil, err
	}
	return minio.New(u.Host, &minio.Options{Creds: credentials.NewStaticV4(AccessKey, SecretKey, ""), Region: Region})
}

// BlobURL returns the CAIRN_BLOBSTORE URL of bucket.
func (s *Server) BlobURL(bucket string) string {
	q := url.Values{"endpoint": {s.Endpoint}, "region": {Region}}
	return "s3://" + bucket + "?" + q.Encode()
}

// Env returns the AWS_* variables carrying the credentials.
func (s *Server) Env() []string {
	return []string{"AWS_ACCESS_KEY_ID=" + AccessKey, "AWS_SECRET_ACCESS_KEY=" + SecretKey, "AWS_REGION=" + Region}
}

// CPUSeconds returns the processor time the gateway has used so far.
func (s *Server) CPUSeconds() float64 {
	c, err := proc.ProcessCPU(s.child.Pid)
	if err != nil {
		return 0
	}
	return c.Self
}

// Pid returns the gateway's process id.
func (s *Server) Pid() int { return s.child.Pid }

// Stop ends the gateway.
func (s *Server) Stop() { s.child.Stop(syscall.SIGTERM, 5*time.Second) }

// moduleVersion reads the main module's version from the binary's build information
// (`go version -m`): versitygw installed with `go install …@v1.8.0` reports "git"
// from --version.
func moduleVersion(bin string) string {
	out, err := exec.Command("go", "version", "-m", bin).Output()
	if err != nil {
		return "unknown"
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && f[0] == "mod" {
			return f[2]
		}
	}
	return "unknown"
}

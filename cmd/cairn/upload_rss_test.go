package main

import (
	"archive/tar"
	"compress/gzip"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/internal/testenv"
)

// TestUploadLargeBundleFlatMemory uploads a 512 MiB bundle (incompressible content,
// so the archive is 512 MiB too) to a real `cairn serve` and checks the server's peak
// RSS stays under 150 MiB: the body is streamed, never buffered whole.
func TestUploadLargeBundleFlatMemory(t *testing.T) {
	// Not parallel: it measures memory and moves a lot of bytes.
	const size = 512 << 20
	url := testenv.DatabaseURL(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(testenv.CairnBinary(t), "serve", "--no-dispatcher")
	cmd.Env = append(os.Environ(),
		"CAIRN_DATABASE_URL="+url,
		"CAIRN_BLOBSTORE=file://"+t.TempDir(),
		"CAIRN_LISTEN="+addr,
		"CAIRN_TOKENS=operator:"+operatorTokenForTest,
		"TMPDIR="+t.TempDir(),
	)
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("serve stderr:\n%s", stderr.String())
		}
	})
	// Waiting for the server to answer /readyz.
	require.Eventually(t, func() bool {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 30*time.Second, 50*time.Millisecond)

	pr, pw := io.Pipe()
	go func() {
		gw, _ := gzip.NewWriterLevel(pw, gzip.NoCompression)
		tw := tar.NewWriter(gw)
		err := tw.WriteHeader(&tar.Header{Name: "cairn.yaml", Mode: 0o644, Size: int64(len(bigManifest))})
		if err == nil {
			_, err = tw.Write([]byte(bigManifest))
		}
		if err == nil {
			err = tw.WriteHeader(&tar.Header{Name: "data.bin", Mode: 0o644, Size: size})
		}
		if err == nil {
			_, err = io.CopyN(tw, rand.NewChaCha8([32]byte{1}), size)
		}
		if err == nil {
			err = tw.Close()
		}
		if err == nil {
			err = gw.Close()
		}
		pw.CloseWithError(err)
	}()
	start := time.Now()
	req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/bundles", pr)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+operatorTokenForTest)
	req.Header.Set("Content-Type", "application/gzip")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusCreated, resp.StatusCode, "%s", body)
	peak := peakRSS(t, cmd.Process.Pid)
	t.Logf("uploaded %d MiB in %s; server peak RSS %.1f MiB", size>>20, time.Since(start).Round(time.Millisecond), float64(peak)/(1<<20))
	require.Less(t, peak, int64(150<<20), "server peak RSS")
}

const operatorTokenForTest = "operator-token-for-tests-0123456789"

const bigManifest = "name: big\nsteps:\n  - {key: a, builtin: noop}\n"

// peakRSS reads a process's peak resident set size (VmHWM) in bytes.
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	require.NoError(t, err)
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			require.NoError(t, err)
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in /proc status")
	return 0
}

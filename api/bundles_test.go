package api_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/cairnrun/cairn/api"
	"github.com/cairnrun/cairn/blobstore"
	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/internal/testenv"
)

const operatorToken = "operator-token-0123456789"

type testBundle struct {
	store   *catalog.Store
	blobDir string
	url     string
}

// testingT is what helpers called from an EventuallyWithT condition need: a
// *testing.T, or the condition's *assert.CollectT.
type testingT interface {
	require.TestingT
	Helper()
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	store := catalog.New(testenv.DB(t), nil)
	blobDir := t.TempDir()
	blobs, err := blobstore.NewFile(blobDir, nil)
	require.NoError(t, err)
	tokens, err := api.ParseTokens("operator:" + operatorToken)
	require.NoError(t, err)
	srv := api.New(store, blobs, &api.Config{Tokens: tokens, TempDir: t.TempDir()})
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	return &testBundle{store: store, blobDir: blobDir, url: hs.URL}
}

func (tb *testBundle) upload(t *testing.T, body io.Reader) (int, map[string]any) {
	t.Helper()
	status, out, err := tb.tryUpload(body)
	require.NoError(t, err)
	return status, out
}

// tryUpload is upload for another goroutine than the test's: it returns what went
// wrong.
func (tb *testBundle) tryUpload(body io.Reader) (int, map[string]any, error) {
	req, err := http.NewRequest(http.MethodPost, tb.url+"/v1/bundles", body)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+operatorToken)
	req.Header.Set("Content-Type", "application/gzip")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return 0, nil, fmt.Errorf("status %d: %w", resp.StatusCode, err)
	}
	return resp.StatusCode, out, nil
}

// blobFiles lists the objects in the file blob store (temporary files excluded).
func (tb *testBundle) blobFiles(t *testing.T) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(tb.blobDir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == ".tmp" {
			return filepath.SkipDir
		}
		if !d.IsDir() {
			out = append(out, p)
		}
		return nil
	})
	require.NoError(t, err)
	return out
}

type entry struct {
	name, body string
	typ        byte
	mode       int64
	size       int64 // declared size when body is streamed from zeros
	link       string
}

// archive writes a tar.gz of entries; an entry with size > 0 and no body streams
// that many zero bytes (a decompression bomb compresses to almost nothing).
func archive(t *testing.T, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	gw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gw)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: e.mode, Linkname: e.link, Size: int64(len(e.body))}
		if h.Typeflag == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if e.size > 0 {
			h.Size = e.size
		}
		if h.Typeflag != tar.TypeReg {
			h.Size = 0
		}
		require.NoError(t, tw.WriteHeader(h))
		if e.size > 0 {
			_, err := io.CopyN(tw, zeros{}, e.size)
			require.NoError(t, err)
		} else if h.Size > 0 {
			_, err := tw.Write([]byte(e.body))
			require.NoError(t, err)
		}
	}
	require.NoError(t, tw.Close())
	require.NoError(t, gw.Close())
	return buf.Bytes()
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

const manifest = "name: wf\nsteps:\n  - {key: a, builtin: noop}\n"

func TestUploadRejectsHostileArchives(t *testing.T) {
	t.Parallel()
	seeds := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join("..", "bundle", "testdata", "archives", name))
		require.NoError(t, err)
		return b
	}
	many := []entry{{name: "cairn.yaml", body: manifest}}
	for i := 0; i < 10_001; i++ {
		many = append(many, entry{name: fmt.Sprintf("f/%05d", i), body: "x"})
	}
	tests := []struct {
		name       string
		body       []byte
		wantStatus int
		wantDetail string // the entry or reason named in the problem
	}{
		{name: "absolute path", body: seeds("bad-absolute.tar.gz"), wantStatus: 400, wantDetail: "/"},
		{name: "dot dot", body: seeds("bad-dotdot.tar.gz"), wantStatus: 400, wantDetail: ".."},
		{name: "symlink leaving the tree", body: seeds("bad-symlink-escape.tar.gz"), wantStatus: 400, wantDetail: "entry"},
		{name: "hard link leaving the tree", body: seeds("bad-hardlink-outside.tar.gz"), wantStatus: 400, wantDetail: "entry"},
		{name: "device", body: seeds("bad-device.tar.gz"), wantStatus: 400, wantDetail: "entry"},
		{name: "no manifest", body: seeds("bad-no-manifest.tar.gz"), wantStatus: 400, wantDetail: "cairn.yaml"},
		{name: "evil symlink inline", body: archive(t, entry{name: "cairn.yaml", body: manifest}, entry{name: "etc", typ: tar.TypeSymlink, link: "../../../etc"}), wantStatus: 400, wantDetail: `entry "etc"`},
		{name: "not gzip", body: []byte("this is not an archive"), wantStatus: 400, wantDetail: "gzip"},
		{name: "not tar", body: func() []byte {
			var b bytes.Buffer
			gw := gzip.NewWriter(&b)
			_, _ = gw.Write(bytes.Repeat([]byte("garbage "), 200))
			_ = gw.Close()
			return b.Bytes()
		}(), wantStatus: 400, wantDetail: "tar"},
		{name: "too many entries", body: archive(t, many...), wantStatus: 413, wantDetail: "entries"},
		{name: "manifest too large", body: archive(t, entry{name: "cairn.yaml", size: 2 << 20}), wantStatus: 413, wantDetail: "cairn.yaml"},
		// 2 GiB of zeros declared in one entry: a few MiB compressed, stopped at the
		// per-file limit long before its end.
		{name: "decompression bomb", body: archive(t, entry{name: "cairn.yaml", body: manifest}, entry{name: "bomb", size: 600 << 20}), wantStatus: 413, wantDetail: `entry "bomb"`},
		{name: "bad manifest", body: archive(t, entry{name: "cairn.yaml", body: "name: wf\nsteps:\n  - {key: a, builtin: noop, needs: [zz]}\n"}), wantStatus: 400, wantDetail: "zz"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tb := setup(t)
			status, problem := tb.upload(t, bytes.NewReader(tt.body))
			require.Equal(t, tt.wantStatus, status, "%v", problem)
			require.Contains(t, problem["detail"], tt.wantDetail, "%v", problem)
			require.NotEmpty(t, problem["code"])
			// Nothing was stored: no object, no bundle row, no workflow.
			require.Empty(t, tb.blobFiles(t))
			var n int
			require.NoError(t, tb.store.DB().Get(&n, `SELECT (SELECT count(*) FROM bundles) + (SELECT count(*) FROM workflows)`))
			require.Zero(t, n)
		})
	}
}

func TestConcurrentUploadsGetConsecutiveVersions(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	const n = 20
	versions := make([]float64, n)
	var g errgroup.Group
	for i := range n {
		body := archive(t, entry{name: "cairn.yaml", body: fmt.Sprintf("name: wf\ndescription: bundle %d\nsteps:\n  - {key: a, builtin: noop}\n", i)})
		g.Go(func() error {
			status, out, err := tb.tryUpload(bytes.NewReader(body))
			if err != nil {
				return err
			}
			v, ok := out["version"].(float64)
			if status != http.StatusCreated || !ok {
				return fmt.Errorf("bundle %d: status %d, %v", i, status, out)
			}
			versions[i] = v
			return nil
		})
	}
	require.NoError(t, g.Wait())
	seen := map[int]bool{}
	for _, v := range versions {
		seen[int(v)] = true
	}
	for v := 1; v <= n; v++ {
		require.True(t, seen[v], "version %d missing from %v", v, seen)
	}
	require.Len(t, seen, n)
}

func TestUploadSameBundleTwice(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	body := archive(t, entry{name: "cairn.yaml", body: manifest}, entry{name: "bin/x", body: "#!/bin/sh\n", mode: 0o755})
	status, first := tb.upload(t, bytes.NewReader(body))
	require.Equal(t, http.StatusCreated, status, "%v", first)
	// The same tree in another entry order, with other owners and times: same digest.
	reordered := archive(t, entry{name: "bin/x", body: "#!/bin/sh\n", mode: 0o755}, entry{name: "cairn.yaml", body: manifest})
	status, second := tb.upload(t, bytes.NewReader(reordered))
	require.Equal(t, http.StatusOK, status, "%v", second)
	require.Equal(t, first["digest"], second["digest"])
	require.Equal(t, first["version"], second["version"])

	// Download returns the canonical archive.
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, tb.url+"/v1/bundles/"+first["digest"].(string), nil)
	req.Header.Set("Authorization", "Bearer "+operatorToken)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "application/gzip", resp.Header.Get("Content-Type"))
	got, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.EqualValues(t, first["size"], len(got))
	require.True(t, strings.HasPrefix(string(got), "\x1f\x8b"), "gzip magic")
}

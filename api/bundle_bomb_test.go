package api_test

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"
)

// gzipBomb returns a gzip-compressed tar whose second entry, "bomb", declares 4 GiB
// of zeros and carries them: cairn.yaml, then bomb's header and content, as gzip
// members (one stream to a gzip reader) of 1 MiB of zeros each. About 4 MiB.
func gzipBomb(t *testing.T) []byte {
	t.Helper()
	const chunk, size = 1 << 20, 4 << 30
	member := func(b []byte) []byte {
		var out bytes.Buffer
		gw, err := gzip.NewWriterLevel(&out, gzip.BestCompression)
		require.NoError(t, err)
		_, err = gw.Write(b)
		require.NoError(t, err)
		require.NoError(t, gw.Close())
		return out.Bytes()
	}
	var head bytes.Buffer
	tw := tar.NewWriter(&head)
	require.NoError(t, tw.WriteHeader(&tar.Header{Name: "cairn.yaml", Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(manifest))}))
	_, err := tw.Write([]byte(manifest))
	require.NoError(t, err)
	// The header is written at once; the content follows in the next members.
	require.NoError(t, tw.WriteHeader(&tar.Header{Name: "bomb", Typeflag: tar.TypeReg, Mode: 0o644, Size: size}))
	zeros := member(make([]byte, chunk))
	out := member(head.Bytes())
	for range size / chunk {
		out = append(out, zeros...)
	}
	return out
}

// rawUpload sends POST /v1/bundles over its own connection as a simple client does:
// the whole request first (headers, then body, if any), then it reads the answer.
// It returns the answer, or the error of writing the body or of reading the answer.
func rawUpload(t *testing.T, serverURL string, header string, body []byte) (*http.Response, map[string]any, error) {
	t.Helper()
	u, err := url.Parse(serverURL)
	require.NoError(t, err)
	conn, err := net.Dial("tcp", u.Host)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	_, err = fmt.Fprintf(conn, "POST /v1/bundles HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/gzip\r\n%s\r\n",
		u.Host, operatorToken, header)
	require.NoError(t, err)
	if _, err := conn.Write(body); err != nil {
		return nil, nil, fmt.Errorf("write the body: %w", err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return nil, nil, fmt.Errorf("read the answer: %w", err)
	}
	defer resp.Body.Close()
	var problem map[string]any
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, nil, fmt.Errorf("read the answer's body: %w", err)
	}
	if resp.StatusCode != http.StatusContinue {
		require.NoError(t, json.Unmarshal(b, &problem), "%s", b)
	}
	return resp, problem, nil
}

// TestUploadBombAnswerReachesTheClient: a gzip bomb whose tar header declares a
// 4 GiB entry is refused (413) at that header, and the answer reaches a client that
// writes its whole request before it reads: the server reads the rest of the
// refused body (up to a bound) instead of closing the connection on it, which reset
// it ("connection reset by peer") and lost the answer. Nothing is stored.
func TestUploadBombAnswerReachesTheClient(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	body := gzipBomb(t)
	resp, problem, err := rawUpload(t, tb.url, fmt.Sprintf("Content-Length: %d\r\n", len(body)), body)
	require.NoError(t, err)
	require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode, "%v", problem)
	require.Equal(t, "payload_too_large", problem["code"])
	require.Contains(t, problem["detail"], `entry "bomb"`)
	require.Contains(t, problem["detail"], "per-file limit")
	require.Empty(t, tb.blobFiles(t))

	// The same bomb sent chunked (no Content-Length): the same answer.
	var chunked bytes.Buffer
	cw := newChunkedWriter(&chunked)
	_, err = cw.Write(body)
	require.NoError(t, err)
	require.NoError(t, cw.Close())
	resp, problem, err = rawUpload(t, tb.url, "Transfer-Encoding: chunked\r\n", chunked.Bytes())
	require.NoError(t, err)
	require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode, "%v", problem)
	require.Contains(t, problem["detail"], `entry "bomb"`)
}

// TestUploadRefusedByContentLength: a body whose Content-Length is over the archive
// limit is refused (413) before a byte of it is read: a client that asks first
// (Expect: 100-continue, as curl does for large bodies) gets the 413 instead of
// "100 Continue", and sends nothing.
func TestUploadRefusedByContentLength(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	resp, problem, err := rawUpload(t, tb.url, fmt.Sprintf("Content-Length: %d\r\nExpect: 100-continue\r\n", 4<<30), nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode, "no 100 Continue: %v", problem)
	require.Equal(t, "payload_too_large", problem["code"])
	require.Contains(t, problem["detail"], "compressed archive is 4 GiB, over the 1088 MiB limit")
}

// chunkedWriter writes HTTP/1.1 chunked transfer coding, in chunks of at most 1 MiB.
type chunkedWriter struct{ w io.Writer }

func newChunkedWriter(w io.Writer) *chunkedWriter { return &chunkedWriter{w: w} }

func (c *chunkedWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		k := min(len(p), 1<<20)
		if _, err := fmt.Fprintf(c.w, "%x\r\n%s\r\n", k, p[:k]); err != nil {
			return n, err
		}
		n += k
		p = p[k:]
	}
	return n, nil
}

func (c *chunkedWriter) Close() error {
	_, err := io.WriteString(c.w, "0\r\n\r\n")
	return err
}

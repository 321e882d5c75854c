package cairn

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"time"
)

// Client calls a server's HTTP API with the admin token over keep-alive
// connections. It is safe for concurrent use.
type Client struct {
	base string
	hc   *http.Client
}

// NewClient returns a client of the server at base ("http://127.0.0.1:8080").
func NewClient(base string) *Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = 256
	tr.MaxIdleConnsPerHost = 256
	return &Client{base: base, hc: &http.Client{Transport: tr, Timeout: 2 * time.Minute}}
}

// Close drops idle connections.
func (c *Client) Close() { c.hc.CloseIdleConnections() }

// File is a file of a bundle.
type File struct {
	Body []byte
	Mode int64
}

// Deploy packs files (path → content; cairn.yaml among them) as a bundle, uploads
// it and returns the version it registered.
func (c *Client) Deploy(ctx context.Context, files map[string]File) (int, error) {
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		f := files[p]
		mode := f.Mode
		if mode == 0 {
			mode = 0o644
		}
		if err := tw.WriteHeader(&tar.Header{Name: p, Mode: mode, Size: int64(len(f.Body)), Typeflag: tar.TypeReg}); err != nil {
			return 0, err
		}
		if _, err := tw.Write(f.Body); err != nil {
			return 0, err
		}
	}
	if err := tw.Close(); err != nil {
		return 0, err
	}
	if err := gz.Close(); err != nil {
		return 0, err
	}
	var out struct {
		Version int `json:"version"`
	}
	if err := c.do(ctx, http.MethodPost, "/v1/bundles", "application/gzip", buf.Bytes(), &out); err != nil {
		return 0, fmt.Errorf("deploy: %w", err)
	}
	return out.Version, nil
}

// Run is what the benchmark reads of a run.
type Run struct {
	ID     string `json:"id"`
	Status string `json:"status"`
}

// StartRun starts a run of the latest version of workflow.
func (c *Client) StartRun(ctx context.Context, workflow string) (Run, error) {
	var r Run
	err := c.do(ctx, http.MethodPost, "/v1/workflows/"+workflow+"/runs", "application/json", []byte(`{"input":{}}`), &r)
	if err != nil {
		return r, fmt.Errorf("start run of %s: %w", workflow, err)
	}
	return r, nil
}

// EventAnswer is what the benchmark reads of POST /v1/events' answer.
type EventAnswer struct {
	EventID string            `json:"event_id"`
	Started []json.RawMessage `json:"started"`
	Resumed []json.RawMessage `json:"resumed"`
	Errors  []json.RawMessage `json:"errors"`
}

// SendEvent posts an event of name with data (JSON).
func (c *Client) SendEvent(ctx context.Context, name string, data []byte) (EventAnswer, error) {
	var a EventAnswer
	body, err := json.Marshal(map[string]any{"name": name, "data": json.RawMessage(data)})
	if err != nil {
		return a, err
	}
	if err := c.do(ctx, http.MethodPost, "/v1/events", "application/json", body, &a); err != nil {
		return a, fmt.Errorf("send event %s: %w", name, err)
	}
	return a, nil
}

// GetRun reads a run.
func (c *Client) GetRun(ctx context.Context, id string) (Run, error) {
	var r Run
	if err := c.do(ctx, http.MethodGet, "/v1/runs/"+id, "", nil, &r); err != nil {
		return r, fmt.Errorf("get run %s: %w", id, err)
	}
	return r, nil
}

// ListRuns reads a page of GET /v1/runs; query is the query string without its
// '?' (filters, limit, cursor). It returns the page's size and next_cursor.
func (c *Client) ListRuns(ctx context.Context, query string) (items int, next string, err error) {
	var page struct {
		Items      []json.RawMessage `json:"items"`
		NextCursor string            `json:"next_cursor"`
	}
	if err := c.do(ctx, http.MethodGet, "/v1/runs?"+query, "", nil, &page); err != nil {
		return 0, "", fmt.Errorf("list runs: %w", err)
	}
	return len(page.Items), page.NextCursor, nil
}

func (c *Client) do(ctx context.Context, method, path, contentType string, body []byte, out any) error {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+Token)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode >= 300 {
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(b))
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

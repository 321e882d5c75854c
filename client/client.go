package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// Client is a client of the Cairn API: the generated ClientWithResponses (every
// operation, as a raw *http.Response or a parsed response) sending a bearer token,
// whose non-2xx answers are returned as *Problem errors, never as responses.
//
// Streaming operations (UploadBundleWithBody, GetStepOutput, GetAttemptLog,
// StreamEvents, GetBundle) are the generated raw methods: the request body is any
// io.Reader and the response body is read as a stream by the caller, who closes it.
//
// A Client is safe for concurrent use.
type Client struct {
	*ClientWithResponses
}

// New returns a client of the Cairn API at server (for example
// http://127.0.0.1:8080) that sends token as its bearer credential on every request.
// An empty token sends none (enough for /healthz, /readyz and the OpenAPI document).
// opts are the generated options (WithHTTPClient, WithRequestEditorFn, ...); the
// default HTTP client is a plain http.Client without a timeout: bound calls with ctx.
//
// New fails when server is empty or not a URL.
func New(server, token string, opts ...ClientOption) (*Client, error) {
	if strings.TrimSpace(server) == "" {
		return nil, errors.New("new client: no server URL")
	}
	if token != "" {
		opts = append(opts, WithRequestEditorFn(bearer(token)))
	}
	c, err := NewClient(server, opts...)
	if err != nil {
		return nil, fmt.Errorf("new client: %w", err)
	}
	c.Client = problemDoer{next: c.Client}
	return &Client{ClientWithResponses: &ClientWithResponses{ClientInterface: c}}, nil
}

// bearer adds the Authorization header, unless the operation set its own (the
// lease token of PutCheckpoint). The token is never logged or echoed.
func bearer(token string) RequestEditorFn {
	return func(_ context.Context, req *http.Request) error {
		if req.Header.Get("Authorization") == "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		return nil
	}
}

// UploadOptions tune UploadBundleWithOptions. The zero value is what UploadBundle
// does.
type UploadOptions struct {
	// NoPromote leaves the workflow's alias latest where it is (?promote=false).
	// By default the server moves latest to the uploaded version.
	NoPromote bool
}

// UploadBundle uploads a bundle archive (gzip-compressed tar) read from body, which
// is streamed, never buffered whole, and moves the workflow's alias latest to its
// version. The result's Created is false when the same bundle was uploaded before
// (status 200: the existing version, which latest names again). Errors are *Problem
// for answers of the server (400 invalid bundle, 403 role too low, 413 too large).
func (c *Client) UploadBundle(ctx context.Context, body io.Reader) (*UploadResult, error) {
	return c.UploadBundleWithOptions(ctx, body, UploadOptions{})
}

// UploadBundleWithOptions is UploadBundle with options (NoPromote: deploy without
// moving latest).
func (c *Client) UploadBundleWithOptions(ctx context.Context, body io.Reader, opts UploadOptions) (*UploadResult, error) {
	params := &UploadBundleParams{}
	if opts.NoPromote {
		promote := false
		params.Promote = &promote
	}
	resp, err := c.UploadBundleWithBodyWithResponse(ctx, params, "application/gzip", body)
	if err != nil {
		return nil, fmt.Errorf("upload bundle: %w", err)
	}
	switch {
	case resp.JSON201 != nil:
		return resp.JSON201, nil
	case resp.JSON200 != nil:
		return resp.JSON200, nil
	}
	return decodeBody[UploadResult]("upload bundle", resp.HTTPResponse, resp.Body)
}

// CreateRun starts a run of the workflow name (status 202) and returns it.
// idempotencyKey, when not empty, makes the call safe to retry: the same key and
// request return the first run; another request under the same key is a 409 *Problem.
func (c *Client) CreateRun(ctx context.Context, name string, body StartRunBody, idempotencyKey string) (*Run, error) {
	params := &StartRunParams{}
	if idempotencyKey != "" {
		params.IdempotencyKey = &idempotencyKey
	}
	resp, err := c.StartRunWithResponse(ctx, name, params, body)
	if err != nil {
		return nil, fmt.Errorf("start run of %s: %w", name, err)
	}
	if resp.JSON202 != nil {
		return resp.JSON202, nil
	}
	return decodeBody[Run]("start run of "+name, resp.HTTPResponse, resp.Body)
}

// decodeBody decodes the JSON body of a 2xx response the generated parser left raw
// (a status the document does not list, or a content type it does not expect).
func decodeBody[T any](op string, resp *http.Response, body []byte) (*T, error) {
	var v T
	if err := json.Unmarshal(body, &v); err != nil {
		return nil, fmt.Errorf("%s: decode answer (status %d): %w", op, resp.StatusCode, err)
	}
	return &v, nil
}

// Error implements error: the status, the error class and what went wrong, with the
// individual problems with the input that the detail does not already name.
func (p *Problem) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s (HTTP %d)", p.Code, p.Status)
	detail := ""
	if p.Detail != nil {
		detail = *p.Detail
	}
	if detail == "" {
		detail = p.Title
	}
	if detail != "" {
		b.WriteString(": ")
		b.WriteString(detail)
	}
	if p.Errors != nil {
		for _, e := range *p.Errors {
			if e.Message == nil || strings.Contains(detail, *e.Message) {
				continue
			}
			b.WriteString("; ")
			if e.Location != nil && *e.Location != "" {
				b.WriteString(*e.Location)
				b.WriteString(": ")
			}
			b.WriteString(*e.Message)
		}
	}
	if p.Instance != nil && *p.Instance != "" {
		fmt.Fprintf(&b, " (request %s)", *p.Instance)
	}
	return b.String()
}

// ProblemCode returns the code of the *Problem in err's chain ("not_found",
// "forbidden", ...), or "" when err is not an answer of the server.
func ProblemCode(err error) string {
	var p *Problem
	if errors.As(err, &p) {
		return p.Code
	}
	return ""
}

// maxProblemSize bounds how much of an error answer is read.
const maxProblemSize = 1 << 20

// problemDoer turns every non-2xx answer into a *Problem error, in one place for
// all operations, raw and parsed alike; the answer's body is read and closed.
type problemDoer struct {
	next HttpRequestDoer
}

// Do implements HttpRequestDoer.
func (d problemDoer) Do(req *http.Request) (*http.Response, error) {
	resp, err := d.next.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return resp, nil
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxProblemSize))
	return nil, problemOf(resp, body)
}

// problemOf reads a problem document, or describes an answer that is not one (from
// a proxy, say) as a problem of class http_<status>.
func problemOf(resp *http.Response, body []byte) *Problem {
	var p Problem
	if strings.Contains(resp.Header.Get("Content-Type"), "json") && json.Unmarshal(body, &p) == nil && p.Code != "" {
		if p.Status == 0 {
			p.Status = int64(resp.StatusCode)
		}
		return &p
	}
	p = Problem{
		Type:   "about:blank",
		Code:   fmt.Sprintf("http_%d", resp.StatusCode),
		Title:  http.StatusText(resp.StatusCode),
		Status: int64(resp.StatusCode),
	}
	if text := strings.TrimSpace(string(bytes.ToValidUTF8(body, nil))); text != "" {
		if len(text) > 200 {
			text = text[:200] + "…"
		}
		p.Detail = &text
	}
	return &p
}

// WithNamespace makes every request of the client act in namespace ns: it sends
// the Cairn-Namespace header (docs/security.md, "Namespaces"). "" sends none: the
// token's namespace, else default.
func WithNamespace(ns string) ClientOption {
	return WithRequestEditorFn(func(_ context.Context, req *http.Request) error {
		if ns != "" {
			req.Header.Set("Cairn-Namespace", ns)
		}
		return nil
	})
}

package functions

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/cairnrun/cairn/fn"
)

// Headers of an http function call (docs/functions.md, "http").
const (
	// HeaderRunID carries the run's ID.
	HeaderRunID = "Cairn-Run-Id"
	// HeaderStep carries the step's key.
	HeaderStep = "Cairn-Step"
	// HeaderAttempt carries the attempt number (1 for the first try).
	HeaderAttempt = "Cairn-Attempt"
	// HeaderIdempotencyKey carries "<run_id>/<step>": the same on every attempt of
	// a step, for functions that make their side effects idempotent.
	HeaderIdempotencyKey = "Idempotency-Key"
	// HeaderSignature carries the body's signature; see VerifySignature.
	HeaderSignature = "Cairn-Signature"
	// HeaderTimeoutMs carries the milliseconds left before Cairn gives up on the
	// attempt (when it has a deadline): a function may stop early instead of
	// working for nothing.
	HeaderTimeoutMs = "Cairn-Timeout-Ms"
)

const (
	// DefaultSignatureMaxSkew is VerifySignature's tolerance when it is given none.
	DefaultSignatureMaxSkew = fn.DefaultSignatureMaxSkew
	// DefaultUserAgent is HTTPConfig.UserAgent's default.
	DefaultUserAgent = "cairn"
	// errorSnippetSize bounds how much of an error response goes into a message.
	errorSnippetSize = 1 << 10
	// drainLimit bounds how much of an error response is read (and dropped) so
	// that its connection can be reused.
	drainLimit = 64 << 10
)

// ErrInvalidSignature is what VerifySignature wraps when a signature is missing,
// malformed, wrong or outside the time tolerance (fn.ErrInvalidSignature: the
// check's home is the Go function SDK).
var ErrInvalidSignature = fn.ErrInvalidSignature

// HTTPConfig configures an HTTP invoker.
type HTTPConfig struct {
	// Client sends the requests. Default: a client with dial, TLS handshake and
	// idle timeouts but no overall timeout (ctx governs the attempt) that does not
	// follow redirects (a redirect is a terminal failure: a POST redirected with
	// 301/302/303 would lose its body).
	Client *http.Client
	// SigningKey is the HMAC-SHA256 secret of the Cairn-Signature header. Required
	// (NewHTTP panics without it); use at least 32 random bytes.
	SigningKey []byte
	// Logger receives the invoker's diagnostics. Default: discard.
	Logger *slog.Logger
	// UserAgent is the User-Agent header. Default: DefaultUserAgent.
	UserAgent string
	// AllowLocal lets steps call local addresses: loopback (127.0.0.0/8, ::1),
	// link-local (169.254.0.0/16, where clouds serve instance credentials;
	// fe80::/10) and unspecified ones (0.0.0.0, ::). Default false: a step whose
	// URL resolves to one fails, terminally (CodeInvalidSpec), without a request,
	// so that a deployer cannot reach the server's own API or metrics, or the
	// machine's credentials, through Cairn. Applies to the default Client only.
	AllowLocal bool
}

// HTTP runs http steps: a POST of the envelope (JSON) to HTTPSpec.URL
// (docs/functions.md, "http").
//
// The request carries the step's HTTPSpec.Headers (for credentials, say) and
// then Content-Type: application/json, Cairn-Run-Id, Cairn-Step, Cairn-Attempt,
// Idempotency-Key: <run_id>/<step>, Cairn-Signature (see VerifySignature),
// Cairn-Timeout-Ms when ctx has a deadline, and User-Agent; the step's headers
// cannot override Cairn's.
//
// A 2xx response's body is the output, streamed to Sink.Output, its Content-Type
// given to Sink.SetOutputContentType. 408, 429 and 5xx responses and network
// errors are retryable *Errors (CodeHTTPStatus, CodeNetwork) with RetryAfter
// taken from a Retry-After header (seconds or an HTTP date); every other status
// is terminal. Failure messages hold up to 1 KiB of the response body.
//
// HTTP is safe for concurrent use.
type HTTP struct {
	client    *http.Client
	key       []byte
	logger    *slog.Logger
	userAgent string
}

// NewHTTP returns an HTTP invoker configured by cfg. It panics when cfg is nil or
// cfg.SigningKey is empty: unsigned calls would let anyone who can reach a
// function impersonate Cairn, and that is a wiring mistake to catch at startup.
func NewHTTP(cfg *HTTPConfig) *HTTP {
	if cfg == nil || len(cfg.SigningKey) == 0 {
		panic("functions: NewHTTP needs HTTPConfig.SigningKey")
	}
	h := &HTTP{
		client:    cfg.Client,
		key:       bytes.Clone(cfg.SigningKey),
		logger:    loggerOrDiscard(cfg.Logger).With("component", "http_invoker"),
		userAgent: cfg.UserAgent,
	}
	if h.client == nil {
		h.client = defaultHTTPClient(cfg.AllowLocal)
	}
	if h.userAgent == "" {
		h.userAgent = DefaultUserAgent
	}
	return h
}

// errLocalAddress is a connection refused because it would reach a local address.
var errLocalAddress = errors.New("local addresses are not allowed (CAIRN_HTTP_ALLOW_LOCAL)")

// refuseLocal is a net.Dialer's Control: it runs on the resolved address, so a
// name that resolves to a local address is refused as well.
func refuseLocal(_, address string, _ syscall.RawConn) error {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return err
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return err
	}
	ip = ip.Unmap()
	if ip.IsLoopback() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() || ip.IsUnspecified() {
		return fmt.Errorf("%s: %w", ip, errLocalAddress)
	}
	return nil
}

func defaultHTTPClient(allowLocal bool) *http.Client {
	dialer := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	if !allowLocal {
		dialer.Control = refuseLocal
	}
	return &http.Client{
		Transport: &http.Transport{
			Proxy:                 http.ProxyFromEnvironment,
			DialContext:           dialer.DialContext,
			ForceAttemptHTTP2:     true,
			MaxIdleConns:          100,
			MaxIdleConnsPerHost:   16,
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   10 * time.Second,
			ExpectContinueTimeout: time.Second,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}

// Invoke runs one attempt of an http step; see HTTP for the protocol. It returns
// nil on success, an *Error when the function failed or the spec is unusable
// (CodeInvalidSpec), context.Cause(ctx) when ctx ended first, and any other error
// for an infrastructure failure.
func (h *HTTP) Invoke(ctx context.Context, inv *Invocation, sink Sink) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	spec := inv.Spec.HTTP
	if spec == nil {
		return invalidSpecf("http: step has no http spec")
	}
	target, err := url.Parse(spec.URL)
	if err != nil {
		return invalidSpecf("http: invalid url: %v", err)
	}
	if (target.Scheme != "http" && target.Scheme != "https") || target.Host == "" {
		return invalidSpecf("http: url %q must be absolute http or https", redactURL(target))
	}
	where := redactURL(target)
	body, err := json.Marshal(inv.Envelope)
	if err != nil {
		return fmt.Errorf("http: encode envelope: %w", err)
	}

	req, err := http.NewRequestWithContext(ctx, http.MethodPost, spec.URL, bytes.NewReader(body))
	if err != nil {
		return invalidSpecf("http: build request for %s: %v", where, err)
	}
	for k, v := range spec.Headers {
		// The transport would refuse these on every attempt: fail once, terminally.
		if !httpguts.ValidHeaderFieldName(k) || !httpguts.ValidHeaderFieldValue(v) {
			return invalidSpecf("http: invalid header %q", k)
		}
		req.Header.Set(k, v)
	}
	env := &inv.Envelope
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", h.userAgent)
	req.Header.Set(HeaderRunID, env.RunID)
	req.Header.Set(HeaderStep, env.Step)
	req.Header.Set(HeaderAttempt, strconv.Itoa(env.Attempt))
	req.Header.Set(HeaderIdempotencyKey, env.RunID+"/"+env.Step)
	req.Header.Set(HeaderSignature, signatureHeader(h.key, time.Now(), body))
	if env.Traceparent != "" {
		req.Header.Set("Traceparent", env.Traceparent)
	}
	if deadline, ok := ctx.Deadline(); ok {
		if left := time.Until(deadline).Milliseconds(); left > 0 {
			req.Header.Set(HeaderTimeoutMs, strconv.FormatInt(left, 10))
		}
	}

	logger := h.logger.With("run_id", env.RunID, "step", env.Step, "attempt", env.Attempt)
	resp, err := h.client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		if errors.Is(err, errLocalAddress) {
			return invalidSpecf("POST %s: %v", where, errLocalAddress)
		}
		var urlErr *url.Error
		if errors.As(err, &urlErr) {
			err = urlErr.Err
		}
		return &Error{Message: fmt.Sprintf("POST %s: %v", where, err), Retryable: true, Code: CodeNetwork}
	}
	defer resp.Body.Close()
	logger.DebugContext(ctx, "http function responded", "status", resp.StatusCode)

	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return statusError(where, resp)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "" {
		sink.SetOutputContentType(ct)
	}
	return copyResponse(ctx, where, resp.Body, sink.Output())
}

// copyResponse streams a 2xx body into the output, telling a broken response
// (retryable, or ctx's cause) from a refused write.
func copyResponse(ctx context.Context, where string, body io.Reader, out io.Writer) error {
	buf := make([]byte, copyBufferSize)
	for {
		n, err := body.Read(buf)
		if n > 0 {
			if _, werr := out.Write(buf[:n]); werr != nil {
				return sinkWriteError("http: write output", werr)
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			return &Error{Message: fmt.Sprintf("POST %s: read response: %v", where, err), Retryable: true, Code: CodeNetwork}
		}
	}
}

// statusError turns a non-2xx response into an *Error.
func statusError(where string, resp *http.Response) *Error {
	snippet, _ := io.ReadAll(io.LimitReader(resp.Body, errorSnippetSize))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, drainLimit))

	code := resp.StatusCode
	e := &Error{
		Message:   fmt.Sprintf("POST %s: %s", where, resp.Status),
		Retryable: code == http.StatusRequestTimeout || code == http.StatusTooManyRequests || code >= 500,
		Code:      CodeHTTPStatus,
	}
	if code >= 300 && code < 400 {
		e.Message += " (redirects are not followed)"
	}
	if text := strings.TrimSpace(strings.ToValidUTF8(string(snippet), "\uFFFD")); text != "" {
		e.Message += ": " + text
	}
	// An SDK's failure is a JSON body {"message", "code", "retryable"}.
	var body struct {
		Code string `json:"code"`
	}
	if json.Unmarshal(snippet, &body) == nil {
		e.HandlerCode = handlerCode(body.Code)
	}
	if e.Retryable {
		e.RetryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
	}
	return e
}

// parseRetryAfter reads a Retry-After value: delay-seconds or an HTTP date. It
// returns 0 when the value is absent, malformed or in the past.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		// Cap far beyond any sane retry policy to stay clear of overflow.
		const maxSecs = int64(365 * 24 * time.Hour / time.Second)
		if secs <= 0 {
			return 0
		}
		return time.Duration(min(secs, maxSecs)) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now); d > 0 {
			return d
		}
	}
	return 0
}

// redactURL names an endpoint for messages: scheme, host and path, without
// credentials or query (which may hold secrets).
func redactURL(u *url.URL) string {
	c := url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path}
	return c.String()
}

// signatureHeader signs body at time t: "t=<unix seconds>,v1=<hex HMAC-SHA256 of
// "<t>.<body>">".
func signatureHeader(key []byte, t time.Time, body []byte) string {
	ts := t.Unix()
	return "t=" + strconv.FormatInt(ts, 10) + ",v1=" + hex.EncodeToString(signature(key, ts, body))
}

func signature(key []byte, ts int64, body []byte) []byte { return fn.Signature(key, ts, body) }

// VerifySignature checks a Cairn-Signature header against the raw request body,
// for authors of http functions: it is fn.VerifySignature, where the scheme is
// documented. It returns nil when the signature is valid, else an error wrapping
// ErrInvalidSignature.
func VerifySignature(key, header string, body []byte, maxSkew time.Duration) error {
	return verifySignatureAt([]byte(key), header, body, maxSkew, time.Now())
}

func verifySignatureAt(key []byte, header string, body []byte, maxSkew time.Duration, now time.Time) error {
	return fn.VerifySignatureAt(key, header, body, maxSkew, now)
}

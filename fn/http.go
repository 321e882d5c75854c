package fn

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"time"
)

// HTTPConfig configures NewHTTPHandler. The zero value reads the key from
// CAIRN_SIGNING_KEY.
type HTTPConfig struct {
	// SigningKey is the servers' CAIRN_SIGNING_KEY, which signs every call
	// (Cairn-Signature). Default: the CAIRN_SIGNING_KEY environment variable.
	SigningKey string
	// Insecure accepts calls without checking their signature: for local
	// experiments only, never where anyone else can reach the function.
	Insecure bool
	// MaxSkew is how far a signature's timestamp may be from the local clock;
	// default 5 minutes.
	MaxSkew time.Duration
	// MaxEnvelope bounds the request body; default 64 MiB (large values travel
	// as $blob references, never inline).
	MaxEnvelope int64
	// Logger receives the handler's log lines; default a text logger on stderr.
	Logger *slog.Logger
	// Client makes the function's own calls to Cairn (checkpoints) and to blob
	// URLs; default http.DefaultClient.
	Client *http.Client
}

// NewHTTPHandler serves h as an http function: Cairn POSTs the envelope, the
// response is the output (200, streamed) or the failure (422 for a terminal
// one, 500 or 503 with Retry-After for a retryable one, with the body
// {"message", "code", "retryable"}). A call whose Cairn-Signature does not
// verify is answered 401 before the handler runs. It fails when there is no
// signing key and cfg.Insecure is false.
func NewHTTPHandler(h Handler, cfg *HTTPConfig) (http.Handler, error) {
	c := HTTPConfig{}
	if cfg != nil {
		c = *cfg
	}
	if c.SigningKey == "" {
		c.SigningKey = os.Getenv("CAIRN_SIGNING_KEY")
	}
	if c.SigningKey == "" && !c.Insecure {
		return nil, errors.New("fn: an http function needs the signing key (HTTPConfig.SigningKey or CAIRN_SIGNING_KEY) to verify Cairn-Signature; HTTPConfig.Insecure skips the check")
	}
	if c.MaxEnvelope <= 0 {
		c.MaxEnvelope = 64 << 20
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	if c.Client == nil {
		c.Client = http.DefaultClient
	}
	return &httpHandler{h: h, cfg: c}, nil
}

type httpHandler struct {
	h   Handler
	cfg HTTPConfig
}

func (s *httpHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeError(w, http.StatusMethodNotAllowed, Terminal("protocol", "Cairn calls functions with POST"))
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxEnvelope))
	if err != nil {
		writeError(w, http.StatusRequestEntityTooLarge, Terminal("protocol", "read the envelope: %v", err))
		return
	}
	if !s.cfg.Insecure {
		if err := VerifySignature(s.cfg.SigningKey, r.Header.Get("Cairn-Signature"), body, s.cfg.MaxSkew); err != nil {
			s.cfg.Logger.Warn("refused a call", "error", err)
			writeError(w, http.StatusUnauthorized, Terminal("unauthorized", "%v", err))
			return
		}
	}
	var env Envelope
	if err := json.Unmarshal(body, &env); err != nil {
		writeError(w, http.StatusBadRequest, Terminal("protocol", "decode the envelope: %v", err))
		return
	}
	if env.Traceparent == "" {
		env.Traceparent = r.Header.Get("Traceparent")
	}
	call := newCall(env, KindHTTP, &urlChannel{env: &env, client: s.cfg.Client, logger: s.cfg.Logger}, s.cfg.Logger)
	out, fail := invoke(r.Context(), s.h, call)
	if fail != nil {
		status := http.StatusUnprocessableEntity
		if fail.Retryable {
			status = http.StatusInternalServerError
			if fail.RetryAfter > 0 {
				status = http.StatusServiceUnavailable
				w.Header().Set("Retry-After", strconv.FormatInt(int64((fail.RetryAfter+time.Second-1)/time.Second), 10))
			}
		}
		call.logger.Warn("the handler failed", "error", fail.Error())
		writeError(w, status, fail)
		return
	}
	w.Header().Set("Content-Type", out.contentType)
	w.WriteHeader(http.StatusOK)
	if err := out.write(w); err != nil {
		// The status is sent: break the response off, so that Cairn sees a
		// broken output (a retryable network failure), never a short one.
		call.logger.Error("write the output", "error", err)
		panic(http.ErrAbortHandler)
	}
}

func writeError(w http.ResponseWriter, status int, e *Error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(e.jsonText())
}

// urlChannel stores checkpoints through the envelope's checkpoint_url (http
// and lambda functions).
type urlChannel struct {
	env    *Envelope
	client *http.Client
	logger *slog.Logger
}

func (u *urlChannel) checkpoint(ctx context.Context, value []byte) error {
	if u.env.CheckpointURL == "" || u.env.LeaseToken == "" {
		return errors.New("the envelope has no checkpoint_url")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, u.env.CheckpointURL, bytes.NewReader(value))
	if err != nil {
		return errors.New("a malformed checkpoint_url")
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+u.env.LeaseToken)
	resp, err := u.client.Do(req)
	if err != nil {
		return fmt.Errorf("PUT checkpoint_url: %w", redactErr(err))
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	switch {
	case resp.StatusCode == http.StatusConflict:
		return fmt.Errorf("PUT checkpoint_url: %s: %w", resp.Status, ErrLeaseLost)
	case resp.StatusCode/100 != 2:
		return fmt.Errorf("PUT checkpoint_url: %s", resp.Status)
	}
	return nil
}

func (u *urlChannel) progress(_ context.Context, value []byte) error {
	u.logger.Info("progress", "run_id", u.env.RunID, "step", u.env.Step, "attempt", u.env.Attempt, "progress", json.RawMessage(value))
	return nil
}

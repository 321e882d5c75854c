package fn_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/lambda/messages"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/fn"
	"github.com/cairnrun/cairn/functions"
)

// sink collects what the http invoker hands on.
type sink struct {
	out bytes.Buffer
	ct  string
}

func (s *sink) Output() io.Writer                                 { return &s.out }
func (s *sink) SetOutputContentType(ct string)                    { s.ct = ct }
func (s *sink) Log() io.Writer                                    { return io.Discard }
func (s *sink) Checkpoint(context.Context, json.RawMessage) error { return nil }
func (s *sink) CheckpointFile(context.Context, *os.File) error    { return nil }
func (s *sink) Progress(context.Context, json.RawMessage) error   { return nil }

// TestHTTPHandlerWithCairnsInvoker: Cairn's own http invoker calls a handler
// served by NewHTTPHandler: a signed call gets the output; a terminal error
// fails without retry, with its message; a call signed with another key is
// refused before the handler runs.
func TestHTTPHandlerWithCairnsInvoker(t *testing.T) {
	t.Parallel()
	const key = "test-signing-key-0123456789abcdef"
	ran := 0
	h, err := fn.NewHTTPHandler(func(ctx context.Context, c *fn.Call) (any, error) {
		ran++
		var in struct {
			Name string `json:"name"`
			Fail bool   `json:"fail"`
		}
		if err := c.Input(&in); err != nil {
			return nil, err
		}
		if in.Fail {
			return nil, fn.Terminal("declined", "card declined")
		}
		return map[string]string{"greeting": "hello, " + in.Name, "key": c.IdempotencyKey()}, nil
	}, &fn.HTTPConfig{SigningKey: key})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)

	invoke := func(signingKey, input string) (*sink, error) {
		inv := functions.NewHTTP(&functions.HTTPConfig{SigningKey: []byte(signingKey), AllowLocal: true})
		s := &sink{}
		err := inv.Invoke(context.Background(), &functions.Invocation{
			Envelope: functions.Envelope{RunID: "r1", Step: "greet", Attempt: 1, Input: json.RawMessage(input)},
			Spec:     functions.Spec{HTTP: &functions.HTTPSpec{URL: srv.URL}},
		}, s)
		return s, err
	}

	s, err := invoke(key, `{"name":"ada"}`)
	require.NoError(t, err)
	require.JSONEq(t, `{"greeting":"hello, ada","key":"r1/greet"}`, s.out.String())
	require.Equal(t, "application/json", s.ct)

	_, err = invoke(key, `{"fail":true}`)
	var fe *functions.Error
	require.ErrorAs(t, err, &fe)
	require.False(t, fe.Retryable)
	require.Contains(t, fe.Message, "card declined")

	before := ran
	_, err = invoke("another-key-0123456789abcdef0123", `{"name":"eve"}`)
	require.ErrorAs(t, err, &fe)
	require.False(t, fe.Retryable, "a refused signature is terminal")
	require.Equal(t, before, ran, "the handler did not run")
}

// TestRunExec: an exec attempt reads the envelope from stdin and writes the
// output to stdout; a suspend answers $suspend; a failure exits 1.
func TestRunExec(t *testing.T) {
	t.Parallel()
	env := `{"run_id":"r","step":"s","attempt":1,"input":{"n":2},"callback_url":"https://cairn.example/v1/callbacks/secret-token"}` + "\n"
	tests := []struct {
		name   string
		h      fn.Handler
		status int
		out    string
	}{
		{name: "value", h: func(_ context.Context, c *fn.Call) (any, error) {
			var in struct{ N int }
			require.NoError(t, c.Input(&in))
			return map[string]int{"twice": in.N * 2}, nil
		}, out: `{"twice":4}`},
		{name: "stream", h: func(context.Context, *fn.Call) (any, error) {
			return &fn.Stream{Write: func(w io.Writer) error { _, err := io.WriteString(w, "a\nb\n"); return err }}, nil
		}, out: "a\nb\n"},
		{name: "suspend", h: func(_ context.Context, c *fn.Call) (any, error) {
			url, err := c.Suspend(72 * time.Hour)
			require.NoError(t, err)
			require.Contains(t, url, "/v1/callbacks/")
			return nil, nil
		}, out: `{"$suspend":{"timeout":"72h0m0s"}}`},
		{name: "failure", h: func(context.Context, *fn.Call) (any, error) {
			return nil, fn.Terminal("declined", "no")
		}, status: 1},
		{name: "panic", h: func(context.Context, *fn.Call) (any, error) { panic("boom") }, status: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			status := fn.RunExec(context.Background(), tt.h, strings.NewReader(env), &out, &errOut)
			require.Equal(t, tt.status, status, errOut.String())
			if tt.status == 0 {
				require.Equal(t, tt.out, out.String())
			}
		})
	}
}

// TestErrorsHoldNoCredentials: a checkpoint PUT or a blob GET that fails does
// not put its URL (a credential: lease token, presigned signature) in the error.
func TestErrorsHoldNoCredentials(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "nope", http.StatusForbidden)
	}))
	t.Cleanup(srv.Close)
	const secret = "SECRET-TOKEN-123"
	var cpErr, blobErr, refusedErr error
	h := fn.LambdaHandler(func(ctx context.Context, c *fn.Call) (any, error) {
		cpErr = c.SaveCheckpoint(ctx, map[string]int{"i": 1})
		_, blobErr = c.OpenDep(ctx, "big")
		return nil, nil
	})
	env := `{"run_id":"r","step":"s","attempt":1,"lease_token":"` + secret + `","checkpoint_url":"` + srv.URL + `/cp?sig=` + secret + `",` +
		`"deps":{"big":{"$blob":{"digest":"sha256:ab","size":9,"url":"` + srv.URL + `/blob?X-Amz-Signature=` + secret + `"}}}}`
	_, err := h(context.Background(), json.RawMessage(env))
	require.NoError(t, err)
	// A refused connection names its address in Go's error: never the URL's path or query.
	h2 := fn.LambdaHandler(func(ctx context.Context, c *fn.Call) (any, error) {
		refusedErr = c.SaveCheckpoint(ctx, 1)
		return nil, nil
	})
	_, err = h2(context.Background(), json.RawMessage(`{"lease_token":"`+secret+`","checkpoint_url":"http://127.0.0.1:1/v1/x?t=`+secret+`"}`))
	require.NoError(t, err)
	for _, e := range []error{cpErr, blobErr, refusedErr} {
		require.Error(t, e)
		require.NotContains(t, e.Error(), secret)
		require.NotContains(t, e.Error(), srv.URL+"/")
	}
	require.Contains(t, blobErr.Error(), "sha256:ab")
	require.False(t, errors.Is(cpErr, fn.ErrLeaseLost))
}

// TestLambdaError: a failure is a function error Cairn reads: errorType the
// code, errorMessage {"message", "code", "retryable"}.
func TestLambdaError(t *testing.T) {
	t.Parallel()
	h := fn.LambdaHandler(func(context.Context, *fn.Call) (any, error) { return nil, fn.Terminal("declined", "card declined") })
	_, err := h(context.Background(), json.RawMessage(`{"run_id":"r"}`))
	require.Error(t, err)
	var body struct {
		Message   string `json:"message"`
		Code      string `json:"code"`
		Retryable *bool  `json:"retryable"`
	}
	var ie messages.InvokeResponse_Error
	require.ErrorAs(t, err, &ie)
	require.Equal(t, "declined", ie.Type)
	require.NoError(t, json.Unmarshal([]byte(ie.Message), &body), ie.Message)
	require.Equal(t, "card declined", body.Message)
	require.Equal(t, "declined", body.Code)
	require.False(t, *body.Retryable)
}

// TestVerifySignature: fn's check accepts what Cairn signs, within the skew.
func TestVerifySignature(t *testing.T) {
	t.Parallel()
	body := []byte(`{"a":1}`)
	var header string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		header = r.Header.Get("Cairn-Signature")
	}))
	t.Cleanup(srv.Close)
	inv := functions.NewHTTP(&functions.HTTPConfig{SigningKey: []byte("k"), AllowLocal: true})
	_ = inv.Invoke(context.Background(), &functions.Invocation{Spec: functions.Spec{HTTP: &functions.HTTPSpec{URL: srv.URL}}}, &sink{})
	require.NotEmpty(t, header)
	env, _ := json.Marshal(functions.Envelope{})
	require.NoError(t, fn.VerifySignature("k", header, env, 0))
	require.ErrorIs(t, fn.VerifySignature("k", header, body, 0), fn.ErrInvalidSignature)
	require.ErrorIs(t, fn.VerifySignature("other", header, env, 0), fn.ErrInvalidSignature)
	require.ErrorIs(t, fn.VerifySignature("k", "t=1,v1=00", env, 0), fn.ErrInvalidSignature)
}

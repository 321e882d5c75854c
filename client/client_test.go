package client_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/client"
)

func TestNewRequiresServer(t *testing.T) {
	t.Parallel()
	_, err := client.New("", "token")
	require.Error(t, err)
}

func TestClientProblemsAndToken(t *testing.T) {
	t.Parallel()
	runID := uuid.New()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Header.Get("Authorization") != "Bearer secret-token-0123456789":
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = io.WriteString(w, `{"type":"urn:cairn:problem:unauthorized","title":"Unauthorized","status":401,"code":"unauthorized","detail":"the bearer token is not valid"}`)
		case r.URL.Path == "/v1/bundles":
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusBadRequest)
			_, _ = io.WriteString(w, `{"type":"urn:cairn:problem:bad_request","title":"Bad request","status":400,"code":"bad_request","detail":"invalid bundle","errors":[{"location":"cairn.yaml#name","message":"bad name"}]}`)
		case r.URL.Path == "/v1/runs/"+runID.String():
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(http.StatusBadGateway)
			_, _ = io.WriteString(w, "<html>bad gateway</html>")
		case r.URL.Path == "/v1/runs/"+runID.String()+"/steps/a/output":
			w.Header().Set("Content-Type", "application/octet-stream")
			_, _ = io.WriteString(w, "bytes")
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)

	tests := []struct {
		name, token string
		call        func(c *client.Client) error
		code        string
		status      int64
		message     string
	}{
		{name: "unauthorized", token: "wrong-token-0123456789", code: "unauthorized", status: 401, message: "unauthorized (HTTP 401): the bearer token is not valid",
			call: func(c *client.Client) error { _, err := c.GetRunWithResponse(t.Context(), runID); return err }},
		{name: "bad request with details", token: "secret-token-0123456789", code: "bad_request", status: 400, message: "bad_request (HTTP 400): invalid bundle; cairn.yaml#name: bad name",
			call: func(c *client.Client) error {
				_, err := c.UploadBundle(t.Context(), strings.NewReader("x"))
				return err
			}},
		{name: "not a problem", token: "secret-token-0123456789", code: "http_502", status: 502, message: "http_502 (HTTP 502): <html>bad gateway</html>",
			call: func(c *client.Client) error { _, err := c.GetRunWithResponse(t.Context(), runID); return err }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := client.New(srv.URL, tt.token)
			require.NoError(t, err)
			err = tt.call(c)
			var p *client.Problem
			require.True(t, errors.As(err, &p), "error %v is not a *Problem", err)
			require.Equal(t, tt.code, p.Code)
			require.Equal(t, tt.status, p.Status)
			require.Equal(t, tt.code, client.ProblemCode(err))
			require.Contains(t, err.Error(), tt.message)
		})
	}

	t.Run("stream", func(t *testing.T) {
		t.Parallel()
		c, err := client.New(srv.URL, "secret-token-0123456789")
		require.NoError(t, err)
		resp, err := c.GetStepOutput(t.Context(), runID, "a")
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.Equal(t, "bytes", string(b))
	})
}

package api_test

import (
	"context"
	"crypto/sha256"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/api"
	"github.com/cairnrun/cairn/blobstore"
	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/internal/testenv"
)

// setupTwoServers serves the API twice on one database, as two servers of a
// deployment do: each has its own cache of managed tokens. The tokens of
// CAIRN_TOKENS are setupWithSecrets' (admin "root").
func setupTwoServers(t *testing.T) (a, b *testBundle) {
	t.Helper()
	db := testenv.DB(t)
	serve := func() *testBundle {
		store := catalog.New(db, nil)
		blobDir := t.TempDir()
		blobs, err := blobstore.NewFile(blobDir, nil)
		require.NoError(t, err)
		tokens, err := api.ParseTokens("operator:" + operatorToken + ",viewer:" + viewerToken + ",admin:root:" + adminToken)
		require.NoError(t, err)
		hs := httptest.NewServer(api.New(store, blobs, &api.Config{Tokens: tokens, TempDir: t.TempDir()}).Handler())
		t.Cleanup(hs.Close)
		return &testBundle{store: store, blobDir: blobDir, url: hs.URL}
	}
	return serve(), serve()
}

// createToken creates a managed token as root and returns it with its value.
func (tb *testBundle) createToken(t *testing.T, body string) api.CreatedToken {
	t.Helper()
	a := tb.sendAs(t, adminToken, http.MethodPost, "/v1/tokens", nil, []byte(body))
	require.Equal(t, http.StatusCreated, a.status, "%s", a.body)
	return decode[api.CreatedToken](t, a)
}

// TestManagedTokens: an admin creates a token; its value is shown once and stored
// as its SHA-256 only; it works on both servers with its role and name; the list
// never shows a value; a revoked token is refused by the other server within
// TokenCacheTTL (well within a second), saying so.
func TestManagedTokens(t *testing.T) {
	t.Parallel()
	a, b := setupTwoServers(t)
	ctx := context.Background()

	// Only an admin creates tokens.
	r := a.sendAs(t, operatorToken, http.MethodPost, "/v1/tokens", nil, []byte(`{"name":"ci","role":"operator"}`))
	require.Equal(t, http.StatusForbidden, r.status, "%s", r.body)

	tok := a.createToken(t, `{"name":"ci","role":"operator"}`)
	require.Regexp(t, `^cairn_[A-Za-z0-9_-]{43}$`, tok.Value)
	require.Equal(t, "ci", tok.Name)
	require.Equal(t, "root", tok.CreatedBy)
	require.Nil(t, tok.ExpiresAt)

	// Stored: the hash, never the value.
	var rows []string
	require.NoError(t, a.store.DB().SelectContext(ctx, &rows, `SELECT row_to_json(t)::text FROM api_tokens t`))
	require.Len(t, rows, 1)
	require.NotContains(t, rows[0], tok.Value)
	var hash []byte
	require.NoError(t, a.store.DB().GetContext(ctx, &hash, `SELECT token_hash FROM api_tokens`))
	want := sha256.Sum256([]byte(tok.Value))
	require.Equal(t, want[:], hash)

	// The list shows it, without a value.
	r = a.sendAs(t, adminToken, http.MethodGet, "/v1/tokens", nil, nil)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	require.NotContains(t, string(r.body), tok.Value)
	require.NotContains(t, string(r.body), `"value"`)
	list := decode[api.List[api.APIToken]](t, r)
	require.Len(t, list.Items, 1)
	require.Equal(t, tok.ID, list.Items[0].ID)

	// It works on both servers, as an operator named ci.
	for _, s := range []*testBundle{a, b} {
		r = s.sendAs(t, tok.Value, http.MethodGet, "/v1/runs", nil, nil)
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	}
	r = b.sendAs(t, tok.Value, http.MethodGet, "/v1/tokens", nil, nil)
	require.Equal(t, http.StatusForbidden, r.status, "an operator token lists no tokens: %s", r.body)
	r = b.sendAs(t, tok.Value, http.MethodPost, "/v1/workflows/nope/pause", nil, nil)
	require.Equal(t, http.StatusNotFound, r.status, "%s", r.body)
	var actor string
	require.NoError(t, a.store.DB().GetContext(ctx, &actor, `SELECT actor || ' ' || role FROM audit_log WHERE action = 'pauseWorkflow'`))
	require.Equal(t, "ci operator", actor, "the token's name and role")

	// Revoked on server a: server b, which has the token cached, refuses it once
	// its cache's bound has passed since the revocation committed.
	r = a.sendAs(t, adminToken, http.MethodDelete, "/v1/tokens/"+tok.ID, nil, nil)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	revoked := decode[api.APIToken](t, r)
	require.NotNil(t, revoked.RevokedAt)
	require.Equal(t, "root", *revoked.RevokedBy)
	require.Less(t, api.TokenCacheTTL, time.Second)
	time.Sleep(api.TokenCacheTTL) // the bound under test, not a wait for an event
	for _, s := range []*testBundle{b, a} {
		r = s.sendAs(t, tok.Value, http.MethodGet, "/v1/runs", nil, nil)
		require.Equal(t, http.StatusUnauthorized, r.status, "%s", r.body)
		require.Contains(t, r.problem.Detail, "revoked")
	}

	// Revoked tokens are listed on request only; revoking again changes nothing.
	r = a.sendAs(t, adminToken, http.MethodGet, "/v1/tokens", nil, nil)
	require.Empty(t, decode[api.List[api.APIToken]](t, r).Items)
	r = a.sendAs(t, adminToken, http.MethodGet, "/v1/tokens?revoked=true", nil, nil)
	require.Len(t, decode[api.List[api.APIToken]](t, r).Items, 1)
	r = a.sendAs(t, adminToken, http.MethodDelete, "/v1/tokens/"+tok.ID, nil, nil)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	require.Equal(t, revoked.RevokedAt.UnixMicro(), decode[api.APIToken](t, r).RevokedAt.UnixMicro())
	r = a.sendAs(t, adminToken, http.MethodDelete, "/v1/tokens/00000000-0000-0000-0000-000000000000", nil, nil)
	require.Equal(t, http.StatusNotFound, r.status, "%s", r.body)
}

// TestManagedTokenExpired: a token past its expires_at is refused with a 401 that
// says it expired and when; one made to expire in the past is refused at creation.
func TestManagedTokenExpired(t *testing.T) {
	t.Parallel()
	tb, _ := setupTwoServers(t)
	ctx := context.Background()

	r := tb.sendAs(t, adminToken, http.MethodPost, "/v1/tokens", nil, []byte(`{"name":"old","role":"viewer","expires_at":"2020-01-01T00:00:00Z"}`))
	require.Equal(t, http.StatusUnprocessableEntity, r.status, "%s", r.body)

	future := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	tok := tb.createToken(t, `{"name":"temp","role":"viewer","expires_at":"`+future.Format(time.RFC3339)+`"}`)
	require.Equal(t, future, tok.ExpiresAt.UTC())
	r = tb.sendAs(t, tok.Value, http.MethodGet, "/v1/runs", nil, nil)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)

	// Its time passes (the clock moved by the catalog): refused, saying so.
	_, err := tb.store.DB().ExecContext(ctx, `UPDATE api_tokens SET expires_at = now() - interval '1 second'`)
	require.NoError(t, err)
	time.Sleep(api.TokenCacheTTL) // the cached expires_at was the old one
	r = tb.sendAs(t, tok.Value, http.MethodGet, "/v1/runs", nil, nil)
	require.Equal(t, http.StatusUnauthorized, r.status, "%s", r.body)
	require.Equal(t, "unauthorized", r.problem.Code)
	require.Contains(t, r.problem.Detail, "expired at")
	require.Contains(t, r.header.Get("WWW-Authenticate"), "invalid_token")

	// An unknown token that looks managed is the plain 401.
	r = tb.sendAs(t, "cairn_"+tok.Value[6:10]+"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx", http.MethodGet, "/v1/runs", nil, nil)
	require.Equal(t, http.StatusUnauthorized, r.status, "%s", r.body)
	require.Contains(t, r.problem.Detail, "not valid")
}

// TestManagedTokenLastUsed: a token's use is recorded, but not once per request:
// last_used_at moves once its value is a minute old.
func TestManagedTokenLastUsed(t *testing.T) {
	t.Parallel()
	tb, _ := setupTwoServers(t)
	ctx := context.Background()
	tok := tb.createToken(t, `{"name":"busy","role":"viewer"}`)
	lastUsed := func() *time.Time {
		var at *time.Time
		require.NoError(t, tb.store.DB().GetContext(ctx, &at, `SELECT last_used_at FROM api_tokens`))
		return at
	}
	require.Nil(t, lastUsed(), "never used")

	r := tb.sendAs(t, tok.Value, http.MethodGet, "/v1/runs", nil, nil)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	first := lastUsed()
	require.NotNil(t, first, "the first use is recorded")

	// More requests, and lookups past the cache: the minute has not passed.
	for range 5 {
		r = tb.sendAs(t, tok.Value, http.MethodGet, "/v1/runs", nil, nil)
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	}
	h := sha256.Sum256([]byte(tok.Value))
	_, err := tb.store.TokenLookup(ctx, h[:])
	require.NoError(t, err)
	require.Equal(t, first.UnixMicro(), lastUsed().UnixMicro(), "not written per request")

	// A minute later, the next lookup records the use again.
	_, err = tb.store.DB().ExecContext(ctx, `UPDATE api_tokens SET last_used_at = last_used_at - interval '61 seconds'`)
	require.NoError(t, err)
	_, err = tb.store.TokenLookup(ctx, h[:])
	require.NoError(t, err)
	require.Greater(t, lastUsed().UnixMicro(), first.UnixMicro()-61e6)
}

package api_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/api"
	"github.com/cairnrun/cairn/blobstore"
	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/internal/testenv"
	"github.com/cairnrun/cairn/internal/testenv/oidcprovider"
)

// oidcRoleMap is the role map the OIDC tests give the server.
const oidcRoleMap = "groups:platform=admin@*, groups:acme-dev=operator, repository_owner:acme=viewer"

// setupOIDC starts a real OpenID provider (internal/testenv/oidcprovider) with
// CI workloads, and an API server that accepts its JWTs with audience "cairn".
func setupOIDC(t *testing.T, cfg *api.OIDCConfig) (*testBundle, *oidcprovider.Provider) {
	t.Helper()
	aud := []string{"cairn"}
	p := oidcprovider.Start(t, oidcprovider.Config{Workloads: []oidcprovider.Workload{
		{ID: "ci-platform", Secret: "s1", Audience: aud, Claims: map[string]any{"groups": []string{"platform", "everyone"}}},
		{ID: "ci-deploy", Secret: "s2", Subject: "repo:acme/app:ref:refs/heads/main", Audience: aud, Claims: map[string]any{"groups": []string{"acme-dev"}}},
		{ID: "ci-reader", Secret: "s3", Audience: aud, Claims: map[string]any{"repository_owner": "acme"}},
		{ID: "ci-stranger", Secret: "s4", Audience: aud, Claims: map[string]any{"groups": []string{"marketing"}}},
		{ID: "ci-elsewhere", Secret: "s5", Audience: []string{"another-service"}, Claims: map[string]any{"groups": []string{"platform"}}},
		{ID: "ci-expired", Secret: "s6", Audience: aud, Lifetime: -time.Hour, Claims: map[string]any{"groups": []string{"platform"}}},
	}})
	roles, err := api.ParseRoleMap(oidcRoleMap)
	require.NoError(t, err)
	c := api.OIDCConfig{Issuer: p.Issuer, Audience: "cairn", Roles: roles}
	if cfg != nil {
		c.KeyRefetchBurst, c.KeyRefetchEvery = cfg.KeyRefetchBurst, cfg.KeyRefetchEvery
	}
	bearers, err := api.NewOIDCBearers(context.Background(), c)
	require.NoError(t, err)
	store := catalog.New(testenv.DB(t), nil)
	blobs, err := blobstore.NewFile(t.TempDir(), nil)
	require.NoError(t, err)
	tokens, err := api.ParseTokens("operator:" + operatorToken)
	require.NoError(t, err)
	hs := httptest.NewServer(api.New(store, blobs, &api.Config{Tokens: tokens, Bearers: bearers, TempDir: t.TempDir()}).Handler())
	t.Cleanup(hs.Close)
	return &testBundle{store: store, url: hs.URL}, p
}

// TestOIDCBearer drives the API with JWT access tokens a real OpenID provider
// issued to CI workloads (client credentials grant): each acts with the role its
// claims map to, and a token of another audience, an expired one, a forged one
// or one that maps to no role is refused, saying why.
func TestOIDCBearer(t *testing.T) {
	t.Parallel()
	tb, p := setupOIDC(t, nil)
	const (
		read  = "/v1/workflows"         // viewer
		start = "/v1/workflows/x/runs"  // operator: 404, no such workflow
		limit = "/v1/limits/some-limit" // admin: 204
	)

	t.Run("roles", func(t *testing.T) {
		platform, deploy, reader := p.Token(t, "ci-platform"), p.Token(t, "ci-deploy"), p.Token(t, "ci-reader")
		for _, tok := range []string{platform, deploy, reader} {
			a := tb.sendAs(t, tok, http.MethodGet, read, nil, nil)
			require.Equal(t, http.StatusOK, a.status, "%s", a.body)
		}
		// groups:platform is admin (the highest of its rules), acme-dev operator,
		// repository_owner:acme (a string claim) viewer.
		require.Equal(t, http.StatusNoContent, tb.sendAs(t, platform, http.MethodDelete, limit, nil, nil).status)
		a := tb.sendAs(t, deploy, http.MethodDelete, limit, nil, nil)
		require.Equal(t, http.StatusForbidden, a.status)
		require.Contains(t, a.problem.Detail, "needs the admin role; the token has operator")
		require.Equal(t, http.StatusNotFound, tb.sendAs(t, deploy, http.MethodPost, start, nil, []byte(`{}`)).status)
		a = tb.sendAs(t, reader, http.MethodPost, start, nil, []byte(`{}`))
		require.Equal(t, http.StatusForbidden, a.status)
		require.Contains(t, a.problem.Detail, "needs the operator role; the token has viewer")
		// Static tokens keep working beside OIDC bearers.
		require.Equal(t, http.StatusOK, tb.send(t, http.MethodGet, read, nil, nil).status)
	})

	t.Run("unmapped", func(t *testing.T) {
		a := tb.sendAs(t, p.Token(t, "ci-stranger"), http.MethodGet, read, nil, nil)
		require.Equal(t, http.StatusForbidden, a.status, "%s", a.body)
		require.Contains(t, a.problem.Detail, "maps to no role")
		require.Contains(t, a.problem.Detail, `"groups" (the token has: marketing)`)
		require.Contains(t, a.problem.Detail, `"repository_owner" (absent from the token)`)
	})

	t.Run("refused", func(t *testing.T) {
		for _, tc := range []struct {
			name, token, says string
		}{
			{"wrong audience", p.Token(t, "ci-elsewhere"), `audience "another-service" does not hold "cairn"`},
			{"expired", p.Token(t, "ci-expired"), "the OIDC token expired at"},
			{"forged claims", forge(t, p.Token(t, "ci-stranger"), "groups", []string{"platform"}), "signature is not valid"},
			{"not a JWT", "a.b.c", "the bearer token is not valid"},
		} {
			a := tb.sendAs(t, tc.token, http.MethodGet, read, nil, nil)
			require.Equal(t, http.StatusUnauthorized, a.status, "%s: %s", tc.name, a.body)
			require.Contains(t, a.problem.Detail, tc.says, tc.name)
			require.Contains(t, a.header.Get("WWW-Authenticate"), `error="invalid_token"`, tc.name)
		}
	})
}

// TestOIDCBearerKeyRotation rotates the provider's signing key: a token signed
// with the new key is accepted (the server fetches the keys again for the key
// ID it has not seen), the cached keys serve in between, and a token of a key
// the provider no longer publishes is refused.
func TestOIDCBearerKeyRotation(t *testing.T) {
	t.Parallel()
	tb, p := setupOIDC(t, nil)
	old := p.Token(t, "ci-platform")
	require.Equal(t, http.StatusOK, tb.sendAs(t, old, http.MethodGet, "/v1/workflows", nil, nil).status)
	require.Equal(t, http.StatusOK, tb.sendAs(t, old, http.MethodGet, "/v1/workflows", nil, nil).status)
	require.Equal(t, 1, p.JWKSFetches(), "the keys are cached")

	oldKey := p.KeyID()
	newKey := p.RotateKey(t, false)
	require.NotEqual(t, oldKey, newKey)
	fresh := p.Token(t, "ci-platform")
	require.Equal(t, newKey, keyID(t, fresh))
	a := tb.sendAs(t, fresh, http.MethodGet, "/v1/workflows", nil, nil)
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	require.Equal(t, 2, p.JWKSFetches(), "the new key was fetched")
	require.Equal(t, http.StatusOK, tb.sendAs(t, fresh, http.MethodGet, "/v1/workflows", nil, nil).status)
	require.Equal(t, 2, p.JWKSFetches(), "and cached")

	a = tb.sendAs(t, old, http.MethodGet, "/v1/workflows", nil, nil)
	require.Equal(t, http.StatusUnauthorized, a.status, "the old key is withdrawn: %s", a.body)
}

// TestOIDCBearerKeyIDFlood sends tokens naming key IDs the provider never had:
// the server fetches the provider's keys again for only a few of them, and the
// tokens of a known key keep passing.
func TestOIDCBearerKeyIDFlood(t *testing.T) {
	t.Parallel()
	tb, p := setupOIDC(t, &api.OIDCConfig{KeyRefetchBurst: 3, KeyRefetchEvery: time.Hour})
	good := p.Token(t, "ci-platform")
	require.Equal(t, http.StatusOK, tb.sendAs(t, good, http.MethodGet, "/v1/workflows", nil, nil).status)
	for i := range 20 {
		a := tb.sendAs(t, withKeyID(t, good, "made-up-"+string(rune('a'+i))), http.MethodGet, "/v1/workflows", nil, nil)
		require.Equal(t, http.StatusUnauthorized, a.status)
	}
	require.LessOrEqual(t, p.JWKSFetches(), 3, "at most the burst of fetches, the first one's included")
	// A real token still passes: its key, verified before, is known.
	require.Equal(t, http.StatusOK, tb.sendAs(t, good, http.MethodGet, "/v1/workflows", nil, nil).status)
}

// jwtPart decodes part i of a JWT into a map.
func jwtPart(t *testing.T, token string, i int) map[string]any {
	t.Helper()
	raw, err := base64.RawURLEncoding.DecodeString(strings.Split(token, ".")[i])
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(raw, &m))
	return m
}

// withPart returns token with part i replaced by m, the signature kept.
func withPart(t *testing.T, token string, i int, m map[string]any) string {
	t.Helper()
	b, err := json.Marshal(m)
	require.NoError(t, err)
	parts := strings.Split(token, ".")
	parts[i] = base64.RawURLEncoding.EncodeToString(b)
	return strings.Join(parts, ".")
}

// forge returns token with a claim changed and the provider's signature kept.
func forge(t *testing.T, token, claim string, value any) string {
	t.Helper()
	m := jwtPart(t, token, 1)
	m[claim] = value
	return withPart(t, token, 1, m)
}

func withKeyID(t *testing.T, token, kid string) string {
	t.Helper()
	h := jwtPart(t, token, 0)
	h["kid"] = kid
	return withPart(t, token, 0, h)
}

func keyID(t *testing.T, token string) string {
	t.Helper()
	kid, _ := jwtPart(t, token, 0)["kid"].(string)
	return kid
}

package api

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/danielgtaylor/huma/v2"
	"github.com/stretchr/testify/require"
)

const (
	testViewerToken   = "viewer-token-0123456789"
	testOperatorToken = "operator-token-0123456789"
	testAdminToken    = "admin-token-0123456789"
)

func testTokens(t *testing.T) *Tokens {
	t.Helper()
	tokens, err := ParseTokens("viewer:" + testViewerToken + ", operator:" + testOperatorToken + ",admin:" + testAdminToken)
	require.NoError(t, err)
	return tokens
}

// TestAuthEveryOperation walks every operation of the served OpenAPI document: the
// ones that need a role answer 401 without a token or with an unknown one, and 403
// when the token's role is too low. The check happens before any handler runs, so no
// database is needed.
func TestAuthEveryOperation(t *testing.T) {
	t.Parallel()
	s := New(nil, nil, &Config{Tokens: testTokens(t)})
	h := s.Handler()
	tokenFor := map[Role]string{RoleViewer: testViewerToken, RoleOperator: testOperatorToken, RoleAdmin: testAdminToken}

	checked := 0
	for path, item := range s.API().OpenAPI().Paths {
		ops := map[string]*huma.Operation{http.MethodGet: item.Get, http.MethodPost: item.Post, http.MethodPut: item.Put, http.MethodDelete: item.Delete, http.MethodPatch: item.Patch}
		for method, op := range ops {
			if op == nil {
				continue
			}
			need, _ := op.Metadata[metaRole].(Role)
			url := strings.NewReplacer("{name}", "x", "{version}", "1", "{digest}", "sha256:"+strings.Repeat("0", 64), "{id}", "00000000-0000-0000-0000-000000000000", "{key}", "k", "{workflow}", "x", "{hook}", "h").Replace(path)
			do := func(token string) int {
				req := httptest.NewRequest(method, url, nil)
				if token != "" {
					req.Header.Set("Authorization", "Bearer "+token)
				}
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				return rec.Code
			}
			if need == RoleNone {
				if path == "/v1/runs/{id}/steps/{key}/checkpoint" || path == "/v1/callbacks/{token}" {
					// Authenticated by the attempt's lease credential (a callback: its
					// signed token) instead of a role.
					require.Equal(t, http.StatusUnauthorized, do(""), "%s %s without a credential", method, path)
					require.Equal(t, http.StatusUnauthorized, do(testOperatorToken), "%s %s with a role token", method, path)
					continue
				}
				if path == "/v1/hooks/{workflow}/{hook}" {
					// Authenticated by the delivery's signature instead of a role.
					require.Equal(t, http.StatusUnauthorized, do(""), "%s %s without a signature", method, path)
					require.Equal(t, http.StatusUnauthorized, do(testOperatorToken), "%s %s with a role token", method, path)
					continue
				}
				require.Contains(t, []string{"/healthz", "/readyz"}, path, "only health checks are public")
				continue
			}
			checked++
			require.Equal(t, http.StatusUnauthorized, do(""), "%s %s without a token", method, path)
			require.Equal(t, http.StatusUnauthorized, do("not-a-known-token-at-all"), "%s %s with an unknown token", method, path)
			require.NotEmpty(t, op.Security, "%s %s declares its security in the OpenAPI document", method, path)
			for role := RoleViewer; role < need; role++ {
				require.Equal(t, http.StatusForbidden, do(tokenFor[role]), "%s %s with role %s", method, path, role)
			}
		}
	}
	require.Positive(t, checked, "no protected operation found")
}

func TestTokens(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		spec    string
		wantErr string
	}{
		{name: "valid", spec: "viewer:" + testViewerToken},
		{name: "unknown role", spec: "root:" + testViewerToken, wantErr: "unknown role"},
		{name: "short token", spec: "viewer:short", wantErr: "shorter than"},
		{name: "no colon", spec: testViewerToken, wantErr: "role:token"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tokens, err := ParseTokens(tt.spec)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, RoleViewer, tokens.Lookup(testViewerToken))
			require.Equal(t, RoleNone, tokens.Lookup(testViewerToken+"x"))
		})
	}
}

// TestTokenNames: a token may carry the name its actions are recorded under
// (role:name:token); without one it is named after its role and marked Unnamed, and
// a token that itself holds colons still reads as before names existed. A token's
// hash identifies it as the token does.
func TestTokenNames(t *testing.T) {
	t.Parallel()
	const colonToken = "abcdefghijklmnop:q"
	tokens, err := ParseTokens("operator:alice:" + testOperatorToken + ",viewer:" + testViewerToken +
		",admin:" + colonToken + ",operator:bob@example.com:" + testAdminToken)
	require.NoError(t, err)
	require.Equal(t, Identity{Role: RoleOperator, Name: "alice"}, tokens.Identify(testOperatorToken))
	require.Equal(t, Identity{Role: RoleViewer, Name: "viewer", Unnamed: true}, tokens.Identify(testViewerToken))
	require.Equal(t, tokens.Identify(testOperatorToken), tokens.IdentifyHash(TokenHash(testOperatorToken)))
	require.Equal(t, Identity{}, tokens.IdentifyHash(TokenHash(testOperatorToken+"x")))
	require.Equal(t, Identity{Role: RoleOperator, Name: "bob@example.com"}, tokens.Identify(testAdminToken))
	// "abcdefghijklmnop" could be a name, but "q" is too short to be a token: the
	// whole "abcdefghijklmnop:q" is the token.
	require.Equal(t, RoleAdmin, tokens.Identify(colonToken).Role)
	require.Equal(t, Identity{}, tokens.Identify("alice:"+testOperatorToken))

	_, err = ParseTokens("operator:al ice:" + testOperatorToken)
	require.NoError(t, err, "a middle part that is no name belongs to the token")
}

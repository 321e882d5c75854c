package api_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/api"
	"github.com/cairnrun/cairn/blobstore"
	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/internal/testenv"
	"github.com/cairnrun/cairn/secrets"
)

// setupWithSecrets is setup with a secret key and viewer, operator and admin
// (named "root") tokens; keys nil means no secret key.
func setupWithSecrets(t *testing.T, keys *secrets.Keyring) *testBundle {
	t.Helper()
	tb, _ := setupWithSecretsRegistry(t, keys)
	return tb
}

// setupWithSecretsRegistry is setupWithSecrets, with the registry of the server's
// metrics.
func setupWithSecretsRegistry(t *testing.T, keys *secrets.Keyring) (*testBundle, *prometheus.Registry) {
	t.Helper()
	store := catalog.New(testenv.DB(t), nil)
	blobDir := t.TempDir()
	blobs, err := blobstore.NewFile(blobDir, nil)
	require.NoError(t, err)
	tokens, err := api.ParseTokens("operator:" + operatorToken + ",viewer:" + viewerToken + ",admin:root:" + adminToken)
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	srv := api.New(store, blobs, &api.Config{Tokens: tokens, TempDir: t.TempDir(), SecretKeys: keys, Registry: reg})
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	return &testBundle{store: store, blobDir: blobDir, url: hs.URL}, reg
}

func testKeyring(t *testing.T) *secrets.Keyring {
	t.Helper()
	k, err := secrets.ParseKeyring(secrets.GenerateKey(), "")
	require.NoError(t, err)
	return k
}

// TestSecrets: an admin sets a secret (each PUT a new version) and lists them; the
// list and the answers never carry the value, nor does the stored row; a viewer and
// an operator are refused; a bad name is a 422 naming it.
func TestSecrets(t *testing.T) {
	t.Parallel()
	tb := setupWithSecrets(t, testKeyring(t))
	const value = "gh-webhook-secret-value-42"

	a := tb.sendAs(t, adminToken, http.MethodPut, "/v1/secrets/github", nil, []byte(`{"value":"`+value+`"}`))
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	put := decode[api.Secret](t, a)
	require.Equal(t, 1, put.Version)
	require.Equal(t, "root", put.CreatedBy, "the token's name")
	require.NotContains(t, string(a.body), value)
	a = tb.sendAs(t, adminToken, http.MethodPut, "/v1/secrets/github", nil, []byte(`{"value":"`+value+`-2"}`))
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	require.Equal(t, 2, decode[api.Secret](t, a).Version)

	a = tb.sendAs(t, adminToken, http.MethodGet, "/v1/secrets", nil, nil)
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	require.NotContains(t, string(a.body), value)
	list := decode[api.List[api.Secret]](t, a)
	require.Len(t, list.Items, 1)
	require.Equal(t, "github", list.Items[0].Name)
	require.Equal(t, 2, list.Items[0].Version)
	require.Equal(t, "root", list.Items[0].CreatedBy)

	var sealed [][]byte
	require.NoError(t, tb.store.DB().SelectContext(context.Background(), &sealed, `SELECT sealed FROM secret_versions`))
	require.Len(t, sealed, 2)
	for _, s := range sealed {
		require.False(t, bytes.Contains(s, []byte(value)), "a stored row holds the value")
	}

	for _, token := range []string{viewerToken, operatorToken} {
		a = tb.sendAs(t, token, http.MethodPut, "/v1/secrets/github", nil, []byte(`{"value":"x"}`))
		require.Equal(t, http.StatusForbidden, a.status, "%s", a.body)
		a = tb.sendAs(t, token, http.MethodGet, "/v1/secrets", nil, nil)
		require.Equal(t, http.StatusForbidden, a.status, "%s", a.body)
	}

	a = tb.sendAs(t, adminToken, http.MethodPut, "/v1/secrets/Not_A_Name", nil, []byte(`{"value":"x"}`))
	require.Equal(t, http.StatusUnprocessableEntity, a.status, "%s", a.body)
	require.Equal(t, []string{"path.name"}, a.locations())
	a = tb.sendAs(t, adminToken, http.MethodPut, "/v1/secrets/empty", nil, []byte(`{"value":""}`))
	require.Equal(t, http.StatusUnprocessableEntity, a.status, "%s", a.body)
	require.Equal(t, []string{"body.value"}, a.locations())
}

// TestSecretsWithoutKey: a server without CAIRN_SECRET_KEY says how to set it.
func TestSecretsWithoutKey(t *testing.T) {
	t.Parallel()
	tb := setupWithSecrets(t, nil)
	a := tb.sendAs(t, adminToken, http.MethodPut, "/v1/secrets/github", nil, []byte(`{"value":"x"}`))
	require.Equal(t, http.StatusServiceUnavailable, a.status, "%s", a.body)
	require.Equal(t, "secret_key_missing", a.problem.Code)
	require.Contains(t, a.problem.Detail, "CAIRN_SECRET_KEY")
}

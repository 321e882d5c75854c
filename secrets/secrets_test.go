package secrets_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/internal/testenv"
	"github.com/cairnrun/cairn/secrets"
)

func mustKey(t *testing.T) *secrets.Key {
	t.Helper()
	k, err := secrets.ParseKey(secrets.GenerateKey())
	require.NoError(t, err)
	return k
}

func setup(t *testing.T) (context.Context, *catalog.Store) {
	t.Helper()
	return context.Background(), catalog.New(testenv.DB(t), nil)
}

// TestStoredRowHoldsNoValue: what reaches the catalog is ciphertext; the value is
// nowhere in the row, and it reveals whole with the key.
func TestStoredRowHoldsNoValue(t *testing.T) {
	t.Parallel()
	ctx, store := setup(t)
	vault := secrets.NewVault(store, secrets.NewKeyring(mustKey(t)))
	value := []byte("whsec_0123456789abcdefghijklmnop")
	v, err := vault.Put(ctx, "stripe-hook", value, "alice")
	require.NoError(t, err)
	require.Equal(t, 1, v.Version)
	require.Equal(t, "alice", v.CreatedBy)
	require.WithinDuration(t, time.Now(), v.CreatedAt, time.Minute)

	var rows []struct {
		Key    string `db:"key_id"`
		Sealed []byte `db:"sealed"`
		By     string `db:"created_by"`
	}
	require.NoError(t, store.DB().SelectContext(ctx, &rows, `SELECT key_id, sealed, created_by FROM secret_versions`))
	require.Len(t, rows, 1)
	require.False(t, bytes.Contains(rows[0].Sealed, value), "the stored row holds the value")
	require.False(t, bytes.Contains(rows[0].Sealed, value[:8]), "the stored row holds part of the value")
	require.NotContains(t, rows[0].Key, string(value[:8]))
	require.Equal(t, "alice", rows[0].By)

	got, version, err := vault.Reveal(ctx, "stripe-hook")
	require.NoError(t, err)
	require.Equal(t, value, got)
	require.Equal(t, 1, version)
}

// TestVersions: every put is a new version; the newest is revealed; concurrent puts
// get consecutive numbers; the list shows names and versions.
func TestVersions(t *testing.T) {
	t.Parallel()
	ctx, store := setup(t)
	vault := secrets.NewVault(store, secrets.NewKeyring(mustKey(t)))
	var g errgroup.Group
	for i := range 10 {
		g.Go(func() error {
			_, err := vault.Put(ctx, "token", []byte(fmt.Sprint("value-", i)), "admin")
			return err
		})
	}
	require.NoError(t, g.Wait())
	_, err := vault.Put(ctx, "token", []byte("final"), "bob")
	require.NoError(t, err)
	got, version, err := vault.Reveal(ctx, "token")
	require.NoError(t, err)
	require.Equal(t, "final", string(got))
	require.Equal(t, 11, version)

	_, err = vault.Put(ctx, "another", []byte("x"), "admin")
	require.NoError(t, err)
	list, err := store.SecretList(ctx, &catalog.SecretListParams{Limit: 10})
	require.NoError(t, err)
	require.Len(t, list, 2)
	require.Equal(t, "another", list[0].Name)
	require.Equal(t, "token", list[1].Name)
	require.Equal(t, 11, list[1].Version)
	require.Equal(t, "bob", list[1].CreatedBy)
	require.Empty(t, list[1].Sealed)

	_, err = vault.Put(ctx, "Bad Name", []byte("x"), "admin")
	require.ErrorIs(t, err, catalog.ErrInvalidInput)
	_, _, err = vault.Reveal(ctx, "missing")
	require.ErrorIs(t, err, catalog.ErrNotFound)
}

// TestWrongKey: a server with another key cannot open a secret, and says why; with
// the old key configured as an old key, it can (rotation), and new versions are
// sealed with the new key.
func TestWrongKey(t *testing.T) {
	t.Parallel()
	ctx, store := setup(t)
	oldKey, newKey := mustKey(t), mustKey(t)
	_, err := secrets.NewVault(store, secrets.NewKeyring(oldKey)).Put(ctx, "gh", []byte("s3cret"), "admin")
	require.NoError(t, err)

	_, _, err = secrets.NewVault(store, secrets.NewKeyring(newKey)).Reveal(ctx, "gh")
	require.ErrorIs(t, err, secrets.ErrUnknownKey)
	require.ErrorContains(t, err, "CAIRN_SECRET_KEYS_OLD")

	rotated := secrets.NewVault(store, secrets.NewKeyring(newKey, oldKey))
	got, _, err := rotated.Reveal(ctx, "gh")
	require.NoError(t, err)
	require.Equal(t, "s3cret", string(got))
	_, err = rotated.Put(ctx, "gh", []byte("s3cret-2"), "admin")
	require.NoError(t, err)
	got, _, err = secrets.NewVault(store, secrets.NewKeyring(newKey)).Reveal(ctx, "gh")
	require.NoError(t, err, "the new version is sealed with the new key")
	require.Equal(t, "s3cret-2", string(got))

	// A sealed value does not open under another name, nor with a key that is not
	// the one that sealed it.
	ring := secrets.NewKeyring(oldKey)
	id, sealed, err := ring.Seal("a", []byte("v"))
	require.NoError(t, err)
	_, err = ring.Open("b", id, sealed)
	require.ErrorIs(t, err, secrets.ErrDecrypt)
	tampered := bytes.Clone(sealed)
	tampered[len(tampered)-1] ^= 1
	_, err = ring.Open("a", id, tampered)
	require.ErrorIs(t, err, secrets.ErrDecrypt)

	// Without a key, nothing is stored or opened, and the error says how to set one.
	none := secrets.NewVault(store, nil)
	_, err = none.Put(ctx, "gh", []byte("x"), "admin")
	require.ErrorIs(t, err, secrets.ErrNoKey)
	require.ErrorContains(t, err, "CAIRN_SECRET_KEY")
	_, _, err = none.Reveal(ctx, "gh")
	require.ErrorIs(t, err, secrets.ErrNoKey)
}

func TestParseKeyring(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, current, old, wantErr string
		configured                  bool
	}{
		{name: "none"},
		{name: "current", current: secrets.GenerateKey(), configured: true},
		{name: "current and old", current: secrets.GenerateKey(), old: secrets.GenerateKey() + "," + secrets.GenerateKey(), configured: true},
		{name: "short", current: "c2hvcnQ=", wantErr: "5 bytes, want 32"},
		{name: "not base64", current: "!!!", wantErr: "not base64"},
		{name: "old without current", old: secrets.GenerateKey(), wantErr: "need a current key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			k, err := secrets.ParseKeyring(tt.current, tt.old)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.configured, k.Configured())
		})
	}
}

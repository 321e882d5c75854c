package catalog

import (
	"context"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"
)

const (
	sqlSecretPut = `SELECT version, created_at FROM cairn_secret_put($1, $2, $3, $4)`

	sqlSecretLatest = `
SELECT v.name, v.version, v.key_id, v.sealed, v.created_at, v.created_by
FROM secrets s JOIN secret_versions v ON v.name = s.name AND v.version = s.latest_version
WHERE s.name = $1`

	sqlSecretList = `
SELECT v.name, v.version, v.key_id, v.created_at, v.created_by, s.created_at AS first_created_at
FROM secrets s JOIN secret_versions v ON v.name = s.name AND v.version = s.latest_version
WHERE s.name > $1 AND ($3::text IS NULL OR cairn_namespace(s.name) = $3::text)
ORDER BY s.name
LIMIT $2`
)

// SecretVersion is one version of a secret as the catalog stores it: sealed (see
// package secrets, the one place that opens it). The catalog never sees a value.
type SecretVersion struct {
	Name    string `db:"name"`
	Version int    `db:"version"`
	// KeyID names the key that sealed it.
	KeyID string `db:"key_id"`
	// Sealed is the ciphertext; empty in lists.
	Sealed    []byte    `db:"sealed"`
	CreatedAt time.Time `db:"created_at"`
	CreatedBy string    `db:"created_by"`
	// FirstCreatedAt is when the secret's first version was made (lists only).
	FirstCreatedAt *time.Time `db:"first_created_at"`
}

// SecretPutParams describe a new version of a secret.
type SecretPutParams struct {
	// Name: like a step key (^[a-z0-9][a-z0-9_-]{0,62}$).
	Name   string
	KeyID  string
	Sealed []byte
	// Actor is who set it (the token's name).
	Actor string
}

// SecretPut records the next version of a secret (the first creates it) and returns
// it, without the sealed value. ErrInvalidInput for a bad name.
func (s *Store) SecretPut(ctx context.Context, p *SecretPutParams) (*SecretVersion, error) {
	v := SecretVersion{Name: p.Name, KeyID: p.KeyID, CreatedBy: p.Actor}
	if err := s.inTx(ctx, func(tx *sqlx.Tx) error { // the audit record's transaction (audit.go)
		return tx.QueryRowxContext(ctx, sqlSecretPut, p.Name, p.KeyID, p.Sealed, p.Actor).Scan(&v.Version, &v.CreatedAt)
	}); err != nil {
		return nil, fmt.Errorf("put secret %s: %w", p.Name, err)
	}
	return &v, nil
}

// SecretLatest returns the newest version of a secret, sealed. ErrNotFound if no
// secret has that name.
func (s *Store) SecretLatest(ctx context.Context, name string) (*SecretVersion, error) {
	var v SecretVersion
	if err := s.db.GetContext(ctx, &v, sqlSecretLatest, name); err != nil {
		return nil, fmt.Errorf("get secret %s: %w", name, translateError(err))
	}
	return &v, nil
}

// SecretListParams select a page of secrets by name.
type SecretListParams struct {
	// After lists names greater than it (the keyset cursor); "" starts at the top.
	After string
	// Limit is the page size.
	Limit int
	// Namespace, when not empty, keeps its secrets only (package namespace).
	Namespace string
}

// SecretList returns a page of secrets ordered by name, each by its newest version,
// without the sealed value.
func (s *Store) SecretList(ctx context.Context, p *SecretListParams) ([]SecretVersion, error) {
	var out []SecretVersion
	if err := s.db.SelectContext(ctx, &out, sqlSecretList, p.After, p.Limit, nullString(p.Namespace)); err != nil {
		return nil, fmt.Errorf("list secrets: %w", translateError(err))
	}
	return out, nil
}

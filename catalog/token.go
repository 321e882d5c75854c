package catalog

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"
)

// Managed API tokens (POST /v1/tokens, docs/security.md "Managed tokens"): the
// catalog keeps a token's SHA-256, never its value. The API looks a token up by
// its hash (TokenLookup) and caches the answer for less than a second.

const (
	tokenColumns = `id, name, role, namespace, created_at, created_by, expires_at, revoked_at, revoked_by, last_used_at`

	sqlTokenCreate = `
INSERT INTO api_tokens (id, name, role, token_hash, created_by, expires_at, namespace)
VALUES ($1, $2, $3, $4, $5, $6, $7)
RETURNING ` + tokenColumns

	// sqlTokenList pages the tokens newest first (ids are UUIDv7: time-ordered;
	// $1: before this id, or NULL).
	sqlTokenList = `SELECT ` + tokenColumns + ` FROM api_tokens
WHERE ($1::uuid IS NULL OR id < $1) AND ($2 OR revoked_at IS NULL)
ORDER BY id DESC LIMIT $3`

	sqlTokenRevoke = `
UPDATE api_tokens SET revoked_at = now(), revoked_by = $2
WHERE id = $1 AND revoked_at IS NULL
RETURNING ` + tokenColumns

	sqlTokenGet = `SELECT ` + tokenColumns + ` FROM api_tokens WHERE id = $1`

	// sqlTokenLookup finds a token by its hash and, in the same statement, notes
	// its use: last_used_at is written only when it is a minute old or more, so
	// lookups of a busy token write once a minute, not once per request (and the
	// API looks up once per cache lifetime, not per request either).
	sqlTokenLookup = `
WITH t AS (SELECT ` + tokenColumns + ` FROM api_tokens WHERE token_hash = $1),
used AS (
    UPDATE api_tokens a SET last_used_at = now()
    FROM t
    WHERE a.id = t.id AND t.revoked_at IS NULL AND (t.expires_at IS NULL OR t.expires_at > now())
      AND (a.last_used_at IS NULL OR a.last_used_at < now() - interval '1 minute'))
SELECT ` + tokenColumns + ` FROM t`
)

// LastUsedInterval is how stale Token.LastUsedAt may be: a token's use is written
// at most once per interval.
const LastUsedInterval = time.Minute

// Token is a managed API token (its value is never stored).
type Token struct {
	ID   uuid.UUID `db:"id"`
	Name string    `db:"name"`
	// Role is "viewer", "operator" or "admin".
	Role string `db:"role"`
	// Namespace is the one namespace the token acts in; nil: every namespace.
	Namespace *string   `db:"namespace"`
	CreatedAt time.Time `db:"created_at"`
	CreatedBy string    `db:"created_by"`
	// ExpiresAt is when the token stops working; nil: never.
	ExpiresAt *time.Time `db:"expires_at"`
	// RevokedAt and RevokedBy say when and by whom it was revoked; nil: it was not.
	RevokedAt *time.Time `db:"revoked_at"`
	RevokedBy *string    `db:"revoked_by"`
	// LastUsedAt is when a request last used it, at most LastUsedInterval stale;
	// nil: never used.
	LastUsedAt *time.Time `db:"last_used_at"`
}

// TokenCreateParams describe a new token.
type TokenCreateParams struct {
	Name, Role string
	// Hash is the SHA-256 of the token's value (32 bytes).
	Hash []byte
	// CreatedBy is the actor who creates it.
	CreatedBy string
	// ExpiresAt, when set, is when the token stops working.
	ExpiresAt *time.Time
	// Namespace, when set, is the one namespace the token acts in; nil: every
	// namespace.
	Namespace *string
}

// TokenCreate stores a new token. ErrConflict if its hash is already stored
// (a value made twice: the caller made it badly).
func (s *Store) TokenCreate(ctx context.Context, p TokenCreateParams) (*Token, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return nil, fmt.Errorf("create a token: %w", err)
	}
	var out Token
	err = s.inTx(ctx, func(tx *sqlx.Tx) error {
		return tx.GetContext(ctx, &out, sqlTokenCreate, id, p.Name, p.Role, p.Hash, p.CreatedBy, p.ExpiresAt, p.Namespace)
	})
	if err != nil {
		return nil, fmt.Errorf("create a token: %w", err)
	}
	return &out, nil
}

// TokenListParams page TokenList.
type TokenListParams struct {
	// Before pages: tokens created before this one; uuid.Nil from the newest.
	Before uuid.UUID
	// Revoked includes the revoked tokens.
	Revoked bool
	// Limit is at most 1000; default 100.
	Limit int
}

// TokenList returns the managed tokens, newest first.
func (s *Store) TokenList(ctx context.Context, p TokenListParams) ([]Token, error) {
	if p.Limit <= 0 || p.Limit > 1000 {
		p.Limit = 100
	}
	var before any
	if p.Before != uuid.Nil {
		before = p.Before
	}
	var out []Token
	if err := s.db.SelectContext(ctx, &out, sqlTokenList, before, p.Revoked, p.Limit); err != nil {
		return nil, fmt.Errorf("list tokens: %w", translateError(err))
	}
	return out, nil
}

// TokenRevoke revokes token id on behalf of by and returns it. ErrNotFound if
// there is no such token; a token revoked already is returned as it is.
func (s *Store) TokenRevoke(ctx context.Context, id uuid.UUID, by string) (*Token, error) {
	var out Token
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		err := tx.GetContext(ctx, &out, sqlTokenRevoke, id, by)
		if errors.Is(translateError(err), ErrNotFound) {
			return tx.GetContext(ctx, &out, sqlTokenGet, id)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("revoke token %s: %w", id, err)
	}
	return &out, nil
}

// TokenLookup returns the token whose value hashes to hash, revoked and expired
// ones included (the caller tells them apart), and notes its use
// (Token.LastUsedAt, at most once per LastUsedInterval). ErrNotFound if none.
func (s *Store) TokenLookup(ctx context.Context, hash []byte) (*Token, error) {
	var out Token
	if err := s.db.GetContext(ctx, &out, sqlTokenLookup, hash); err != nil {
		return nil, fmt.Errorf("look up a token: %w", translateError(err))
	}
	return &out, nil
}

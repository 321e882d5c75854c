package catalog

import (
	"context"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"
)

// Sessions of the web UI (table sessions; docs/security.md, "The web UI's
// sessions"): a logged-in browser holds a
// random session ID in its cookie, never an API token; the catalog keeps the ID's
// hash, the hash of the token it logged in with, who that was and until when.

const (
	sqlSessionCreate = `
INSERT INTO ui_sessions (id_hash, token_hash, name, role, expires_at, namespace)
VALUES ($1, $2, $3, $4, $5, $6)
RETURNING created_at`
	// Expired sessions are deleted a batch at a time, by each login.
	sqlSessionsExpire = `
DELETE FROM ui_sessions WHERE id_hash IN (
    SELECT id_hash FROM ui_sessions WHERE expires_at <= now() ORDER BY expires_at LIMIT $1)`
	sqlSessionGet = `
SELECT id_hash, token_hash, name, role, namespace, created_at, expires_at
FROM ui_sessions WHERE id_hash = $1 AND expires_at > now()`
	sqlSessionDelete = `DELETE FROM ui_sessions WHERE id_hash = $1`
	sqlSessionList   = `
SELECT id_hash, token_hash, name, role, namespace, created_at, expires_at
FROM ui_sessions WHERE expires_at > now() ORDER BY created_at, id_hash`
)

// sessionsExpireBatch is how many expired sessions a login deletes at most.
const sessionsExpireBatch = 100

// Session is a logged-in browser of the web UI.
type Session struct {
	// IDHash is the SHA-256 of the session's ID (the cookie's value), 32 bytes.
	IDHash []byte `db:"id_hash"`
	// TokenHash is the SHA-256 of the API token the session logged in with.
	TokenHash []byte `db:"token_hash"`
	// Name and Role are the token's when it logged in (the server's tokens decide
	// on every request).
	Name string `db:"name"`
	Role string `db:"role"`
	// Namespace is the namespace single sign-on gave the role in; "" every
	// namespace (and for a token's session: its token decides).
	Namespace string    `db:"namespace"`
	CreatedAt time.Time `db:"created_at"`
	// ExpiresAt ends the session: SessionGet no longer finds it.
	ExpiresAt time.Time `db:"expires_at"`
}

// SessionCreate stores a new session (CreatedAt is set), and deletes up to a
// hundred sessions that have expired: every login keeps the table clean. It is
// ErrConflict when a session has the same IDHash.
func (s *Store) SessionCreate(ctx context.Context, ss *Session) error {
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		if _, err := tx.ExecContext(ctx, sqlSessionsExpire, sessionsExpireBatch); err != nil {
			return err
		}
		return tx.GetContext(ctx, &ss.CreatedAt, sqlSessionCreate, ss.IDHash, ss.TokenHash, ss.Name, ss.Role, ss.ExpiresAt, ss.Namespace)
	})
	if err != nil {
		return fmt.Errorf("create a UI session: %w", err)
	}
	return nil
}

// SessionGet returns the session whose ID hashes to idHash; ErrNotFound when there
// is none or it has expired.
func (s *Store) SessionGet(ctx context.Context, idHash []byte) (*Session, error) {
	var out Session
	if err := s.db.GetContext(ctx, &out, sqlSessionGet, idHash); err != nil {
		return nil, fmt.Errorf("get a UI session: %w", translateError(err))
	}
	return &out, nil
}

// SessionDelete ends the session whose ID hashes to idHash (a logout); one that
// does not exist is no error.
func (s *Store) SessionDelete(ctx context.Context, idHash []byte) error {
	if _, err := s.db.ExecContext(ctx, sqlSessionDelete, idHash); err != nil {
		return fmt.Errorf("delete a UI session: %w", translateError(err))
	}
	return nil
}

// SessionList returns the sessions that have not expired, oldest first.
func (s *Store) SessionList(ctx context.Context) ([]Session, error) {
	var out []Session
	if err := s.db.SelectContext(ctx, &out, sqlSessionList); err != nil {
		return nil, fmt.Errorf("list UI sessions: %w", translateError(err))
	}
	return out, nil
}

package catalog

import (
	"context"
	"time"

	"github.com/jmoiron/sqlx"
)

// ClaimAlone is the claim in one statement (claimAlone), which StepClaim uses
// only when no concurrency key takes turns: for tests that race it alone.
func ClaimAlone(s *Store, ctx context.Context, owner string, limit int, ttl time.Duration) ([]Claimed, error) {
	out, _, _, quoted, err := s.claimAlone(ctx, owner, []string{}, limit, ttl, false)
	if err == nil && quoted {
		out, _, _, _, err = s.claimAlone(ctx, owner, []string{}, limit, ttl, true)
	}
	return out, err
}

// DispatchDB is the pool of the dispatcher's claims and finishes
// (Store.dispatch).
func DispatchDB(s *Store) *sqlx.DB { return s.dispatch.db }

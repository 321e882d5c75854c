package catalog

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"

	"github.com/cairnrun/cairn/namespace"
)

const (
	// The short ID's index: runs_short_id_idx (migration 00070).
	sqlRunLookupShort = `SELECT id FROM runs WHERE right(id::text, 12) = $1
  AND ($3::text IS NULL OR cairn_namespace(workflow) = $3::text) ORDER BY id DESC LIMIT $2`
	// A prefix of the ID: a range of the primary key.
	sqlRunLookupPrefix = `SELECT id FROM runs WHERE id >= $1 AND id <= $2
  AND ($4::text IS NULL OR cairn_namespace(workflow) = $4::text) ORDER BY id DESC LIMIT $3`
)

// RunLookup finds the runs whose ID a short form names, newest first, at most
// limit of them: the last 12 hex digits of the ID (the short ID the UI shows), or
// its first 8 to 31 hex digits (with or without the dashes). An ID that is neither
// finds nothing (no error). A whole UUID finds its run, if it exists. ns, when not
// empty, keeps the runs of that namespace only (package namespace).
func (s *Store) RunLookup(ctx context.Context, short string, limit int, ns string) ([]uuid.UUID, error) {
	short = strings.ToLower(strings.TrimSpace(short))
	var nsArg any
	if ns != "" {
		nsArg = ns
	}
	if id, err := uuid.Parse(short); err == nil {
		r, err := s.RunGet(ctx, id)
		if err != nil {
			if errors.Is(err, ErrNotFound) {
				return nil, nil
			}
			return nil, err
		}
		if ns != "" && namespace.Of(r.Workflow) != ns {
			return nil, nil
		}
		return []uuid.UUID{id}, nil
	}
	var out []uuid.UUID
	if len(short) == 12 && isHex(short) {
		if err := s.db.SelectContext(ctx, &out, sqlRunLookupShort, short, limit, nsArg); err != nil {
			return nil, fmt.Errorf("look up run %s: %w", short, translateError(err))
		}
		if len(out) > 0 {
			return out, nil
		}
	}
	digits := strings.ReplaceAll(short, "-", "")
	if len(digits) < 8 || len(digits) > 31 || !isHex(digits) {
		return out, nil
	}
	lo, _ := hex.DecodeString(padHex(digits, '0'))
	hi, _ := hex.DecodeString(padHex(digits, 'f'))
	if err := s.db.SelectContext(ctx, &out, sqlRunLookupPrefix, uuid.UUID(lo), uuid.UUID(hi), limit, nsArg); err != nil {
		return nil, fmt.Errorf("look up run %s: %w", short, translateError(err))
	}
	return out, nil
}

func isHex(s string) bool {
	for _, c := range s {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return s != ""
}

// padHex fills a prefix of 32 hex digits up with c.
func padHex(prefix string, c byte) string {
	return prefix + strings.Repeat(string(c), 32-len(prefix))
}

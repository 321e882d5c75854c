package catalog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/cairnrun/cairn/blobstore"
)

// The blob index: which object holds which content, for the objects a Put
// wrote once under a key of their own ("<kind>/u/<hex>") rather than under
// their content address (blobstore.PutOptions.Index). A row is a hint, never
// the reason to keep an object: the collector keeps what references name
// (catalog/blob_gc.go), and drops the rows of the objects it deletes in its
// sweep; a writer that finds a row claims its key and checks that the object
// exists before it names it.
const (
	sqlBlobLookup = `SELECT blob_key FROM blob_digests WHERE address = $1`

	// sqlBlobRecord records or replaces: any object recorded for an address
	// holds its content, so the last writer's does as well as the first's.
	sqlBlobRecord = `
INSERT INTO blob_digests (address, blob_key) VALUES ($1, $2)
ON CONFLICT (address) DO UPDATE SET blob_key = excluded.blob_key, recorded_at = now()`

	// sqlBlobDigestsDelete drops the records of objects $1, deleted.
	sqlBlobDigestsDelete = `DELETE FROM blob_digests WHERE blob_key = ANY ($1::text[])`
)

var _ blobstore.Index = (*Store)(nil)

// BlobLookup implements blobstore.Index: the key of the object recorded as
// holding the content of address ("<kind>/sha256/<hex>"), or "" when none is.
func (s *Store) BlobLookup(ctx context.Context, address string) (string, error) {
	var key string
	err := s.db.GetContext(ctx, &key, sqlBlobLookup, address)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("look up blob %s: %w", address, translateError(err))
	}
	return key, nil
}

// BlobRecord implements blobstore.Index: key holds the content of address,
// replacing an earlier record of address.
func (s *Store) BlobRecord(ctx context.Context, address, key string) error {
	if _, err := s.db.ExecContext(ctx, sqlBlobRecord, address, key); err != nil {
		return fmt.Errorf("record blob %s as %s: %w", key, address, translateError(err))
	}
	return nil
}

package catalog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

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

// ownKeysMigration is the contract migration after which every server reads
// payloads under keys of their own (migrations/00099_blob_own_keys.sql).
const ownKeysMigration = 99

// ownKeysRecheck is how long a server that found ownKeysMigration pending
// writes at content addresses before it looks again.
const ownKeysRecheck = 30 * time.Second

// sqlOwnKeys says whether ownKeysMigration is applied.
const sqlOwnKeys = `SELECT EXISTS (SELECT 1 FROM ` + gooseTable + ` WHERE version_id = $1 AND is_applied)`

// ownKeysCache remembers what sqlOwnKeys said: yes for good (a contract
// migration is not undone under running servers), no for ownKeysRecheck.
type ownKeysCache struct {
	mu      sync.Mutex
	yes     bool
	checked time.Time
}

// BlobIndex returns the index a writer passes as blobstore.PutOptions.Index, so
// that a large payload is written once under a key of its own, or nil while
// servers of an earlier release may run beside this one (migration 00099, a
// contract one, not applied yet): they read a payload at its content address
// only, where a Put without an index writes it. On an error it answers nil:
// the content address is always readable.
func (s *Store) BlobIndex(ctx context.Context) blobstore.Index {
	c := &s.ownKeys
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.yes && time.Since(c.checked) >= ownKeysRecheck {
		var yes bool
		if err := s.db.GetContext(ctx, &yes, sqlOwnKeys, ownKeysMigration); err != nil {
			s.cfg.Logger.WarnContext(ctx, "read whether payloads may be written under keys of their own; writing at content addresses", "err", err)
			return nil
		}
		c.yes, c.checked = yes, time.Now()
	}
	if !c.yes {
		return nil
	}
	return s
}

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

package catalog

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"

	"github.com/cairnrun/cairn/blobstore"
)

// Blob garbage collection: what the catalog knows of the blob store's objects.
//
// A blob is written before the row that names it, and content addressing lets
// a writer find its content already stored (same key) and name it without
// writing anything. So "no row names the object" is not enough to delete it: a
// writer may have just found it and be about to commit a row naming it. The
// protocol that closes this race:
//
//   - A writer claims the key (BlobClaim) before its Put looks whether the
//     object is stored (blobstore.PutOptions.Claim), and commits the row that
//     names it within the grace period. The claim takes the key's advisory lock
//     in shared mode, so writers never wait for each other.
//   - The collector marks: one snapshot of every key a row names (BlobRefs).
//     It then considers only objects older than the grace period that the mark
//     did not see, and deletes a batch of them in one transaction (BlobSweep)
//     that first checks that its pass still holds the collector's lease and
//     takes every key's advisory lock in exclusive mode, then, in a later
//     statement (so that it sees every claim committed before the locks were
//     granted), keeps the keys claimed since the mark began less the grace
//     period, deletes the other objects while it still holds the locks, and
//     commits.
//
// Why the sweep need not read the run tables again: a row committed after the
// mark's snapshot names a key that either a writer claimed (within the grace
// before that commit, so after the mark began less the grace), or that it
// copied from another row (a rerun's reused outputs, a child run's output, an
// archive's list), which was itself in the mark's snapshot (the key is marked,
// never swept in this pass) or committed after it (the same again, down to a
// claim). Only Cairn writes the references it reads back as blobs
// (blobstore.Ref: an output, checkpoint, signal or callback body from outside
// that mentions "$blob" is stored as bytes); a run input a client wrote with
// one is its own value, kept while the mark sees it, and what a map over it
// reads may be gone. The claims a pass keeps are never expired before it ends:
// the pass expires claims last, and a pass that lost its lease (another may
// have started and expired them) sweeps nothing more. A claim that commits
// before the sweep's check keeps the object; a claim that comes after the check
// waits for the sweep's locks, so the writer's Put runs after the object's
// deletion, finds it missing and stores it again. The check reads the places
// that do not grow with the runs (claims by key, versions' bundles,
// archived_blobs by key, schedules) again as well: one sweep costs a few index
// reads, not a scan of the catalog. The archive of an archived run is never
// collected, and the objects it names are recorded in archived_blobs in the
// transaction that deletes the run.
const (
	// blobLockPrefix namespaces the advisory locks of blob keys.
	blobLockPrefix = "cairn_blob:"

	// sqlBlobClaim takes key $1's advisory lock in shared mode (waiting while
	// a collector holds it) and records or refreshes its claim, in one
	// statement: the lock is held until it commits.
	//
	// Its commit is synchronous, one WAL flush per blob written. Committing it
	// with synchronous_commit off (set_config(…, true) in the statement) was
	// measured with pgbench on a loaded 2-core VM: 6.0 → 0.5–2.1 ms per claim
	// with one client, 3.0–4.8 → 0.7–2.1 ms with eight. It is not done, because
	// a claim lost in a crash loses data: PostgreSQL crashes after the claim
	// commits and before its WAL is flushed (up to 3 × wal_writer_delay); the
	// writer's Put finds the object already stored (content addressing, an
	// object older than the grace); after the restart the writer commits the
	// row naming it (its pool reconnects); a collector pass whose mark began
	// before that commit finds the object unnamed and its claim gone, and
	// deletes it: the row names a missing blob. (Were the row committed before
	// the crash, its synchronous commit would have flushed the claim's WAL
	// before its own; the loss needs the row's commit after the restart.) A
	// guard refusing to sweep for window after pg_postmaster_start_time()
	// closes the crash, but pauses collection for the grace (24 h by default)
	// after every restart, and does not see a streaming standby's promotion,
	// which loses a claim not yet sent to it the same way.
	sqlBlobClaim = `
WITH l AS (SELECT pg_advisory_xact_lock_shared(hashtextextended('` + blobLockPrefix + `' || $1, 0)))
INSERT INTO blob_claims (blob_key, claimed_at) SELECT $1, now() FROM l
ON CONFLICT (blob_key) DO UPDATE SET claimed_at = now()`

	// sqlBlobLock takes the advisory locks of keys $1 in exclusive mode, in
	// the order of their lock ids so that two collectors cannot deadlock.
	sqlBlobLock = `
SELECT count(pg_advisory_xact_lock(l.id)) FROM (
    SELECT DISTINCT hashtextextended('` + blobLockPrefix + `' || k, 0) AS id FROM unnest($1::text[]) AS k ORDER BY 1) l`

	// sqlBlobClaimsDelete drops the claims of keys $1, deleted, and their
	// records in the blob index (catalog/blob_index.go).
	sqlBlobClaimsDelete = `WITH d AS (` + sqlBlobDigestsDelete + `)
DELETE FROM blob_claims WHERE blob_key = ANY ($1::text[])`

	// sqlBlobClaimsExpire deletes up to $2 claims older than $1 seconds.
	sqlBlobClaimsExpire = `
DELETE FROM blob_claims c USING (
    SELECT blob_key FROM blob_claims WHERE claimed_at < now() - make_interval(secs => $1)
    ORDER BY claimed_at LIMIT $2 FOR UPDATE SKIP LOCKED) old
WHERE c.blob_key = old.blob_key`

	// sqlBlobGCTake takes the collector's lease for owner $1 for $2 seconds,
	// unless another holds it or the last pass ended less than $3 seconds ago.
	sqlBlobGCTake = `
UPDATE blob_gc SET owner = $1, expires_at = now() + make_interval(secs => $2)
WHERE (expires_at < now() OR owner = $1) AND finished_at <= now() - make_interval(secs => $3)
RETURNING true`

	sqlBlobGCRenew = `UPDATE blob_gc SET expires_at = now() + make_interval(secs => $2) WHERE owner = $1`

	// sqlBlobGCRelease ends owner $1's lease; $2: the pass completed, and
	// counts for the interval.
	sqlBlobGCRelease = `
UPDATE blob_gc SET owner = NULL, expires_at = '-infinity',
    finished_at = CASE WHEN $2 THEN now() ELSE finished_at END
WHERE owner = $1`
)

// blobPath finds the body of every {"$blob": …} reference (blobstore.Ref) at
// any depth of a jsonb value (lax mode skips what is not an object; duplicates
// are fine).
var blobPath = `'lax $.**."` + blobstore.RefKey + `"'`

// blobKeyOf is the SQL of blobstore.Ref.Key for r, a reference's body blobPath
// found: the key of the payload object that the reference names, its "key"
// (an object under a key of its own) or else its digest's content address
// (NULL for a body with neither, which callers skip).
func blobKeyOf(r string) string {
	return `coalesce(` + r + ` ->> 'key', '` + blobstore.KeyPrefix(blobstore.KindPayloads) + `' || substr(` + r + ` ->> 'digest', ` +
		strconv.Itoa(len(blobstore.DigestPrefix)+1) + `))`
}

// runBlobRefs returns a query of (run_id, key) for every object the rows of a
// run name: payload references in its input, steps, events, signals,
// approvals and maps, its attempts' logs and its maps' item blobs. cond
// returns the filter on a table's run id column, given its name.
func runBlobRefs(cond func(col string) string) string {
	payloads := []string{
		`SELECT id AS run_id, jsonb_path_query(jsonb_build_array(input, error), ` + blobPath + `) AS d FROM runs WHERE ` + cond("id"),
		`SELECT run_id, jsonb_path_query(jsonb_build_array(output, checkpoint, callback_output, map_item), ` + blobPath + `) FROM steps WHERE ` + cond("run_id"),
		`SELECT run_id, jsonb_path_query(data, ` + blobPath + `) FROM events WHERE ` + cond("run_id"),
		`SELECT run_id, jsonb_path_query(payload, ` + blobPath + `) FROM signals WHERE ` + cond("run_id"),
		`SELECT run_id, jsonb_path_query(input, ` + blobPath + `) FROM approvals WHERE input IS NOT NULL AND ` + cond("run_id"),
		`SELECT run_id, jsonb_path_query(items, ` + blobPath + `) FROM step_maps WHERE items IS NOT NULL AND ` + cond("run_id"),
	}
	return `
SELECT p.run_id, ` + blobKeyOf("p.d") + ` AS key FROM (
    ` + strings.Join(payloads, "\n    UNION ALL ") + `) p WHERE ` + blobKeyOf("p.d") + ` IS NOT NULL
UNION ALL SELECT run_id, log_key FROM attempts WHERE log_key IS NOT NULL AND ` + cond("run_id") + `
UNION ALL SELECT run_id, blob_key FROM step_maps WHERE blob_key IS NOT NULL AND ` + cond("run_id")
}

// sqlBlobRefs lists the key of every object a catalog row names, with
// repeats: the runs' rows, the bundles of versions, schedules' inputs,
// archives and what they name, and keys claimed less than $1 seconds ago.
var sqlBlobRefs = `
SELECT r.key FROM (` + runBlobRefs(func(string) string { return "true" }) + `) r
UNION ALL SELECT b.key FROM (` + sqlBundleKeys + `) b
UNION ALL SELECT s.key FROM (` + sqlScheduleKeys + `) s
UNION ALL SELECT blob_key FROM archived_runs
UNION ALL SELECT blob_key FROM archived_blobs
UNION ALL SELECT blob_key FROM blob_claims WHERE claimed_at > now() - make_interval(secs => $1)`

// sqlBundleKeys lists (key) the bundles of versions; sqlScheduleKeys the
// payloads that schedules' inputs name. sqlBlobRefs and sqlBlobKept read both.
const sqlBundleKeys = `SELECT b.blob_key AS key FROM bundles b JOIN workflow_versions v ON v.bundle_digest = b.digest`

var sqlScheduleKeys = `
    SELECT ` + blobKeyOf("d") + ` AS key FROM (
        SELECT jsonb_path_query(input, ` + blobPath + `) AS d FROM schedules WHERE input IS NOT NULL) x
    WHERE ` + blobKeyOf("d") + ` IS NOT NULL`

// sqlBlobRefsSizeHint is the rows of the tables sqlBlobRefs reads, by the
// planner's statistics (a table never analyzed counts 0): an upper bound of the
// references a mark finds, but for rows naming several, to size its set.
const sqlBlobRefsSizeHint = `
SELECT coalesce(sum(greatest(c.reltuples, 0)), 0)::bigint FROM pg_class c
WHERE c.oid IN ('runs'::regclass, 'steps'::regclass, 'events'::regclass, 'signals'::regclass,
                'approvals'::regclass, 'step_maps'::regclass, 'attempts'::regclass, 'bundles'::regclass,
                'schedules'::regclass, 'archived_runs'::regclass, 'archived_blobs'::regclass,
                'blob_claims'::regclass)`

// sqlBlobKept returns those of keys $2 that a sweep keeps (see the protocol
// above): claimed less than $1 seconds ago, a version's bundle, named by an
// archived run or by a schedule's input. Each is read by key or from a table
// that stays small, never from the run tables.
var sqlBlobKept = `
SELECT blob_key FROM blob_claims WHERE blob_key = ANY ($2::text[]) AND claimed_at > now() - make_interval(secs => $1)
UNION SELECT b.key FROM (` + sqlBundleKeys + `) b WHERE b.key = ANY ($2::text[])
UNION SELECT blob_key FROM archived_blobs WHERE blob_key = ANY ($2::text[])
UNION SELECT s.key FROM (` + sqlScheduleKeys + `) s WHERE s.key = ANY ($2::text[])`

// sqlBlobGCHeld is true when owner $1 holds the collector's lease; it
// share-locks the lease's row, so that no other pass takes it before the
// sweep that read it commits.
const sqlBlobGCHeld = `SELECT true FROM blob_gc WHERE owner = $1 AND expires_at > now() FOR SHARE`

// sqlArchivedBlobs records what the runs of $5 (being archived) that are in
// gone name; it is a CTE of sqlRunsDelete.
var sqlArchivedBlobs = `
archived_refs AS (
    INSERT INTO archived_blobs (blob_key, run_id)
    SELECT DISTINCT x.key, x.run_id FROM (` + runBlobRefs(func(col string) string { return col + " = ANY ($5::uuid[])" }) + `) x
    WHERE x.run_id IN (SELECT id FROM gone)
    ON CONFLICT DO NOTHING)`

// BlobClaim claims key for a writer about to name it in a row: the collector
// keeps the object for the grace period from now, and if it is deleting the
// object right now, BlobClaim waits until it is gone (so that the writer's Put
// stores it again). It is blobstore.PutOptions.Claim for writers of payloads,
// logs and bundles. Safe for concurrent use.
func (s *Store) BlobClaim(ctx context.Context, key string) error {
	if _, err := s.db.ExecContext(ctx, sqlBlobClaim, key); err != nil {
		return fmt.Errorf("claim blob %s: %w", key, translateError(err))
	}
	return nil
}

// BlobRefs calls fn with the key of every object a catalog row names (with
// repeats), and of every key claimed within grace. It reads one snapshot but
// locks nothing: BlobSweep checks again.
func (s *Store) BlobRefs(ctx context.Context, grace time.Duration, fn func(key string)) error {
	rows, err := s.db.QueryContext(ctx, sqlBlobRefs, grace.Seconds())
	if err != nil {
		return fmt.Errorf("blob references: %w", translateError(err))
	}
	defer rows.Close()
	for rows.Next() {
		var key string
		if err := rows.Scan(&key); err != nil {
			return fmt.Errorf("blob references: %w", translateError(err))
		}
		fn(key)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("blob references: %w", translateError(err))
	}
	return nil
}

// BlobRefsSizeHint returns about how many keys BlobRefs will find at most: the
// rows of the tables it reads, by the planner's statistics.
func (s *Store) BlobRefsSizeHint(ctx context.Context) (int64, error) {
	var n int64
	if err := s.db.GetContext(ctx, &n, sqlBlobRefsSizeHint); err != nil {
		return 0, fmt.Errorf("blob references' size: %w", translateError(err))
	}
	return n, nil
}

// BlobsKept returns those of keys, unmarked by a mark that began less than
// window − grace ago, that a sweep would keep (claimed within window, or named
// where the sweep looks again: see the protocol above), without locking (a dry
// run's check).
func (s *Store) BlobsKept(ctx context.Context, keys []string, window time.Duration) (map[string]bool, error) {
	var refs []string
	if err := s.db.SelectContext(ctx, &refs, sqlBlobKept, window.Seconds(), pq.Array(keys)); err != nil {
		return nil, fmt.Errorf("blobs kept: %w", translateError(err))
	}
	out := make(map[string]bool, len(refs))
	for _, k := range refs {
		out[k] = true
	}
	return out, nil
}

// BlobSweep is the collector's delete of keys, in one transaction, for the
// pass of owner, whose mark began less than window − grace ago and did not see
// the keys: it checks that owner still holds the collector's lease
// (ErrLeaseLost if not), locks the keys against claims, keeps those claimed
// within window or named where the sweep looks again (see the protocol above),
// calls del with the others while it holds the locks, drops the claims of what
// del returns as deleted, and returns it. An error of del (returned as is) ends
// the transaction; what del deleted before is gone all the same, which is fine:
// it was unreferenced.
func (s *Store) BlobSweep(ctx context.Context, owner string, keys []string, window time.Duration,
	del func(ctx context.Context, unreferenced []string) ([]string, error)) ([]string, error) {
	var deleted []string
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		deleted = nil
		var held []bool
		if err := tx.SelectContext(ctx, &held, sqlBlobGCHeld, owner); err != nil {
			return fmt.Errorf("check the collector's lease: %w", err)
		}
		if len(held) == 0 {
			return fmt.Errorf("%w: %s no longer holds the collector's lease (another pass may have expired the claims its mark relies on)", ErrLeaseLost, owner)
		}
		if _, err := tx.ExecContext(ctx, sqlBlobLock, pq.Array(keys)); err != nil {
			return fmt.Errorf("lock blobs: %w", err)
		}
		// A new statement: its snapshot holds every claim committed before the
		// locks were granted.
		var refs []string
		if err := tx.SelectContext(ctx, &refs, sqlBlobKept, window.Seconds(), pq.Array(keys)); err != nil {
			return fmt.Errorf("check blobs: %w", err)
		}
		referenced := make(map[string]bool, len(refs))
		for _, k := range refs {
			referenced[k] = true
		}
		var unref []string
		for _, k := range keys {
			if !referenced[k] {
				unref = append(unref, k)
			}
		}
		if len(unref) == 0 {
			return nil
		}
		var err error
		deleted, err = del(ctx, unref)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, sqlBlobClaimsDelete, pq.Array(deleted)); err != nil {
			return fmt.Errorf("drop claims: %w", err)
		}
		return nil
	})
	if err != nil {
		return deleted, fmt.Errorf("sweep blobs: %w", err)
	}
	return deleted, nil
}

// BlobClaimsExpire deletes up to limit claims older than grace (they protect
// nothing any more) and returns how many.
func (s *Store) BlobClaimsExpire(ctx context.Context, grace time.Duration, limit int) (int, error) {
	res, err := s.db.ExecContext(ctx, sqlBlobClaimsExpire, grace.Seconds(), limit)
	if err != nil {
		return 0, fmt.Errorf("expire blob claims: %w", translateError(err))
	}
	n, _ := res.RowsAffected()
	return int(n), nil
}

// BlobGCTake takes the collector's lease for owner, for ttl: false when
// another owner holds it, or when the last completed pass (dry or not) ended
// less than interval ago (0: whenever). Passes of every server share the
// lease, so one runs at a time and the servers share one interval.
func (s *Store) BlobGCTake(ctx context.Context, owner string, ttl, interval time.Duration) (bool, error) {
	var ok []bool
	if err := s.db.SelectContext(ctx, &ok, sqlBlobGCTake, owner, ttl.Seconds(), interval.Seconds()); err != nil {
		return false, fmt.Errorf("take the collector's lease: %w", translateError(err))
	}
	return len(ok) == 1, nil
}

// BlobGCRenew extends owner's lease to ttl from now (a no-op when owner does
// not hold it).
func (s *Store) BlobGCRenew(ctx context.Context, owner string, ttl time.Duration) error {
	if _, err := s.db.ExecContext(ctx, sqlBlobGCRenew, owner, ttl.Seconds()); err != nil {
		return fmt.Errorf("renew the collector's lease: %w", translateError(err))
	}
	return nil
}

// BlobGCRelease ends owner's lease; finished records the end of a completed
// pass, which counts for the interval.
func (s *Store) BlobGCRelease(ctx context.Context, owner string, finished bool) error {
	if _, err := s.db.ExecContext(ctx, sqlBlobGCRelease, owner, finished); err != nil {
		return fmt.Errorf("release the collector's lease: %w", translateError(err))
	}
	return nil
}

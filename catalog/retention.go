package catalog

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"
)

// DefaultIdempotencyTTL is how long an idempotency key holds by default.
const DefaultIdempotencyTTL = 24 * time.Hour

const (
	// retentionFrom joins a run to its version's retention: k.keep_s is how long
	// the run is kept after it finished, in seconds (-1: forever), from the
	// version ($1, $2, $3: the server's defaults for succeeded, failed and
	// canceled runs).
	retentionFrom = `
runs r
JOIN workflow_versions v ON v.workflow = r.workflow AND v.version = r.version
CROSS JOIN LATERAL (SELECT CASE r.status
                               WHEN 'succeeded' THEN coalesce(v.retain_succeeded_s, $1)
                               WHEN 'failed' THEN coalesce(v.retain_failed_s, $2)
                               ELSE coalesce(v.retain_canceled_s, $3)
                           END AS keep_s) k`

	// retentionExpired: the run finished longer ago than it is kept, and neither
	// its parent nor one of its children is unfinished (a parent reads its
	// children's ends; a child settles into its parent).
	retentionExpired = `
r.finished_at IS NOT NULL
AND k.keep_s >= 0
AND r.finished_at < now() - make_interval(secs => k.keep_s)
AND NOT EXISTS (SELECT 1 FROM runs p WHERE p.id = r.parent_id AND p.finished_at IS NULL)
AND NOT EXISTS (SELECT 1 FROM runs c WHERE c.parent_id = r.id AND c.finished_at IS NULL)`

	// sqlRunsExpired lists up to $5 expired runs, oldest end first, with whether
	// to archive them ($4: the server's setting). The scan of runs_finished_at_idx
	// is bounded by the shortest retention in force (the server's defaults and
	// every version's), so runs kept longer are read only past it.
	sqlRunsExpired = `
WITH bound AS (
    SELECT min(s) AS s FROM (
        SELECT unnest(ARRAY[$1::bigint, $2::bigint, $3::bigint]) AS s
        UNION ALL
        SELECT unnest(ARRAY[retain_succeeded_s, retain_failed_s, retain_canceled_s]) FROM workflow_versions
        WHERE definition ? 'retention') t
    WHERE s >= 0)
SELECT r.id, coalesce(v.retain_archive, $4) AS archive
FROM ` + retentionFrom + `
WHERE r.finished_at < now() - make_interval(secs => (SELECT s FROM bound))
  AND ` + retentionExpired + `
ORDER BY r.finished_at
LIMIT $5`

	sqlArchivedRunGet = `
SELECT run_id, workflow, status, finished_at, blob_key, archived_at FROM archived_runs WHERE run_id = $1`

	// sqlIdempotencyExpire deletes up to $2 keys older than $1 seconds, oldest
	// first, but a schedule's fire keys.
	sqlIdempotencyExpire = `
DELETE FROM idempotency_keys i USING (
    SELECT scope, key FROM idempotency_keys
    WHERE created_at <= now() - make_interval(secs => $1) AND scope <> '` + scheduleScope + `'
    ORDER BY created_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED) old
WHERE i.scope = old.scope AND i.key = old.key`

	// sqlReceivedEventsExpire deletes up to $2 received events older than $1
	// seconds, oldest first, but none that an unfinished run could still take: a
	// wait_for_event step takes the events received since its run was created
	// (sqlEventBuffered), so events received since the oldest unfinished run was
	// created are kept. Their event_takes go with them (ON DELETE CASCADE).
	sqlReceivedEventsExpire = `
DELETE FROM received_events e USING (
    SELECT seq FROM received_events
    WHERE received_at <= now() - make_interval(secs => $1)
      AND received_at < coalesce((SELECT min(created_at) FROM runs
                                  WHERE status IN ('pending', 'running', 'paused', 'compensating')), 'infinity')
    ORDER BY received_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED) old
WHERE e.seq = old.seq`

	sqlIdempotencyTakeOver = `
UPDATE idempotency_keys SET request_hash = $3, resource_id = $4, created_at = now()
WHERE scope = $1 AND key = $2 AND resource_id = $5`
)

var (
	// sqlRunsDelete deletes the runs of $4 that are still expired and not locked
	// (SKIP LOCKED: a run being retried or read for update is left for a later
	// pass), with their steps, edges, events, signals, queued spans, tree counts
	// and taken events (no foreign key since migrations 00025 and 00051, so that a busy
	// run's row is not share-locked by each row that names it: this statement is
	// the one that deletes runs), and clears rerun_of and parent_id in the runs
	// that name them. Their attempts go with the steps by the trigger
	// steps_deleted (catalog/sql/triggers.sql), their approvals and map rows with
	// the steps, their live logs, step history and child_run_ends rows with the
	// runs, by ON DELETE CASCADE.
	//
	// The runs archived before ($5: ids, $6: their archives' blob keys) get their
	// archived_runs row in the same statement, and archived_blobs rows for the
	// objects they name (sqlArchivedBlobs): the blob collector keeps those.
	sqlRunsDelete = `
WITH doomed AS (
    SELECT r.id FROM ` + retentionFrom + `
    WHERE r.id = ANY ($4::uuid[]) AND ` + retentionExpired + `
    FOR UPDATE OF r SKIP LOCKED),
gone AS (
    DELETE FROM runs d USING doomed WHERE d.id = doomed.id
    RETURNING d.id, d.workflow, d.status, d.finished_at),
gone_steps AS (
    DELETE FROM steps s USING doomed WHERE s.run_id = doomed.id),
gone_edges AS (
    DELETE FROM step_edges e USING doomed WHERE e.run_id = doomed.id),
gone_events AS (
    DELETE FROM events e USING doomed WHERE e.run_id = doomed.id),
gone_signals AS (
    DELETE FROM signals g USING doomed WHERE g.run_id = doomed.id),
gone_spans AS (
    DELETE FROM span_outbox o USING doomed WHERE o.run_id = doomed.id),
gone_trees AS (
    DELETE FROM run_trees t USING doomed WHERE t.root_id = doomed.id),
gone_takes AS (
    DELETE FROM event_takes t USING doomed WHERE t.run_id = doomed.id),
orphans AS (
    UPDATE runs o SET parent_id = CASE WHEN o.parent_id = ANY (d.ids) THEN NULL ELSE o.parent_id END,
                      rerun_of = CASE WHEN o.rerun_of = ANY (d.ids) THEN NULL ELSE o.rerun_of END
    FROM (SELECT array_agg(doomed.id) AS ids FROM doomed) d
    WHERE (o.parent_id = ANY (d.ids) OR o.rerun_of = ANY (d.ids)) AND o.id <> ALL (d.ids)),
archived AS (
    INSERT INTO archived_runs (run_id, workflow, status, finished_at, blob_key)
    SELECT g.id, g.workflow, g.status, g.finished_at, a.key
    FROM gone g JOIN unnest($5::uuid[], $6::text[]) AS a (id, key) ON a.id = g.id
    ON CONFLICT (run_id) DO UPDATE SET blob_key = EXCLUDED.blob_key, archived_at = now()),` + sqlArchivedBlobs + `
SELECT id FROM gone`
)

// RetentionDefaults are the server's retention of finished runs, for the
// versions that set none: a period per status, 0 (or negative) keeping the runs
// forever; and whether runs are archived before deletion.
type RetentionDefaults struct {
	Succeeded time.Duration
	Failed    time.Duration
	Canceled  time.Duration
	Archive   bool
}

func (d RetentionDefaults) args() []any {
	secs := func(p time.Duration) int64 {
		if p <= 0 {
			return -1
		}
		return int64(p / time.Second)
	}
	return []any{secs(d.Succeeded), secs(d.Failed), secs(d.Canceled)}
}

// ExpiredRun is a finished run past its retention.
type ExpiredRun struct {
	ID uuid.UUID `db:"id"`
	// Archive: the run is to be archived before its deletion.
	Archive bool `db:"archive"`
}

// RunsExpired lists up to limit finished runs past their retention (their
// version's, else d's), oldest end first. A run is never listed while its
// parent or one of its children is unfinished. It locks nothing: RunsDelete
// checks again.
func (s *Store) RunsExpired(ctx context.Context, d RetentionDefaults, limit int) ([]ExpiredRun, error) {
	var out []ExpiredRun
	args := append(d.args(), d.Archive, limit)
	if err := s.db.SelectContext(ctx, &out, sqlRunsExpired, args...); err != nil {
		return nil, fmt.Errorf("expired runs: %w", translateError(err))
	}
	return out, nil
}

// RunsDelete deletes, in one transaction, those of ids that are still past
// their retention and not locked by another transaction, with all their rows,
// and returns the ids it deleted. archives maps the ids archived before to
// their archive's blob key: their deletion records it (ArchivedRunGet).
func (s *Store) RunsDelete(ctx context.Context, d RetentionDefaults, ids []uuid.UUID,
	archives map[uuid.UUID]string) ([]uuid.UUID, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	archIDs, archKeys := make([]string, 0, len(archives)), make([]string, 0, len(archives))
	for id, key := range archives {
		archIDs, archKeys = append(archIDs, id.String()), append(archKeys, key)
	}
	var out []uuid.UUID
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		out = out[:0]
		args := append(d.args(), pq.Array(uuidStrings(ids)), pq.Array(archIDs), pq.Array(archKeys))
		return tx.SelectContext(ctx, &out, sqlRunsDelete, args...)
	})
	if err != nil {
		return nil, fmt.Errorf("delete runs: %w", err)
	}
	return out, nil
}

// IdempotencyKeysExpire deletes up to limit idempotency keys older than the
// store's IdempotencyTTL (a schedule's fire keys excepted) and returns how many.
// An expired key already starts a new run before it is deleted (RunCreate).
func (s *Store) IdempotencyKeysExpire(ctx context.Context, limit int) (int, error) {
	return s.expireTTL(ctx, "idempotency keys", sqlIdempotencyExpire, limit)
}

// ReceivedEventsExpire deletes up to limit received events older than the store's
// IdempotencyTTL (an event's id holds as long as its event is kept: past it, the
// same id is a new event), but none received since the oldest unfinished run was
// created (a waiting step of that run could still take it), and returns how many.
func (s *Store) ReceivedEventsExpire(ctx context.Context, limit int) (int, error) {
	return s.expireTTL(ctx, "received events", sqlReceivedEventsExpire, limit)
}

// expireTTL runs a delete of up to $2 rows older than $1 seconds (the store's
// IdempotencyTTL) and returns how many it deleted.
func (s *Store) expireTTL(ctx context.Context, what, query string, limit int) (int, error) {
	res, err := s.db.ExecContext(ctx, query, s.cfg.IdempotencyTTL.Seconds(), limit)
	if err != nil {
		return 0, fmt.Errorf("expire %s: %w", what, translateError(err))
	}
	n, _ := res.RowsAffected()
	return int(n), nil
}

// idempotencyTakeOver gives the key of p, whose run (resource) was deleted, to a
// new run id made with args (sqlRunCreate's), or replays whoever took it over
// first.
func idempotencyTakeOver(ctx context.Context, q queryer, p *RunCreateParams, ttl time.Duration,
	resource string, id uuid.UUID, args []any, wake bool) (*Run, bool, error) {
	res, err := q.ExecContext(ctx, sqlIdempotencyTakeOver, p.IdempotencyScope, p.IdempotencyKey, p.RequestHash,
		id.String(), resource)
	if err != nil {
		return nil, false, err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return runCreateTx(ctx, q, p, ttl, wake)
	}
	run := &Run{}
	if err := q.GetContext(ctx, run, runCreateStatement(false, wake), args...); err != nil {
		return nil, false, err
	}
	return run, true, nil
}

func uuidStrings(ids []uuid.UUID) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = id.String()
	}
	return out
}

// ArchivedRun is a run deleted by retention after its archive was written.
type ArchivedRun struct {
	RunID      uuid.UUID `db:"run_id"`
	Workflow   string    `db:"workflow"`
	Status     string    `db:"status"`
	FinishedAt time.Time `db:"finished_at"`
	// BlobKey names the archive: JSON Lines of the run, its steps, attempts and
	// events.
	BlobKey    string    `db:"blob_key"`
	ArchivedAt time.Time `db:"archived_at"`
}

// ArchivedRunGet returns the archive record of run id; ErrNotFound when the run
// was not archived (it may still be in the catalog, or deleted without archive).
func (s *Store) ArchivedRunGet(ctx context.Context, id uuid.UUID) (*ArchivedRun, error) {
	var a ArchivedRun
	if err := s.db.GetContext(ctx, &a, sqlArchivedRunGet, id); err != nil {
		return nil, fmt.Errorf("archived run %s: %w", id, translateError(err))
	}
	return &a, nil
}

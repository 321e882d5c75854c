package catalog

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"iter"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"
)

// Maps (catalog/sql/maps_children.sql): a map step runs one instance per item.
// Its instances are step rows ("key[index]") claimed, leased, retried and
// finished like any step. The map step is suspended (WaitMap) while they run; the dispatchers'
// expanders (MapWork) create the instances in pages, the cursor moving in the same
// transaction, and resolve the map step when every instance has ended.

// WaitMap: a map step waits for its instances.
const WaitMap WaitKind = "map"

// MapPageSize bounds the instances one expansion creates.
const MapPageSize = 1000

const (
	// sqlMapSuspend suspends the running map step, fenced by its lease token, and
	// ends its attempt succeeded; it returns the attempt's number (no row: lease
	// lost).
	sqlMapSuspend = `
WITH s AS (
    UPDATE steps SET status = 'suspended', wait_kind = 'map', wait_until = NULL, wait_name = NULL,
        waiting_since = now(), timeout_at = NULL, on_timeout = 'fail',
        lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL
    WHERE run_id = $1 AND key = $2 AND lease_token = $3 AND status = 'running'
    RETURNING attempts
), a AS (
    UPDATE attempts a SET status = 'succeeded', finished_at = now()
    FROM s WHERE a.run_id = $1 AND a.step_key = $2 AND a.number = s.attempts
)
SELECT attempts FROM s`

	sqlMapEvent = `SELECT cairn_event($1, 'step.suspended', $2, $3, $4)`

	// sqlMapInsert records a map's source; a map step that runs again (its run was
	// retried) keeps its cursor and instances: its failed instances were reset by
	// the retry, the others stay.
	sqlMapInsert = `
INSERT INTO step_maps (run_id, step_key, max_parallel, tolerate_count, tolerate_percent, items, blob_key, blob_format)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
ON CONFLICT (run_id, step_key) DO UPDATE SET finished = false, max_parallel = EXCLUDED.max_parallel`

	// sqlMapsOpen lists maps whose step waits for them and is not held.
	sqlMapsOpen = `
SELECT m.run_id, m.step_key FROM step_maps m
JOIN steps s ON s.run_id = m.run_id AND s.key = m.step_key
WHERE NOT m.finished AND s.status = 'suspended' AND s.wait_kind = 'map' AND NOT s.held
ORDER BY m.created_at
LIMIT $1`

	sqlMapLock = `
SELECT m.run_id, m.step_key, m.max_parallel, m.tolerate_count, m.tolerate_percent, m.items IS NOT NULL AS inline,
       coalesce(m.blob_key, '') AS blob_key, coalesce(m.blob_format, '') AS blob_format,
       m.next_index, m.next_offset, m.expanded
FROM step_maps m JOIN steps s ON s.run_id = m.run_id AND s.key = m.step_key
WHERE m.run_id = $1 AND m.step_key = $2 AND NOT m.finished AND s.status = 'suspended' AND NOT s.held
FOR UPDATE OF m SKIP LOCKED`

	// sqlMapCounts counts a map's live and failed instances: index range scans per
	// state (steps_map_idx), so that its cost follows those counts, not the items
	// that succeeded.
	sqlMapCounts = `
SELECT (SELECT count(*) FROM steps WHERE run_id = $1 AND map_parent = $2
          AND status IN ('waiting', 'ready', 'running', 'suspended')) AS live,
       (SELECT count(*) FROM steps WHERE run_id = $1 AND map_parent = $2
          AND status IN ('failed', 'canceled', 'skipped')) AS failed`

	sqlMapExpand = `SELECT cairn_map_expand($1, $2, $3, $4, $5, $6)
WHERE cairn_runs_share(ARRAY[$1::uuid])`

	sqlMapItems = `
SELECT map_index, status, output, last_error FROM steps
WHERE run_id = $1 AND map_parent = $2 ORDER BY map_index`

	sqlMapFailures = `
SELECT map_index, status, output, last_error FROM steps
WHERE run_id = $1 AND map_parent = $2 AND status IN ('failed', 'canceled', 'skipped')
ORDER BY map_index LIMIT $3`

	sqlMapFinished = `UPDATE step_maps SET finished = true WHERE run_id = $1 AND step_key = $2`

	sqlMapTolerated = `UPDATE steps SET last_error = $3 WHERE run_id = $1 AND key = $2`

	sqlMapProgress = `
SELECT m.step_key, m.next_index, m.expanded,
       count(*) FILTER (WHERE s.status = 'succeeded') AS succeeded,
       count(*) FILTER (WHERE s.status IN ('failed', 'canceled', 'skipped')) AS failed,
       count(*) FILTER (WHERE s.status = 'running') AS running
FROM step_maps m LEFT JOIN steps s ON s.run_id = m.run_id AND s.map_parent = m.step_key
WHERE m.run_id = $1
GROUP BY m.step_key, m.next_index, m.expanded`

	sqlMapItemList = `
SELECT ` + stepColumns + ` FROM steps
WHERE run_id = $1 AND map_parent = $2 AND ($3 = '' OR status = $3) AND map_index > $4
ORDER BY map_index LIMIT $5`
)

// MapStartParams describe a map step's items (MapStart): Items (a JSON array) or
// BlobKey and BlobFormat.
type MapStartParams struct {
	MaxParallel int
	// TolerateCount, or TolerratePercent when IsPercent.
	TolerateCount   int64
	ToleratePercent float64
	IsPercent       bool
	// Items is the list, inline.
	Items json.RawMessage
	// BlobKey is the blob store key of the items; BlobFormat "array" (a JSON array)
	// or "lines" (JSON Lines).
	BlobKey    string
	BlobFormat string
}

// MapStart suspends the running map step l and records its items, in one
// transaction fenced by the lease: the expanders (MapWork) then create its
// instances. A map step that had started before (its run was retried) keeps its
// instances and cursor. ErrLeaseLost when the lease is not current.
func (s *Store) MapStart(ctx context.Context, l Lease, p *MapStartParams) error {
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		var attempt int
		if err := tx.GetContext(ctx, &attempt, sqlMapSuspend, l.RunID, l.Key, l.Token); err != nil {
			if errors.Is(err, sql.ErrNoRows) {
				return ErrLeaseLost
			}
			return err
		}
		data, _ := json.Marshal(map[string]any{"kind": WaitMap, "max_parallel": p.MaxParallel, "on_timeout": OnTimeoutFail})
		if _, err := tx.ExecContext(ctx, sqlMapEvent, l.RunID, l.Key, attempt, JSON(data)); err != nil {
			return err
		}
		var count, percent any
		if p.IsPercent {
			percent = p.ToleratePercent
		} else {
			count = p.TolerateCount
		}
		_, err := tx.ExecContext(ctx, sqlMapInsert, l.RunID, l.Key, p.MaxParallel, count, percent, nullJSON(p.Items),
			nullString(p.BlobKey), nullString(p.BlobFormat))
		return err
	})
	if err != nil {
		return fmt.Errorf("start map %s/%s: %w", l.RunID, l.Key, err)
	}
	return nil
}

// MapRef names a map step.
type MapRef struct {
	RunID uuid.UUID `db:"run_id"`
	Key   string    `db:"step_key"`
}

// MapsOpen returns up to limit maps that may have work: not finished, their step
// suspended and not held (oldest first).
func (s *Store) MapsOpen(ctx context.Context, limit int) ([]MapRef, error) {
	var out []MapRef
	if err := s.db.SelectContext(ctx, &out, sqlMapsOpen, limit); err != nil {
		return nil, fmt.Errorf("list open maps: %w", translateError(err))
	}
	return out, nil
}

// MapState is a map as MapWork sees it, under its lock.
type MapState struct {
	RunID           uuid.UUID `db:"run_id"`
	Key             string    `db:"step_key"`
	MaxParallel     int       `db:"max_parallel"`
	TolerateCount   *int64    `db:"tolerate_count"`
	ToleratePercent *float64  `db:"tolerate_percent"`
	Inline          bool      `db:"inline"`
	BlobKey         string    `db:"blob_key"`
	BlobFormat      string    `db:"blob_format"`
	// NextIndex is how many instances exist; NextOffset where the next item starts
	// in the blob.
	NextIndex  int64 `db:"next_index"`
	NextOffset int64 `db:"next_offset"`
	// Expanded: every item has its instance (NextIndex is the item count).
	Expanded bool `db:"expanded"`
	// Counts of instances: unfinished, and failed (failed, canceled or skipped).
	Live   int64 `db:"live"`
	Failed int64 `db:"failed"`
}

// Tolerated reports whether failed failures of total items are within the map's
// tolerate_failures.
func (m *MapState) Tolerated(failed, total int64) bool {
	if m.ToleratePercent != nil {
		return float64(failed)*100 <= *m.ToleratePercent*float64(total)
	}
	return m.TolerateCount == nil || failed <= *m.TolerateCount
}

// FailingFast reports a map past a count of tolerated failures: it creates no more
// instances and fails once the live ones end.
func (m *MapState) FailingFast() bool {
	return m.ToleratePercent == nil && !m.Tolerated(m.Failed, 0)
}

// room is how many instances a locked map (lockMap) may create now: none once
// expanded or failing fast, else up to max_parallel live, a page at most.
func (m *MapState) room() int {
	if m.Expanded || m.FailingFast() {
		return 0
	}
	return int(min(max(int64(m.MaxParallel)-m.Live, 0), MapPageSize))
}

// nextItems reads the items of a locked map's next n instances with page (a
// MapWorker's Page) when it is a blob map; an inline map's items are in the
// catalog already, and sqlMapExpand reads them there.
func (m *MapState) nextItems(ctx context.Context, n int,
	page func(context.Context, *MapState, int) (json.RawMessage, int64, bool, error)) (json.RawMessage, int64, bool, error) {
	if m.Inline {
		return nil, 0, false, nil
	}
	return page(ctx, m, n)
}

// MapItem is an instance as the finisher reads it.
type MapItem struct {
	Index     int64      `db:"map_index"`
	Status    StepStatus `db:"status"`
	Output    JSON       `db:"output"`
	LastError JSON       `db:"last_error"`
}

// MapWorker does the parts of MapWork that are not the catalog's.
type MapWorker struct {
	// Page reads up to n items of a blob map from st.NextOffset: a JSON array of
	// them, the offset after the last, and whether the blob ended; an error
	// wrapping ErrInvalidInput when they are not valid items (see Refused).
	Page func(ctx context.Context, st *MapState, n int) (items json.RawMessage, next int64, end bool, err error)
	// Finish resolves a map whose instances have all ended: items yields them in
	// index order (read within the call only); failures are the first failed ones.
	Finish func(ctx context.Context, st *MapState, items iter.Seq2[*MapItem, error], failures []MapItem) (Resolution, error)
	// Refused resolves a map whose next items cannot be made into instances:
	// Page said they are not valid, or the database refused them (both
	// ErrInvalidInput, err). No try changes that: the map creates no more
	// instances and ends as Refused says once its live ones have ended. Nil: such
	// a map is tried again at each MapWork.
	Refused func(st *MapState, err error) Resolution
}

// MapFailuresListed bounds the failures Finish is given.
const MapFailuresListed = 100

// MapWork advances the map ref under its row lock (SKIP LOCKED: another dispatcher
// working on it makes this a no-op): while the map is not expanded, not failing
// fast, and has fewer than max_parallel live instances, it creates the next page
// (up to MapPageSize, and up to max_parallel live), moving the cursor in the same
// transaction; once every instance has ended (and no more will be created) it
// resolves the map step as w.Finish says. Returns how many instances it created
// and whether it resolved the step.
func (s *Store) MapWork(ctx context.Context, ref MapRef, w MapWorker) (created int, resolved bool, err error) {
	err = s.inTx(ctx, func(tx *sqlx.Tx) error {
		created, resolved = 0, false
		st, err := lockMap(ctx, tx, ref)
		if st == nil {
			return err // finished, held, or another dispatcher has it
		}
		if n := st.room(); n > 0 {
			items, next, end, err := st.nextItems(ctx, n, w.Page)
			if err != nil {
				return fmt.Errorf("read items: %w", err)
			}
			if err := tx.GetContext(ctx, &created, sqlMapExpand, ref.RunID, ref.Key, n, nullJSON(items), next, end); err != nil {
				return err
			}
			return nil
		}
		if st.Live > 0 || (!st.Expanded && !st.FailingFast()) {
			return nil
		}
		var failures []MapItem
		if err := tx.SelectContext(ctx, &failures, sqlMapFailures, ref.RunID, ref.Key, MapFailuresListed); err != nil {
			return err
		}
		items := func(yield func(*MapItem, error) bool) {
			rows, err := tx.QueryxContext(ctx, sqlMapItems, ref.RunID, ref.Key)
			if err != nil {
				yield(nil, err)
				return
			}
			defer rows.Close()
			for rows.Next() {
				var it MapItem
				if err := rows.StructScan(&it); err != nil {
					yield(nil, err)
					return
				}
				if !yield(&it, nil) {
					return
				}
			}
			if err := rows.Err(); err != nil {
				yield(nil, err)
			}
		}
		res, err := w.Finish(ctx, st, items, failures)
		if err != nil {
			return fmt.Errorf("finish: %w", err)
		}
		resolved = true
		return endMap(ctx, tx, ref, res)
	})
	if err != nil && errors.Is(err, ErrInvalidInput) && w.Refused != nil {
		if resolved, rerr := s.mapRefuse(ctx, ref, w, err); rerr != nil || resolved {
			return 0, resolved, rerr
		}
	}
	if err != nil {
		return 0, false, fmt.Errorf("map %s/%s: %w", ref.RunID, ref.Key, err)
	}
	return created, resolved, nil
}

// mapRefuse resolves a map whose items were refused (cause) as w.Refused says,
// once it has no live instance; until then it reports false.
func (s *Store) mapRefuse(ctx context.Context, ref MapRef, w MapWorker, cause error) (resolved bool, err error) {
	err = s.inTx(ctx, func(tx *sqlx.Tx) error {
		st, err := lockMap(ctx, tx, ref)
		if st == nil || st.Live > 0 {
			resolved = false
			return err
		}
		resolved = true
		return endMap(ctx, tx, ref, w.Refused(st, cause))
	})
	if err != nil {
		return false, fmt.Errorf("map %s/%s: end the map whose items were refused: %w", ref.RunID, ref.Key, err)
	}
	return resolved, nil
}

// lockMap locks an open map whose step waits for it and counts its instances;
// nil (and no error) when it is finished, held, or another transaction has it.
func lockMap(ctx context.Context, tx *sqlx.Tx, ref MapRef) (*MapState, error) {
	var st MapState
	if err := tx.GetContext(ctx, &st, sqlMapLock, ref.RunID, ref.Key); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return nil, nil
		}
		return nil, err
	}
	if err := tx.QueryRowxContext(ctx, sqlMapCounts, ref.RunID, ref.Key).Scan(&st.Live, &st.Failed); err != nil {
		return nil, err
	}
	return &st, nil
}

// endMap resolves a map's step as res says (tolerated failures listed on a step
// that succeeded) and closes the map.
func endMap(ctx context.Context, tx *sqlx.Tx, ref MapRef, res Resolution) error {
	if _, err := tx.ExecContext(ctx, sqlStepResolve, ref.RunID, ref.Key, string(res.Outcome), nullJSON(res.Output),
		nullJSON(res.Error), nullString(res.Reason)); err != nil {
		return err
	}
	if res.Outcome == OutcomeSucceeded && len(res.Error) > 0 {
		if _, err := tx.ExecContext(ctx, sqlMapTolerated, ref.RunID, ref.Key, JSON(res.Error)); err != nil {
			return err
		}
	}
	_, err := tx.ExecContext(ctx, sqlMapFinished, ref.RunID, ref.Key)
	return err
}

// MapProgress is where a map of a run stands.
type MapProgress struct {
	Key string `db:"step_key"`
	// Created instances; Total is known (Expanded) once every item has one.
	Created   int64 `db:"next_index"`
	Expanded  bool  `db:"expanded"`
	Succeeded int64 `db:"succeeded"`
	Failed    int64 `db:"failed"`
	Running   int64 `db:"running"`
}

// MapProgressList returns the progress of every map step of a run, by key.
func (s *Store) MapProgressList(ctx context.Context, runID uuid.UUID) (map[string]MapProgress, error) {
	var rows []MapProgress
	if err := s.db.SelectContext(ctx, &rows, sqlMapProgress, runID); err != nil {
		return nil, fmt.Errorf("map progress of run %s: %w", runID, translateError(err))
	}
	out := make(map[string]MapProgress, len(rows))
	for _, r := range rows {
		out[r.Key] = r
	}
	return out, nil
}

// MapItemListParams select a page of a map's instances.
type MapItemListParams struct {
	RunID uuid.UUID
	Key   string
	// Status keeps the instances in that state; "" for all.
	Status StepStatus
	// After is the index the page starts after; -1 for the first page.
	After int64
	Limit int
}

// MapItemList returns a page of a map step's instances, by index.
func (s *Store) MapItemList(ctx context.Context, p *MapItemListParams) ([]Step, error) {
	var out []Step
	if err := s.db.SelectContext(ctx, &out, sqlMapItemList, p.RunID, p.Key, string(p.Status), p.After, p.Limit); err != nil {
		return nil, fmt.Errorf("list items of %s/%s: %w", p.RunID, p.Key, translateError(err))
	}
	return out, nil
}

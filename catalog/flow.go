package catalog

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"

	"github.com/cairnrun/cairn/expr"
)

// Flow control (issue 16, migration 00016): concurrency limits per key. A slot is a
// running step; see the migration for why nothing can leak one.

const (
	// sqlFlowSteps reads the steps of a version that have a concurrency limit (the
	// version $2 of workflow $1; when 0, the one alias $3 names, latest when $3 is
	// ''), as sqlRunCreate resolves it.
	sqlFlowSteps = `
SELECT v.version, v.flow_steps FROM workflow_versions v
WHERE v.workflow = $1
  AND v.version = CASE WHEN $2::integer = 0
                       THEN cairn_alias_version($1, coalesce(nullif($3::text, ''), 'latest'))
                       ELSE $2::integer END`

	// sqlFlowApply gives the steps of run $1 their limits ($2: step key → {n, k, l}).
	sqlFlowApply = `
UPDATE steps s SET conc_name = f.value ->> 'n', conc_key = f.value ->> 'k', conc_limit = (f.value ->> 'l')::integer
FROM jsonb_each($2::jsonb) AS f WHERE s.run_id = $1 AND s.key = f.key`

	// sqlClaimCandidates locks up to $1 claimable steps, oldest first, skipping
	// those locked by another claimer and those whose key was full when the
	// statement began (a hint only: the claim counts again under the key's lock).
	sqlClaimCandidates = `
SELECT s.run_id, s.key, s.conc_name, s.conc_key, s.conc_limit FROM steps s
WHERE s.status = 'ready' AND NOT s.held AND s.ready_at <= now()
  AND (s.conc_name IS NULL OR (
      SELECT count(*) FROM (
          SELECT 1 FROM steps r
          WHERE r.status = 'running' AND r.conc_name = s.conc_name AND r.conc_key = s.conc_key
          LIMIT coalesce((SELECT l.concurrency FROM limits l WHERE l.name = s.conc_name), s.conc_limit)) x
      ) < coalesce((SELECT l.concurrency FROM limits l WHERE l.name = s.conc_name), s.conc_limit))
ORDER BY s.ready_at
LIMIT $1
FOR UPDATE SKIP LOCKED`

	// sqlClaimKeyLock takes the transaction-level advisory lock of each (name, key),
	// in the order of the lock ids, so that two claimers never wait for each other
	// in a circle.
	sqlClaimKeyLock = `
SELECT count(pg_advisory_xact_lock(x.id)) FROM (
    SELECT DISTINCT hashtextextended(u.n || chr(31) || u.k, 16) AS id
    FROM unnest($1::text[], $2::text[]) AS u(n, k)
    ORDER BY 1
) x`

	// sqlClaimKeyUsage counts the running steps of each (name, key) and gives the
	// limit set at run time, if any. Run after the key locks, in a statement of its
	// own (a fresh snapshot), it sees every claim of the keys committed before.
	sqlClaimKeyUsage = `
SELECT u.n, u.k, (SELECT count(*) FROM steps r
                  WHERE r.status = 'running' AND r.conc_name = u.n AND r.conc_key = u.k) AS running,
       (SELECT l.concurrency FROM limits l WHERE l.name = u.n) AS override
FROM unnest($1::text[], $2::text[]) AS u(n, k)`

	sqlLimitUsage = `
SELECT s.conc_name AS name, s.conc_key AS key,
       count(*) FILTER (WHERE s.status = 'running') AS running,
       count(*) FILTER (WHERE s.status = 'ready') AS ready,
       max(s.conc_limit) AS step_limit,
       (SELECT l.concurrency FROM limits l WHERE l.name = s.conc_name) AS override
FROM steps s
WHERE s.conc_name IS NOT NULL AND s.status IN ('running', 'ready') AND ($1 = '' OR s.conc_name = $1)
GROUP BY s.conc_name, s.conc_key
ORDER BY s.conc_name, s.conc_key
LIMIT $2`

	sqlLimitOverrides = `
SELECT name, concurrency, updated_at, updated_by FROM limits WHERE $1 = '' OR name = $1 ORDER BY name`

	sqlLimitSet = `
INSERT INTO limits (name, concurrency, updated_by) VALUES ($1, $2, $3)
ON CONFLICT (name) DO UPDATE SET concurrency = excluded.concurrency, updated_at = now(),
    updated_by = excluded.updated_by
RETURNING name, concurrency, updated_at, updated_by`

	sqlStepBlocked = `
SELECT s.key, s.conc_name, s.conc_key,
       coalesce((SELECT l.concurrency FROM limits l WHERE l.name = s.conc_name), s.conc_limit) AS lim,
       (SELECT count(*) FROM steps r
        WHERE r.status = 'running' AND r.conc_name = s.conc_name AND r.conc_key = s.conc_key) AS in_use
FROM steps s
WHERE s.run_id = $1 AND s.status = 'ready' AND s.conc_name IS NOT NULL`
)

// ErrFlowKey means a step's concurrency key could not be evaluated for a new run (the
// input lacks a field the expression reads, …): the run is not created. It wraps
// ErrInvalidInput.
var ErrFlowKey = fmt.Errorf("%w: concurrency key", ErrInvalidInput)

// flowStep is what sqlFlowSteps reads of a step definition.
type flowStep struct {
	Key         string          `json:"key"`
	With        json.RawMessage `json:"with"`
	Concurrency struct {
		Name  string `json:"name"`
		Key   string `json:"key"`
		Limit int    `json:"limit"`
	} `json:"concurrency"`
}

// flowKeys resolves the version a new run of workflow gets (as sqlRunCreate does)
// and evaluates the concurrency keys of its steps: the version, and the JSON that
// sqlFlowApply and sqlRunCreate take (nil when no step has a limit). ErrFlowKey when
// an expression fails. No version: version 0, nil, nil (sqlRunCreate then reports
// it).
func flowKeys(ctx context.Context, q queryer, runID uuid.UUID, workflow string, version int, alias string,
	input json.RawMessage, labels Labels) (int, json.RawMessage, error) {
	var row struct {
		Version int  `db:"version"`
		Steps   JSON `db:"flow_steps"`
	}
	if err := q.GetContext(ctx, &row, sqlFlowSteps, workflow, version, alias); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return 0, nil, nil
		}
		return 0, nil, err
	}
	var steps []flowStep
	if len(row.Steps) > 0 {
		if err := json.Unmarshal(row.Steps, &steps); err != nil {
			return 0, nil, fmt.Errorf("concurrency of %s v%d: %w", workflow, row.Version, err)
		}
	}
	if len(steps) == 0 {
		return row.Version, nil, nil
	}
	if labels == nil {
		labels = Labels{}
	}
	var in any = json.RawMessage(input)
	if len(input) == 0 {
		in = nil
	}
	out := make(map[string]map[string]any, len(steps))
	for _, st := range steps {
		c := st.Concurrency
		key := ""
		if c.Key != "" {
			prog, err := expr.CreateEnv.Compile(c.Key)
			if err != nil {
				return 0, nil, fmt.Errorf("%w of step %q: %v", ErrFlowKey, st.Key, err)
			}
			params := st.With
			if len(params) == 0 {
				params = json.RawMessage(`{}`)
			}
			vars := expr.Vars{
				expr.Input:  in,
				expr.Params: params,
				expr.Labels: map[string]string(labels),
				expr.Run:    map[string]any{"id": runID.String(), "workflow": workflow, "version": row.Version},
			}
			v, err := prog.Eval(ctx, vars)
			if err != nil {
				return 0, nil, fmt.Errorf("%w of step %q (%s): %v", ErrFlowKey, st.Key, c.Key, err)
			}
			var s string
			if json.Unmarshal(v, &s) == nil {
				key = s
			} else {
				key = string(v)
			}
		}
		out[st.Key] = map[string]any{"n": c.Name, "k": key, "l": c.Limit}
	}
	b, err := json.Marshal(out)
	if err != nil {
		return 0, nil, err
	}
	return row.Version, b, nil
}

// claimCandidate is a step sqlClaimCandidates locked.
type claimCandidate struct {
	RunID     uuid.UUID `db:"run_id"`
	Key       string    `db:"key"`
	ConcName  *string   `db:"conc_name"`
	ConcKey   *string   `db:"conc_key"`
	ConcLimit *int      `db:"conc_limit"`
}

type limitKey struct{ name, key string }

// admit returns the candidates that may start: all those without a concurrency
// limit, and of the others as many per key as the key has free slots, in candidate
// order. It takes the keys' locks, held until the transaction ends.
func admit(ctx context.Context, tx *sqlx.Tx, cands []claimCandidate) ([]claimCandidate, error) {
	var names, keys []string
	seen := map[limitKey]bool{}
	for _, c := range cands {
		if c.ConcName == nil {
			continue
		}
		k := limitKey{*c.ConcName, *c.ConcKey}
		if !seen[k] {
			seen[k] = true
			names, keys = append(names, k.name), append(keys, k.key)
		}
	}
	if len(names) == 0 {
		return cands, nil
	}
	var n int
	if err := tx.GetContext(ctx, &n, sqlClaimKeyLock, pq.StringArray(names), pq.StringArray(keys)); err != nil {
		return nil, fmt.Errorf("lock limit keys: %w", err)
	}
	rows, err := tx.QueryxContext(ctx, sqlClaimKeyUsage, pq.StringArray(names), pq.StringArray(keys))
	if err != nil {
		return nil, fmt.Errorf("count limit slots: %w", err)
	}
	running := map[limitKey]int{}
	override := map[limitKey]int{}
	for rows.Next() {
		var (
			k   limitKey
			r   int
			ovr *int
		)
		if err := rows.Scan(&k.name, &k.key, &r, &ovr); err != nil {
			rows.Close()
			return nil, err
		}
		running[k] = r
		if ovr != nil {
			override[k] = *ovr
		}
	}
	if err := rows.Close(); err != nil {
		return nil, err
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	out := cands[:0:0]
	for _, c := range cands {
		if c.ConcName == nil {
			out = append(out, c)
			continue
		}
		k := limitKey{*c.ConcName, *c.ConcKey}
		lim := *c.ConcLimit
		if o, ok := override[k]; ok {
			lim = o
		}
		if running[k] < lim {
			running[k]++
			out = append(out, c)
		}
	}
	return out, nil
}

// LimitUsage is the use of one key of a concurrency limit.
type LimitUsage struct {
	Name string `db:"name"`
	Key  string `db:"key"`
	// Running is the number of slots in use; Ready the steps waiting for one (or
	// about to be claimed).
	Running int `db:"running"`
	Ready   int `db:"ready"`
	// Limit is the limit in force: Override when set, else the steps' own.
	Limit     int  `db:"-"`
	StepLimit int  `db:"step_limit"`
	Override  *int `db:"override"`
}

// LimitOverride is a limit changed at run time.
type LimitOverride struct {
	Name        string    `db:"name"`
	Concurrency int       `db:"concurrency"`
	UpdatedAt   time.Time `db:"updated_at"`
	UpdatedBy   string    `db:"updated_by"`
}

// MaxLimit is the largest concurrency limit (bundle.MaxConcurrencyLimit).
const MaxLimit = 100_000

// reLimitName is the syntax of a limit's name (bundle.ValidLimitName).
var reLimitName = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,62}$`)

// MaxLimitKeys bounds the keys LimitList returns.
const MaxLimitKeys = 1000

// LimitList returns the keys of the concurrency limits in use (a step running or
// ready) — of name alone unless name is "" — at most MaxLimitKeys, and the limits
// changed at run time.
func (s *Store) LimitList(ctx context.Context, name string) ([]LimitUsage, []LimitOverride, error) {
	var use []LimitUsage
	if err := s.db.SelectContext(ctx, &use, sqlLimitUsage, name, MaxLimitKeys); err != nil {
		return nil, nil, fmt.Errorf("list limits: %w", translateError(err))
	}
	for i := range use {
		use[i].Limit = use[i].StepLimit
		if use[i].Override != nil {
			use[i].Limit = *use[i].Override
		}
	}
	var ovr []LimitOverride
	if err := s.db.SelectContext(ctx, &ovr, sqlLimitOverrides, name); err != nil {
		return nil, nil, fmt.Errorf("list limits: %w", translateError(err))
	}
	return use, ovr, nil
}

// LimitSet changes the concurrency limit name at run time, for every step that names
// it; ErrInvalidInput for a bad name or a limit out of 1..100000. Steps already
// running keep running: a lower limit only delays the next claims.
func (s *Store) LimitSet(ctx context.Context, name string, concurrency int, actor string) (*LimitOverride, error) {
	if !reLimitName.MatchString(name) {
		return nil, fmt.Errorf("set limit %q: %w: a name is 1 to 63 of a-z, 0-9, '_', '.', '-', starting with a letter or digit", name, ErrInvalidInput)
	}
	if concurrency < 1 || concurrency > MaxLimit {
		return nil, fmt.Errorf("set limit %s: %w: %d is not within 1..%d", name, ErrInvalidInput, concurrency, MaxLimit)
	}
	var out LimitOverride
	if err := s.db.GetContext(ctx, &out, sqlLimitSet, name, concurrency, actor); err != nil {
		return nil, fmt.Errorf("set limit %s: %w", name, translateError(err))
	}
	return &out, nil
}

// BlockedBy says what holds a ready step back from starting.
type BlockedBy struct {
	// Kind is "concurrency".
	Kind  string `json:"kind"`
	Name  string `json:"name"`
	Key   string `json:"key"`
	InUse int    `json:"in_use"`
	Limit int    `json:"limit"`
}

// StepsBlocked returns, by step key, the ready steps of a run whose concurrency key
// has no free slot now.
func (s *Store) StepsBlocked(ctx context.Context, runID uuid.UUID) (map[string]BlockedBy, error) {
	rows, err := s.db.QueryxContext(ctx, sqlStepBlocked, runID)
	if err != nil {
		return nil, fmt.Errorf("blocked steps of %s: %w", runID, translateError(err))
	}
	defer rows.Close()
	out := map[string]BlockedBy{}
	for rows.Next() {
		var (
			key string
			b   BlockedBy
		)
		if err := rows.Scan(&key, &b.Name, &b.Key, &b.Limit, &b.InUse); err != nil {
			return nil, err
		}
		if b.InUse >= b.Limit {
			b.Kind = "concurrency"
			out[key] = b
		}
	}
	return out, rows.Err()
}

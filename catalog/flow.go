package catalog

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"

	"github.com/cairnrun/cairn/expr"
	"github.com/cairnrun/cairn/namespace"
)

// Flow control (catalog/sql/flow.sql): concurrency and rate limits per key,
// priority, placement (runs_on and the dispatchers' registry), queue timeouts and
// run deadlines. A concurrency slot is a running step; see catalog/sql/flow.sql for why
// nothing can leak one.

const (
	// sqlFlowSteps reads the steps of a version that have flow settings (limits,
	// priority, runs_on, queue_timeout) of version $2 of workflow $1 (when 0, the
	// one alias $3 names, latest when $3 is ''), as sqlRunCreate resolves it (by a
	// subquery, not cairn_alias_version: see sqlRunCreateHead).
	sqlFlowSteps = `
SELECT v.version, v.flow_steps, v.flow_handlers FROM workflow_versions v
WHERE v.workflow = $1
  AND v.version = CASE WHEN $2::integer = 0
                       THEN (SELECT a.version FROM workflow_aliases a
                             WHERE a.workflow = $1 AND a.alias = coalesce(nullif($3::text, ''), 'latest'))
                       ELSE $2::integer END`

	// sqlFlowApply gives the steps of run $1 their flow settings ($2: step key →
	// {n, k, l, rn, rk, rl, rp, p, t, q}, see flowKeys).
	sqlFlowApply = `
UPDATE steps s SET conc_name = f.value ->> 'n', conc_key = f.value ->> 'k', conc_limit = (f.value ->> 'l')::integer,
    rate_name = f.value ->> 'rn', rate_key = f.value ->> 'rk', rate_limit = (f.value ->> 'rl')::integer,
    rate_per_s = (f.value ->> 'rp')::float8, priority = coalesce((f.value ->> 'p')::smallint, s.priority),
    runs_on = CASE WHEN f.value ? 't' THEN ARRAY(SELECT jsonb_array_elements_text(f.value -> 't')) END,
    queue_timeout_s = (f.value ->> 'q')::float8
FROM jsonb_each($2::jsonb) AS f WHERE s.run_id = $1 AND s.key = f.key`

	// sqlClaimableCheap is the part of sqlClaimable an index scan checks as it goes.
	sqlClaimableCheap = `s.status = 'ready' AND ` + sqlClaimableReady
	sqlClaimableReady = `NOT s.held AND s.ready_at <= now()
      AND s.condition IS DISTINCT FROM 'pending'
      AND (s.runs_on IS NULL OR s.runs_on <@ $2::text[])`

	// sqlClaimableByKey is sqlClaimable for steps found by primary key: its
	// status test matches no partial index, so PostgreSQL cannot pick one of
	// them (steps_claim_idx: every ready step, which its statistics can put at
	// one row) over the primary key (sqlClaimCandidates' c: 182,080 rows compared
	// to take 64 of 1,487 ready steps, 45 ms a claim).
	sqlClaimableByKey = `(s.status = 'ready') IS TRUE AND ` + sqlClaimableReady + sqlClaimableLimits

	// sqlClaimable is what makes step s claimable now: ready and not held, ready_at
	// reached, its condition decided, runs_on within the dispatcher's tags $2, its
	// concurrency key not full and its rate bucket not empty when the statement began
	// (a hint only: the claim counts again under the keys' locks). A limit set at run
	// time (limits) replaces the step's own. A key's running steps are counted as
	// (status = 'running') IS TRUE: the predicate of steps_conc_running_idx alone
	// (migrations/00039_conc_slots_index.sql), so that the count never scans every
	// running step by steps_lease_expiry_idx; so are they wherever they are counted.
	// A step of a namespace with a running_steps quota (quota_ns, quota.go) is
	// claimable when the namespace has a step fewer running than its quota (a hint
	// as well: cairn_claim_usage counts again under the quota's lock); a step of
	// default (quota_ns NULL) reads nothing more.
	sqlClaimable       = sqlClaimableCheap + sqlClaimableLimits
	sqlClaimableLimits = `
      AND (s.conc_name IS NULL OR (
          SELECT count(*) FROM (
              SELECT 1 FROM steps r
              WHERE (r.status = 'running') IS TRUE AND r.conc_name = s.conc_name AND r.conc_key = s.conc_key
              LIMIT coalesce((SELECT l.concurrency FROM limits l WHERE l.name = s.conc_name), s.conc_limit)) x
          ) < coalesce((SELECT l.concurrency FROM limits l WHERE l.name = s.conc_name), s.conc_limit))
      AND (s.rate_name IS NULL OR coalesce((
          SELECT b.tokens + extract(epoch FROM clock_timestamp() - b.at)
                            * coalesce(l.rate_limit, b.lim) / coalesce(l.rate_per_s, b.per_s)
          FROM rate_buckets b LEFT JOIN limits l ON l.name = b.name
          WHERE b.name = s.rate_name AND b.key = s.rate_key), 1) >= 1)
      AND (s.quota_ns IS NULL OR coalesce((
          SELECT (SELECT count(*) FROM (
                      SELECT 1 FROM steps r
                      WHERE (r.status = 'running') IS TRUE AND r.quota_ns IS NOT NULL AND r.quota_ns = s.quota_ns
                      LIMIT n.running_steps) x) < n.running_steps
          FROM namespaces n WHERE n.name = s.quota_ns), true))`

	// sqlClaimCandidates locks up to $1 claimable steps (sqlClaimable), skipping
	// those locked by another claimer, by priority, then turn, then age. A step's
	// turn is the later of its ready_at and the last claim of its concurrency key
	// (limit_keys.served_at; -infinity for a key not served yet): the key served
	// least recently goes first, so the keys of one limit take turns (round robin)
	// and one key's backlog cannot hold back another's steps; a step without a key
	// takes its turn by age.
	//
	// No index serves that order, so the statement sorts a pool, not every ready
	// step: the first $1 ready steps by priority and age (as without fairness), and
	// the first $1 of each of the 2×$1 keys served least recently (an index scan of
	// limit_keys, then one probe of steps_conc_head_idx per key); the pool's steps
	// whose key is full or bucket empty are then left out (c). The claim costs
	// O($1²) whatever the number of keys or ready steps. A key whose turn comes but
	// that has no ready step left (its steps ended otherwise than by a claim) loses
	// its row (gone). A key whose steps are ready but not claimable (full, waiting for
	// a token or a tagged dispatcher) keeps its place: when more than 2×$1 such keys
	// were served before the others, the claim falls back to age order.
	//
	// The pool is small, so claimers racing for it take its steps from each other:
	// what a claim cannot lock of it, it takes as before fairness, by priority and
	// age, skipping the locked steps (more).
	//
	// One more row, with no step, may come last: next_in, the seconds until the first
	// token of an empty bucket that ready steps wait for (the claimer looks again
	// then).
	sqlClaimCandidates = `
WITH turns AS (
    SELECT lk.name AS n, lk.key AS k FROM limit_keys lk ORDER BY lk.served_at LIMIT 2 * $1
), gone AS (
    DELETE FROM limit_keys lk USING turns t
    WHERE lk.name = t.n AND lk.key = t.k
      AND NOT EXISTS (SELECT 1 FROM steps s WHERE s.status = 'ready' AND s.conc_name = t.n AND s.conc_key = t.k)
), pool AS (
    SELECT h.run_id, h.key FROM turns CROSS JOIN LATERAL (
        SELECT s.run_id, s.key FROM steps s
        WHERE s.conc_name = turns.n AND s.conc_key = turns.k AND ` + sqlClaimableCheap + `
        ORDER BY s.priority DESC, s.ready_at
        LIMIT $1) h
    UNION
    (SELECT s.run_id, s.key FROM steps s WHERE ` + sqlClaimableCheap + `
     ORDER BY s.priority DESC, s.ready_at
     LIMIT $1)
), c AS (
    SELECT s.run_id, s.key, s.conc_name, s.conc_key, s.conc_limit,
           s.rate_name, s.rate_key,
           coalesce(l.rate_limit, s.rate_limit) AS rate_limit, coalesce(l.rate_per_s, s.rate_per_s) AS rate_per_s,
           s.quota_ns, NULL::float8 AS next_in
    FROM pool p
    JOIN steps s ON s.run_id = p.run_id AND s.key = p.key
    LEFT JOIN limit_keys lk ON lk.name = s.conc_name AND lk.key = s.conc_key
    LEFT JOIN limits l ON l.name = s.rate_name
    WHERE ` + sqlClaimableByKey + `
    ORDER BY s.priority DESC, greatest(s.ready_at, lk.served_at), s.ready_at
    LIMIT $1
    FOR UPDATE OF s SKIP LOCKED
), more AS (
    SELECT s.run_id, s.key, s.conc_name, s.conc_key, s.conc_limit,
           s.rate_name, s.rate_key,
           coalesce((SELECT l.rate_limit FROM limits l WHERE l.name = s.rate_name), s.rate_limit) AS rate_limit,
           coalesce((SELECT l.rate_per_s FROM limits l WHERE l.name = s.rate_name), s.rate_per_s) AS rate_per_s,
           s.quota_ns, NULL::float8 AS next_in
    FROM steps s
    WHERE ` + sqlClaimable + `
      AND (s.run_id, s.key) NOT IN (SELECT c.run_id, c.key FROM c)
    ORDER BY s.priority DESC, s.ready_at
    LIMIT $1 - (SELECT count(*) FROM c)
    FOR UPDATE SKIP LOCKED
)
SELECT * FROM c
UNION ALL
SELECT * FROM more
UNION ALL` + sqlClaimNextIn

	// sqlClaimNextIn is the last row of the claim candidates: next_in, the seconds
	// until the first token of an empty bucket that ready steps wait for (the
	// claimer looks again then), when there is one.
	sqlClaimNextIn = `
SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, v.next_in
FROM (` + sqlClaimNextInValue + `) v
WHERE v.next_in IS NOT NULL`

	// sqlClaimNextInValue is next_in alone, NULL when no ready step waits for a
	// token. It starts from the buckets (none, without rate limits): the ready
	// steps of each are looked up by steps_rate_ready_idx, one at most (the
	// LATERAL's LIMIT). As an EXISTS, PostgreSQL turned it into a join that read
	// every ready step at each claim when its statistics put them at a few rows
	// (a catalog analyzed while none was ready: 1,570 buffers a claim of 2,000
	// ready steps, the claim's 192 buffers per step against 41, growth scenario).
	sqlClaimNextInValue = `
SELECT min(w.next_in) AS next_in
FROM (
    SELECT (1 - least(rl.lim, b.tokens + extract(epoch FROM clock_timestamp() - b.at) * rl.lim / rl.per_s))
           * rl.per_s / rl.lim AS next_in
    FROM rate_buckets b
    LEFT JOIN limits l ON l.name = b.name
    CROSS JOIN LATERAL (SELECT coalesce(l.rate_limit, b.lim) AS lim, coalesce(l.rate_per_s, b.per_s) AS per_s) rl
    CROSS JOIN LATERAL (SELECT 1 FROM steps s
                        WHERE s.status = 'ready' AND s.rate_name IS NOT NULL
                          AND s.rate_name = b.name AND s.rate_key = b.key AND NOT s.held
                        LIMIT 1) ready
) w
WHERE w.next_in > 0`

	// sqlClaimCandidatesByAge is sqlClaimCandidates without turns between keys, by
	// priority and age alone: for when no concurrency key has a turn to take
	// (limit_keys is empty: no step with a concurrency limit is ready), which a
	// claim finds out at most once a second (Store.fairClaims). Much cheaper to plan
	// and run.
	sqlClaimCandidatesByAge = `
WITH c AS (
    SELECT s.run_id, s.key, s.conc_name, s.conc_key, s.conc_limit,
           s.rate_name, s.rate_key,
           coalesce((SELECT l.rate_limit FROM limits l WHERE l.name = s.rate_name), s.rate_limit) AS rate_limit,
           coalesce((SELECT l.rate_per_s FROM limits l WHERE l.name = s.rate_name), s.rate_per_s) AS rate_per_s,
           s.quota_ns, NULL::float8 AS next_in
    FROM steps s
    WHERE ` + sqlClaimable + `
    ORDER BY s.priority DESC, s.ready_at
    LIMIT $1
    FOR UPDATE SKIP LOCKED
)
SELECT * FROM c
UNION ALL` + sqlClaimNextIn

	// sqlLimitTurns says whether a concurrency key may have a turn to take.
	sqlLimitTurns = `SELECT EXISTS (SELECT 1 FROM limit_keys)`

	// sqlRunHandlerFlow sets the flow settings of run $1's failure handlers ($2, see
	// flowKeys): a rerun's.
	sqlRunHandlerFlow = `UPDATE runs SET handler_flow = $2 WHERE id = $1`

	// sqlLimitKeys gives the concurrency keys of a new run's steps ($1, as
	// sqlFlowApply takes it) a turn, before every key served already. sqlRunCreate
	// runs it as a CTE, on its own parameter: the statement is
	// sqlLimitKeysHead + parameter + sqlLimitKeysTail.
	sqlLimitKeys     = sqlLimitKeysHead + `$1` + sqlLimitKeysTail
	sqlLimitKeysHead = `
INSERT INTO limit_keys (name, key, served_at)
SELECT DISTINCT f.value ->> 'n', f.value ->> 'k', '-infinity'::timestamptz
FROM jsonb_each(`
	sqlLimitKeysTail = `::jsonb) AS f WHERE f.value ? 'n'
ON CONFLICT (name, key) DO NOTHING`

	// sqlRateBuckets makes the buckets a claim takes tokens from that do not exist
	// yet, full; after the keys' locks.
	sqlRateBuckets = `
INSERT INTO rate_buckets (name, key, tokens, at, lim, per_s)
SELECT n, k, lim, clock_timestamp(), lim, per_s FROM unnest($1::text[], $2::text[], $3::integer[], $4::float8[]) AS u(n, k, lim, per_s)
ON CONFLICT (name, key) DO NOTHING`

	// sqlRateTake takes up to want tokens of each bucket (name, key, limit, window,
	// want): the bucket refills since its last take, to its limit at most; granted
	// is what it gives. After the keys' locks, in a statement of its own.
	sqlRateTake = `
WITH w AS (
    SELECT * FROM unnest($1::text[], $2::text[], $3::integer[], $4::float8[], $5::integer[]) AS u(n, k, lim, per_s, want)
), cur AS (
    SELECT w.n, w.k, w.lim, w.per_s, w.want, clock_timestamp() AS ts,
           least(w.lim, b.tokens + extract(epoch FROM clock_timestamp() - b.at) * w.lim / w.per_s) AS avail
    FROM w JOIN rate_buckets b ON b.name = w.n AND b.key = w.k
), g AS (
    SELECT cur.*, least(cur.want, floor(cur.avail))::integer AS granted FROM cur
), u AS (
    UPDATE rate_buckets b SET tokens = g.avail - g.granted, at = g.ts, lim = g.lim, per_s = g.per_s
    FROM g WHERE b.name = g.n AND b.key = g.k
)
SELECT g.n, g.k, g.granted,
       CASE WHEN g.granted < g.want THEN (1 - (g.avail - g.granted)) * g.per_s / g.lim END AS next_in
FROM g`

	// sqlClaimKeyLock takes the transaction-level advisory lock of each rate
	// limit's key, ("rate" 0x1e name, key): apart from a concurrency limit of the
	// same name. cairn_limit_lock takes them in the order of their ids, as
	// cairn_conc_usage takes the concurrency keys' (by the same function), so
	// that two claimers never wait for each other in a circle.
	sqlClaimKeyLock = `SELECT cairn_limit_lock($1::text[], $2::text[])`

	// sqlConcAdmitted is the one home of the concurrency limits' admission rule:
	// of the candidates in admit_src (conc_name, conc_key and conc_limit NULL
	// for a step without a limit; ord, the order in which they get the slots),
	// it keeps those without a limit and, key by key in ord, those the key has a
	// free slot for: the key's running steps (use: cairn_conc_usage, counted
	// after the keys' locks) and the candidates before it at most the limit set
	// at run time (limits), or else the step's own. A candidate refused still
	// counts for those after it. The claim in one statement (sqlClaimAlone) and
	// the claim transaction's (sqlClaimConcAdmit, through sqlQuotaAdmitted) apply
	// it alike.
	sqlConcAdmitted = `
    SELECT t.* FROM (
        SELECT a.*, row_number() OVER (PARTITION BY a.conc_name, a.conc_key ORDER BY a.ord) AS place
        FROM admit_src a) t` + sqlConcAdmittedUse + `
    WHERE ` + sqlConcAdmittedWhere
	sqlConcAdmittedUse = `
    LEFT JOIN use ON use.name = t.conc_name AND use.key = t.conc_key`
	sqlConcAdmittedWhere = `(t.conc_name IS NULL OR use.running + t.place <= coalesce(use.override, t.conc_limit))`

	// sqlQuotaAdmitted is sqlConcAdmitted with the namespaces' running_steps
	// quotas (quota.go), the one home of their admission rule: a candidate of a
	// namespace with the quota (quota_ns, a row of use with a NULL key:
	// cairn_claim_usage) is kept when the namespace's running steps and its
	// candidates before it are at most the quota. A candidate a concurrency key
	// refuses still counts for the quota: a claim may start fewer than it could,
	// never more. A statement apart from sqlConcAdmitted, so that the claim of
	// steps of no such namespace keeps its plan (sqlClaimAlone).
	sqlQuotaAdmitted = `
    SELECT t.* FROM (
        SELECT a.*, row_number() OVER (PARTITION BY a.conc_name, a.conc_key ORDER BY a.ord) AS place,
               row_number() OVER (PARTITION BY a.quota_ns ORDER BY a.ord) AS quota_place
        FROM admit_src a) t` + sqlConcAdmittedUse + `
    LEFT JOIN use q ON q.key IS NULL AND q.name = t.quota_ns
    WHERE ` + sqlConcAdmittedWhere + `
      AND (q.override IS NULL OR q.running + t.quota_place <= q.override)`

	// sqlClaimConcAdmit takes the locks of the concurrency keys and of the
	// namespaces' running_steps quotas of the claim transaction's candidates ($1
	// names, $2 keys, $3 limits, $4 quota_ns, in the candidates' order; NULL where
	// a candidate has none) and returns the ordinals (1-based) of those that get
	// a slot (sqlQuotaAdmitted).
	sqlClaimConcAdmit = `
WITH admit_src AS (
    SELECT * FROM unnest($1::text[], $2::text[], $3::integer[], $4::text[])
        WITH ORDINALITY AS s(conc_name, conc_key, conc_limit, quota_ns, ord)
), use AS MATERIALIZED (
    SELECT * FROM cairn_claim_usage(ARRAY(SELECT a.conc_name FROM admit_src a WHERE a.conc_name IS NOT NULL),
                                    ARRAY(SELECT a.conc_key FROM admit_src a WHERE a.conc_name IS NOT NULL),
                                    ARRAY(SELECT DISTINCT a.quota_ns FROM admit_src a WHERE a.quota_ns IS NOT NULL))
)
SELECT c.ord FROM (` + sqlQuotaAdmitted + `) c
ORDER BY c.ord`

	// sqlLimitUsage counts the running and ready steps of each concurrency key,
	// each from its partial index (steps_conc_running_idx, steps_conc_ready_idx):
	// its cost follows the live steps, not the history. As one scan of status IN
	// ('running', 'ready'), which neither index's predicate matches, it read
	// every step of the catalog at each /metrics scrape (184,000 buffers with
	// 500,000 finished runs, growth scenario).
	sqlLimitUsage = `
SELECT u.name, u.key, sum(u.running)::bigint AS running, sum(u.ready)::bigint AS ready,
       max(u.step_limit) AS step_limit,
       (SELECT l.concurrency FROM limits l WHERE l.name = u.name) AS override
FROM (
    SELECT s.conc_name AS name, s.conc_key AS key, 1 AS running, 0 AS ready, s.conc_limit AS step_limit
    FROM steps s WHERE (s.status = 'running') IS TRUE AND s.conc_name IS NOT NULL AND ($1 = '' OR s.conc_name = $1)
    UNION ALL
    SELECT s.conc_name, s.conc_key, 0, 1, s.conc_limit
    FROM steps s WHERE s.status = 'ready' AND s.conc_name IS NOT NULL AND ($1 = '' OR s.conc_name = $1)
) u
GROUP BY u.name, u.key
ORDER BY u.name, u.key
LIMIT $2`

	sqlLimitOverrides = `
SELECT name, concurrency, rate_limit, rate_per_s, updated_at, updated_by FROM limits
WHERE $1 = '' OR name = $1 ORDER BY name`

	// sqlLimitSet sets the limits given (not NULL) of name, keeping the others.
	sqlLimitSet = `
INSERT INTO limits (name, concurrency, rate_limit, rate_per_s, updated_by) VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (name) DO UPDATE SET concurrency = coalesce(excluded.concurrency, limits.concurrency),
    rate_limit = coalesce(excluded.rate_limit, limits.rate_limit),
    rate_per_s = coalesce(excluded.rate_per_s, limits.rate_per_s),
    updated_at = now(), updated_by = excluded.updated_by
RETURNING name, concurrency, rate_limit, rate_per_s, updated_at, updated_by`

	sqlLimitClear = `DELETE FROM limits WHERE name = $1`

	// sqlStepBlocked reads the ready steps of run $1 that have a limit: the slots
	// in use of the concurrency key, the tokens left in the rate bucket, and the
	// running steps of the namespace when it has a running_steps quota.
	sqlStepBlocked = `
SELECT s.key, s.conc_name, s.conc_key,
       coalesce((SELECT l.concurrency FROM limits l WHERE l.name = s.conc_name), s.conc_limit) AS lim,
       (SELECT count(*) FROM steps r
        WHERE (r.status = 'running') IS TRUE AND r.conc_name = s.conc_name AND r.conc_key = s.conc_key) AS in_use,
       s.rate_name, s.rate_key, rl.lim AS rate_limit,
       (SELECT least(rl.lim, b.tokens + extract(epoch FROM clock_timestamp() - b.at) * rl.lim / rl.per_s)
        FROM rate_buckets b WHERE b.name = s.rate_name AND b.key = s.rate_key) AS tokens,
       s.runs_on,
       s.runs_on IS NULL OR EXISTS (SELECT 1 FROM dispatchers d
                                    WHERE d.heartbeat_at > now() - make_interval(secs => $2) AND s.runs_on <@ d.tags) AS placed,
       s.quota_ns, qn.running_steps AS quota_limit,
       (SELECT count(*) FROM steps r
        WHERE (r.status = 'running') IS TRUE AND r.quota_ns IS NOT NULL AND r.quota_ns = qn.name) AS quota_in_use
FROM steps s
LEFT JOIN namespaces qn ON qn.name = s.quota_ns AND qn.running_steps IS NOT NULL
LEFT JOIN limits l ON l.name = s.rate_name
CROSS JOIN LATERAL (SELECT coalesce(l.rate_limit, s.rate_limit) AS lim, coalesce(l.rate_per_s, s.rate_per_s) AS per_s) rl
WHERE s.run_id = $1 AND s.status = 'ready' AND NOT s.held
  AND (s.conc_name IS NOT NULL OR s.rate_name IS NOT NULL OR s.runs_on IS NOT NULL OR qn.name IS NOT NULL)`

	sqlDispatcherBeat = `
INSERT INTO dispatchers (id, tags, version) VALUES ($1, $2, $3)
ON CONFLICT (id) DO UPDATE SET heartbeat_at = now(), tags = excluded.tags, version = excluded.version`

	sqlDispatcherGone = `DELETE FROM dispatchers WHERE id = $1 OR heartbeat_at < now() - interval '1 day'`

	sqlDispatcherList = `
SELECT id, tags, version, started_at, heartbeat_at FROM dispatchers
WHERE heartbeat_at > now() - make_interval(secs => $1) ORDER BY id`
)

// ErrFlowKey means a step's concurrency or rate limit key could not be evaluated for a new run (the
// input lacks a field the expression reads, …): the run is not created. It wraps
// ErrInvalidInput.
var ErrFlowKey = fmt.Errorf("%w: limit key", ErrInvalidInput)

// flowStep is what sqlFlowSteps reads of a step definition.
type flowStep struct {
	Key         string          `json:"key"`
	With        json.RawMessage `json:"with"`
	Concurrency *struct {
		Name  string `json:"name"`
		Key   string `json:"key"`
		Limit int    `json:"limit"`
	} `json:"concurrency"`
	Priority  *int     `json:"priority"`
	RunsOn    []string `json:"runs_on"`
	QueueMS   int64    `json:"queue_timeout_ms"`
	RateLimit *struct {
		Name  string `json:"name"`
		Key   string `json:"key"`
		Limit int    `json:"limit"`
		PerMS int64  `json:"per_ms"`
	} `json:"rate_limit"`
}

// flowKeys resolves the version a new run of workflow gets (as sqlRunCreate does)
// and evaluates the limit keys of its steps: the version, the JSON of the steps'
// flow settings that sqlFlowApply and sqlRunCreate take (nil when no step has
// any), and the same of its failure handlers (compensations, on_failure steps) for
// runs.handler_flow, with priority (the run's, given at its start) when not nil.
// ErrFlowKey when an expression fails. No version: version 0, nil, nil, nil
// (sqlRunCreate then reports it).
func flowKeys(ctx context.Context, q queryer, runID uuid.UUID, workflow string, version int, alias string,
	input json.RawMessage, labels Labels, priority *int) (int, json.RawMessage, json.RawMessage, error) {
	var row struct {
		Version  int  `db:"version"`
		Steps    JSON `db:"flow_steps"`
		Handlers JSON `db:"flow_handlers"`
	}
	if err := q.GetContext(ctx, &row, sqlFlowSteps, workflow, version, alias); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return 0, nil, nil, nil
		}
		return 0, nil, nil, err
	}
	var steps, handlers []flowStep
	if len(row.Steps) > 0 {
		if err := json.Unmarshal(row.Steps, &steps); err != nil {
			return 0, nil, nil, fmt.Errorf("concurrency of %s v%d: %w", workflow, row.Version, err)
		}
	}
	if len(row.Handlers) > 0 {
		if err := json.Unmarshal(row.Handlers, &handlers); err != nil {
			return 0, nil, nil, fmt.Errorf("concurrency of the handlers of %s v%d: %w", workflow, row.Version, err)
		}
	}
	if len(steps) == 0 && len(handlers) == 0 {
		return row.Version, nil, nil, nil
	}
	if labels == nil {
		labels = Labels{}
	}
	var in any = json.RawMessage(input)
	if len(input) == 0 {
		in = nil
	}
	vars := expr.Vars{
		expr.Input:  in,
		expr.Labels: map[string]string(labels),
		expr.Run:    map[string]any{"id": runID.String(), "workflow": workflow, "version": row.Version},
	}
	entries := func(steps []flowStep, priority *int) (json.RawMessage, error) {
		if len(steps) == 0 {
			return nil, nil
		}
		out := make(map[string]map[string]any, len(steps))
		for _, st := range steps {
			f, err := flowEntry(ctx, st, vars)
			if err != nil {
				return nil, err
			}
			if priority != nil {
				f["p"] = *priority
			}
			out[st.Key] = f
		}
		return json.Marshal(out)
	}
	flow, err := entries(steps, nil) // sqlRunCreate applies the run's priority
	if err != nil {
		return 0, nil, nil, err
	}
	hflow, err := entries(handlers, priority)
	if err != nil {
		return 0, nil, nil, err
	}
	return row.Version, flow, hflow, nil
}

// flowEntry is the flow settings of one step, its limit keys evaluated with vars
// (params: the step's with).
func flowEntry(ctx context.Context, st flowStep, vars expr.Vars) (map[string]any, error) {
	params := st.With
	if len(params) == 0 {
		params = json.RawMessage(`{}`)
	}
	vars[expr.Params] = params
	f := map[string]any{}
	if c := st.Concurrency; c != nil {
		key, err := evalKey(ctx, c.Key, vars)
		if err != nil {
			return nil, fmt.Errorf("%w of step %q (concurrency.key %s): %v", ErrFlowKey, st.Key, c.Key, err)
		}
		f["n"], f["k"], f["l"] = c.Name, key, c.Limit
	}
	if st.Priority != nil {
		f["p"] = *st.Priority
	}
	if len(st.RunsOn) > 0 {
		f["t"] = st.RunsOn
	}
	if st.QueueMS > 0 {
		f["q"] = float64(st.QueueMS) / 1000
	}
	if r := st.RateLimit; r != nil {
		key, err := evalKey(ctx, r.Key, vars)
		if err != nil {
			return nil, fmt.Errorf("%w of step %q (rate_limit.key %s): %v", ErrFlowKey, st.Key, r.Key, err)
		}
		f["rn"], f["rk"], f["rl"], f["rp"] = r.Name, key, r.Limit, float64(r.PerMS)/1000
	}
	return f, nil
}

// evalKey evaluates a limit's key expression: a string value as is, any other value
// as its JSON text; "" for no expression.
func evalKey(ctx context.Context, src string, vars expr.Vars) (string, error) {
	if src == "" {
		return "", nil
	}
	prog, err := expr.CreateEnv.Compile(src)
	if err != nil {
		return "", err
	}
	v, err := prog.Eval(ctx, vars)
	if err != nil {
		return "", err
	}
	var str string
	if json.Unmarshal(v, &str) == nil {
		return str, nil
	}
	return string(v), nil
}

// claimCandidate is a step sqlClaimCandidates locked (or, RunID nil, the row with
// NextIn).
type claimCandidate struct {
	RunID     *uuid.UUID `db:"run_id"`
	Key       *string    `db:"key"`
	ConcName  *string    `db:"conc_name"`
	ConcKey   *string    `db:"conc_key"`
	ConcLimit *int       `db:"conc_limit"`
	RateName  *string    `db:"rate_name"`
	RateKey   *string    `db:"rate_key"`
	RateLimit *int       `db:"rate_limit"`
	RatePerS  *float64   `db:"rate_per_s"`
	QuotaNS   *string    `db:"quota_ns"`
	NextIn    *float64   `db:"next_in"`
}

type limitKey struct{ name, key string }

// rateLockPrefix sets a rate limit's lock apart from a concurrency limit's of the
// same name.
const rateLockPrefix = "rate\x1e"

// admit returns the candidates that may start: all those without a limit; of those
// with a concurrency limit, as many per key as the key has free slots; of those
// with a rate limit, as many per key as its bucket has tokens (which it takes) — in
// candidate order. It takes the keys' locks, held until the transaction ends: the
// concurrency keys' first, then the rate keys' of the candidates left, each set
// in one statement in the order of the lock ids (every claimer takes them so, and
// sqlClaimAlone the concurrency keys' alone), so that no two claimers wait for
// each other in a circle.
func admit(ctx context.Context, tx *sqlx.Tx, cands []claimCandidate) ([]claimCandidate, time.Duration, error) {
	var err error
	if cands, err = admitConcurrency(ctx, tx, cands); err != nil {
		return nil, 0, err
	}
	var lockNames, lockKeys []string
	seen := map[limitKey]bool{}
	for _, c := range cands {
		if c.RateName == nil {
			continue
		}
		if k := (limitKey{rateLockPrefix + *c.RateName, *c.RateKey}); !seen[k] {
			seen[k] = true
			lockNames, lockKeys = append(lockNames, k.name), append(lockKeys, k.key)
		}
	}
	if len(lockNames) == 0 {
		return cands, 0, nil
	}
	var n int
	if err := tx.GetContext(ctx, &n, sqlClaimKeyLock, pq.StringArray(lockNames), pq.StringArray(lockKeys)); err != nil {
		return nil, 0, fmt.Errorf("lock rate limit keys: %w", err)
	}
	return admitRate(ctx, tx, cands)
}

// admitConcurrency keeps the candidates without a concurrency limit or a
// namespace's quota (quota_ns) and, of the others, the ones their key and their
// namespace have a free slot for (sqlClaimConcAdmit, which takes the keys' and
// the quotas' locks first).
func admitConcurrency(ctx context.Context, tx *sqlx.Tx, cands []claimCandidate) ([]claimCandidate, error) {
	var names, keys, quotas []sql.NullString
	var limits []sql.NullInt64
	var limited []int // index in cands of each ordinal's candidate
	for i, c := range cands {
		if c.ConcName == nil && c.QuotaNS == nil {
			continue
		}
		var n, k, q sql.NullString
		var l sql.NullInt64
		if c.ConcName != nil {
			n, k = sql.NullString{String: *c.ConcName, Valid: true}, sql.NullString{String: *c.ConcKey, Valid: true}
			l = sql.NullInt64{Int64: int64(*c.ConcLimit), Valid: true}
		}
		if c.QuotaNS != nil {
			q = sql.NullString{String: *c.QuotaNS, Valid: true}
		}
		names, keys, limits, quotas = append(names, n), append(keys, k), append(limits, l), append(quotas, q)
		limited = append(limited, i)
	}
	if len(limited) == 0 {
		return cands, nil
	}
	var ords []int
	if err := tx.SelectContext(ctx, &ords, sqlClaimConcAdmit, pq.GenericArray{A: names}, pq.GenericArray{A: keys},
		pq.GenericArray{A: limits}, pq.GenericArray{A: quotas}); err != nil {
		return nil, fmt.Errorf("count limit slots: %w", err)
	}
	admitted := make([]bool, len(cands))
	for _, o := range ords {
		admitted[limited[o-1]] = true
	}
	out := cands[:0:0]
	for i, c := range cands {
		if (c.ConcName == nil && c.QuotaNS == nil) || admitted[i] {
			out = append(out, c)
		}
	}
	return out, nil
}

// fairCheckEvery is how often a claim looks whether concurrency keys have turns
// to take (fairClaims).
const fairCheckEvery = time.Second

// fairCache is what fairClaims last found, and until when it holds.
type fairCache struct {
	until atomic.Int64 // unix nanoseconds
	fair  atomic.Bool
}

// fairClaims says whether a claim should take turns between the keys of the
// concurrency limits (sqlClaimCandidates) or may go by age alone
// (sqlClaimCandidatesByAge, far cheaper): whether limit_keys has a row, looked at
// once a second at most. A key that gets its first row just after a look waits
// that long for its turns to count.
func (s *Store) fairClaims(ctx context.Context) (bool, error) {
	now := time.Now().UnixNano()
	if now < s.fair.until.Load() {
		return s.fair.fair.Load(), nil
	}
	var fair bool
	if err := s.getPrepared(ctx, &fair, sqlLimitTurns); err != nil {
		return false, err
	}
	s.fair.fair.Store(fair)
	s.fair.until.Store(now + int64(fairCheckEvery))
	return fair, nil
}

// admitRate keeps the candidates whose rate bucket gives them a token, and takes
// the tokens (the keys are locked). next is when a bucket that refused a candidate
// has its next token (0: none refused).
func admitRate(ctx context.Context, tx *sqlx.Tx, cands []claimCandidate) (_ []claimCandidate, next time.Duration, _ error) {
	want := map[limitKey]int{}
	var order []limitKey
	var names, keys []string
	var lims []int64
	var pers []float64
	for _, c := range cands {
		if c.RateName == nil {
			continue
		}
		k := limitKey{*c.RateName, *c.RateKey}
		if _, ok := want[k]; !ok {
			order = append(order, k)
			names, keys = append(names, k.name), append(keys, k.key)
			lims, pers = append(lims, int64(*c.RateLimit)), append(pers, *c.RatePerS)
		}
		want[k]++
	}
	if len(order) == 0 {
		return cands, 0, nil
	}
	wants := make([]int64, len(order))
	for i, k := range order {
		wants[i] = int64(want[k])
	}
	if _, err := tx.ExecContext(ctx, sqlRateBuckets, pq.StringArray(names), pq.StringArray(keys),
		pq.Int64Array(lims), pq.Float64Array(pers)); err != nil {
		return nil, 0, fmt.Errorf("make rate buckets: %w", err)
	}
	rows, err := tx.QueryxContext(ctx, sqlRateTake, pq.StringArray(names), pq.StringArray(keys),
		pq.Int64Array(lims), pq.Float64Array(pers), pq.Int64Array(wants))
	if err != nil {
		return nil, 0, fmt.Errorf("take rate tokens: %w", err)
	}
	granted := map[limitKey]int{}
	for rows.Next() {
		var k limitKey
		var g int
		var in *float64
		if err := rows.Scan(&k.name, &k.key, &g, &in); err != nil {
			rows.Close()
			return nil, 0, err
		}
		granted[k] = g
		if in != nil && *in > 0 {
			if d := time.Duration(*in * float64(time.Second)); next == 0 || d < next {
				next = d
			}
		}
	}
	if err := rows.Close(); err != nil {
		return nil, 0, err
	}
	if err := rows.Err(); err != nil {
		return nil, 0, err
	}
	out := cands[:0:0]
	for _, c := range cands {
		if c.RateName == nil {
			out = append(out, c)
			continue
		}
		k := limitKey{*c.RateName, *c.RateKey}
		if granted[k] > 0 {
			granted[k]--
			out = append(out, c)
		}
	}
	return out, next, nil
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

// LimitOverride is a limit changed at run time: the concurrency limit, the rate
// limit, or both, of every step that names it.
type LimitOverride struct {
	Name string `db:"name"`
	// Concurrency is the slots per key; nil: the steps' own.
	Concurrency *int `db:"concurrency"`
	// RateLimit is the tokens per RatePerS seconds; nil: the steps' own.
	RateLimit *int      `db:"rate_limit"`
	RatePerS  *float64  `db:"rate_per_s"`
	UpdatedAt time.Time `db:"updated_at"`
	UpdatedBy string    `db:"updated_by"`
}

// LimitSetParams are the limits LimitSet changes; a zero field keeps the current
// one (the override's, else the steps' own).
type LimitSetParams struct {
	// Concurrency is the slots per key, 1..MaxLimit.
	Concurrency int
	// RateLimit is the tokens per RatePer, 1..MaxLimit, RatePer 1ms..24h: both or
	// neither.
	RateLimit int
	RatePer   time.Duration
}

// MaxLimit is the largest concurrency limit (bundle.MaxConcurrencyLimit).
const MaxLimit = 100_000

// reLimitName is the syntax of a limit's name (bundle.ValidLimitName).
var reLimitName = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,62}$`)

// MaxLimitKeys bounds the keys LimitList returns.
const MaxLimitKeys = 1000

// RateUsage is the bucket of one key of a rate limit.
type RateUsage struct {
	Name string `db:"name"`
	Key  string `db:"key"`
	// Tokens left now (refilled since the last take), of Limit per PerS seconds.
	Tokens float64 `db:"tokens"`
	Limit  int     `db:"lim"`
	PerS   float64 `db:"per_s"`
	// Ready is the number of steps of the key ready to start.
	Ready int `db:"ready"`
}

// sqlRateUsage reads the buckets, with the limit in force: the one set at run time,
// else the one of the latest claim's step.
const sqlRateUsage = `
SELECT b.name, b.key, least(rl.lim, b.tokens + extract(epoch FROM clock_timestamp() - b.at) * rl.lim / rl.per_s) AS tokens,
       rl.lim, rl.per_s,
       (SELECT count(*) FROM steps s WHERE s.status = 'ready' AND s.rate_name = b.name AND s.rate_key = b.key) AS ready
FROM rate_buckets b
LEFT JOIN limits l ON l.name = b.name
CROSS JOIN LATERAL (SELECT coalesce(l.rate_limit, b.lim) AS lim, coalesce(l.rate_per_s, b.per_s) AS per_s) rl
WHERE $1 = '' OR b.name = $1
ORDER BY b.name, b.key
LIMIT $2`

// RateList returns the buckets of the rate limits (of name alone unless name is
// ""), at most MaxLimitKeys: one per key a claim has taken a token of.
func (s *Store) RateList(ctx context.Context, name string) ([]RateUsage, error) {
	var out []RateUsage
	if err := s.db.SelectContext(ctx, &out, sqlRateUsage, name, MaxLimitKeys); err != nil {
		return nil, fmt.Errorf("list rate limits: %w", translateError(err))
	}
	return out, nil
}

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

// MaxRatePer and MinRatePer bound a rate limit's window (bundle's per).
const (
	MinRatePer = time.Millisecond
	MaxRatePer = 24 * time.Hour
)

// LimitSet changes the limits of name at run time, for every step that names it
// (concurrency.name, rate_limit.name), until LimitClear: the fields of p that are
// set replace the steps' own, the others keep what they were. The override is
// kept in the catalog: it outlives restarts and new deploys. ErrInvalidInput for a
// bad name, no field set, a limit out of 1..100000 or a window out of 1ms..24h.
// Steps already running keep running: a lower limit only delays the next claims; a
// lower rate caps the bucket's tokens at once.
func (s *Store) LimitSet(ctx context.Context, name string, p LimitSetParams, actor string) (*LimitOverride, error) {
	if !reLimitName.MatchString(namespace.Strip(name)) {
		return nil, fmt.Errorf("set limit %q: %w: a name is 1 to 63 of a-z, 0-9, '_', '.', '-', starting with a letter or digit", name, ErrInvalidInput)
	}
	var conc, rate *int
	var per *float64
	switch {
	case p.Concurrency == 0 && p.RateLimit == 0 && p.RatePer == 0:
		return nil, fmt.Errorf("set limit %s: %w: give a concurrency limit, a rate limit, or both", name, ErrInvalidInput)
	case p.Concurrency != 0 && (p.Concurrency < 1 || p.Concurrency > MaxLimit):
		return nil, fmt.Errorf("set limit %s: %w: concurrency %d is not within 1..%d", name, ErrInvalidInput, p.Concurrency, MaxLimit)
	case (p.RateLimit == 0) != (p.RatePer == 0):
		return nil, fmt.Errorf("set limit %s: %w: a rate limit needs both its limit and its window (per)", name, ErrInvalidInput)
	case p.RateLimit != 0 && (p.RateLimit < 1 || p.RateLimit > MaxLimit):
		return nil, fmt.Errorf("set limit %s: %w: rate limit %d is not within 1..%d", name, ErrInvalidInput, p.RateLimit, MaxLimit)
	case p.RatePer != 0 && (p.RatePer < MinRatePer || p.RatePer > MaxRatePer):
		return nil, fmt.Errorf("set limit %s: %w: per %s is not within %s..%s", name, ErrInvalidInput, p.RatePer, MinRatePer, MaxRatePer)
	}
	if p.Concurrency != 0 {
		conc = &p.Concurrency
	}
	if p.RateLimit != 0 {
		secs := p.RatePer.Seconds()
		rate, per = &p.RateLimit, &secs
	}
	var out LimitOverride
	// A transaction: the audit record commits with it (audit.go).
	if err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		return tx.GetContext(ctx, &out, sqlLimitSet, name, conc, rate, per, actor)
	}); err != nil {
		return nil, fmt.Errorf("set limit %s: %w", name, err)
	}
	return &out, nil
}

// LimitClear removes the limits set at run time for name: its steps' own limits
// apply again from the next claim. Clearing a name without an override does
// nothing.
func (s *Store) LimitClear(ctx context.Context, name string) error {
	if err := s.inTx(ctx, func(tx *sqlx.Tx) error { // the audit record's transaction (audit.go)
		_, err := tx.ExecContext(ctx, sqlLimitClear, name)
		return err
	}); err != nil {
		return fmt.Errorf("clear limit %s: %w", name, err)
	}
	return nil
}

// QueueTimeouts fails up to limit ready steps whose queue_timeout has passed
// (cairn_queue_timeout_next, one a transaction, as WakeDue): terminal, code
// queue_timeout; a paused run's steps wait for its resume. Safe from every
// dispatcher at once. Returns how many it failed.
func (s *Store) QueueTimeouts(ctx context.Context, limit int) (int, error) {
	n, err := s.eachNext(ctx, `SELECT cairn_queue_timeout_next()`, limit)
	if err != nil {
		return n, fmt.Errorf("queue timeouts: %w", err)
	}
	return n, nil
}

// RunDeadlines fails up to limit unended runs whose deadline has passed
// (cairn_run_deadlines): code deadline_exceeded, their unfinished steps and running
// attempts canceled, dispatchers told. Safe from every dispatcher at once.
func (s *Store) RunDeadlines(ctx context.Context, limit int) (int, error) {
	var n int
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		return tx.GetContext(ctx, &n, `SELECT cairn_run_deadlines($1)`, limit)
	})
	if err != nil {
		return 0, fmt.Errorf("run deadlines: %w", err)
	}
	return n, nil
}

// DispatcherLive is how recent a dispatcher's heartbeat (DispatcherBeat) must be
// for it to count as live: three of its beats (runtime: every 5 s).
const DispatcherLive = 15 * time.Second

// DispatcherBeat records that dispatcher id, with tags, is alive (its row is made
// on the first beat), running the binary Config.BinaryVersion names.
func (s *Store) DispatcherBeat(ctx context.Context, id string, tags []string) error {
	if tags == nil {
		tags = []string{}
	}
	var version any
	if s.cfg.BinaryVersion != "" {
		version = s.cfg.BinaryVersion
	}
	if _, err := s.db.ExecContext(ctx, sqlDispatcherBeat, id, pq.StringArray(tags), version); err != nil {
		return fmt.Errorf("dispatcher heartbeat: %w", translateError(err))
	}
	return nil
}

// DispatcherGone removes the row of a dispatcher that stops (and those silent for a
// day).
func (s *Store) DispatcherGone(ctx context.Context, id string) error {
	if _, err := s.db.ExecContext(ctx, sqlDispatcherGone, id); err != nil {
		return fmt.Errorf("dispatcher gone: %w", translateError(err))
	}
	return nil
}

// Dispatcher is a live dispatcher.
type Dispatcher struct {
	ID   string         `db:"id"`
	Tags pq.StringArray `db:"tags"`
	// Version is the binary it runs (Config.BinaryVersion); nil for one of a
	// release that did not record it.
	Version     *string   `db:"version"`
	StartedAt   time.Time `db:"started_at"`
	HeartbeatAt time.Time `db:"heartbeat_at"`
}

// DispatcherList returns the live dispatchers (a heartbeat within DispatcherLive).
func (s *Store) DispatcherList(ctx context.Context) ([]Dispatcher, error) {
	var out []Dispatcher
	if err := s.db.SelectContext(ctx, &out, sqlDispatcherList, DispatcherLive.Seconds()); err != nil {
		return nil, fmt.Errorf("list dispatchers: %w", translateError(err))
	}
	return out, nil
}

// BlockedBy says what holds a ready step back from starting.
type BlockedBy struct {
	// Kind is "concurrency", "rate_limit", "quota" (Name "running_steps", Key the
	// namespace) or "no_dispatcher".
	Kind string `json:"kind"`
	Name string `json:"name"`
	Key  string `json:"key"`
	// RunsOn is the tags no live dispatcher has all of (no_dispatcher).
	RunsOn []string `json:"runs_on,omitempty"`
	// InUse is the slots in use (concurrency), the tokens used in the window
	// (rate_limit) or the namespace's running steps (quota); Limit the limit.
	InUse int `json:"in_use"`
	Limit int `json:"limit"`
}

// StepsBlocked returns, by step key, the ready steps of a run (not held) that no
// live dispatcher can claim (runs_on), whose concurrency key has no free slot,
// whose namespace runs as many steps as its running_steps quota allows, or whose
// rate bucket has no token now.
func (s *Store) StepsBlocked(ctx context.Context, runID uuid.UUID) (map[string]BlockedBy, error) {
	rows, err := s.db.QueryxContext(ctx, sqlStepBlocked, runID, DispatcherLive.Seconds())
	if err != nil {
		return nil, fmt.Errorf("blocked steps of %s: %w", runID, translateError(err))
	}
	defer rows.Close()
	out := map[string]BlockedBy{}
	for rows.Next() {
		var (
			key                         string
			concName, concKey           *string
			concLimit, inUse, rateLimit *int
			rateName, rateKey           *string
			tokens                      *float64
			runsOn                      pq.StringArray
			placed                      bool
			quotaNS                     *string
			quotaLimit                  *int
			quotaInUse                  int
		)
		if err := rows.Scan(&key, &concName, &concKey, &concLimit, &inUse, &rateName, &rateKey, &rateLimit, &tokens,
			&runsOn, &placed, &quotaNS, &quotaLimit, &quotaInUse); err != nil {
			return nil, err
		}
		switch {
		case !placed:
			out[key] = BlockedBy{Kind: "no_dispatcher", RunsOn: []string(runsOn)}
		case concName != nil && *inUse >= *concLimit:
			out[key] = BlockedBy{Kind: "concurrency", Name: *concName, Key: *concKey, InUse: *inUse, Limit: *concLimit}
		case quotaLimit != nil && quotaInUse >= *quotaLimit:
			out[key] = BlockedBy{Kind: "quota", Name: QuotaRunningSteps, Key: *quotaNS, InUse: quotaInUse, Limit: *quotaLimit}
		case rateName != nil && tokens != nil && *tokens < 1:
			out[key] = BlockedBy{Kind: "rate_limit", Name: *rateName, Key: *rateKey, InUse: *rateLimit - int(*tokens), Limit: *rateLimit}
		}
	}
	return out, rows.Err()
}

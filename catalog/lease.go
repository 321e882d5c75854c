package catalog

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"
)

// Notification channels.
const (
	// ChannelSteps is notified when steps become ready, by the SQL function
	// cairn_wake (the one place in SQL that names it; TestWake holds the two equal).
	ChannelSteps = "cairn_steps"
	// ChannelCancel is notified with a run id when the run is canceled.
	ChannelCancel = "cairn_cancel"
	// ChannelProbe carries a server's notifications to itself (Store.Notify),
	// which tell it whether its LISTEN hears what is sent through the pool
	// (runtime's listenLoop).
	ChannelProbe = "cairn_probe"
)

const (
	// sqlClaim leases up to $2 ready steps to $1 for $3 seconds in one statement: each
	// step gets a fresh fencing token and an attempt row; each run touched gets one
	// revision bump for all its step.started events (seq = the run's revisions, in
	// key order), and leaves pending; the concurrency keys of the steps take their
	// turn (sqlClaimTurns). The deps of each step come back with it.
	//
	// attempts numbers the tries (the attempt row's number); counted_attempts is
	// what max_attempts limits. The claim counts every attempt up front, so that an
	// attempt whose dispatcher dies (swept as interrupted) is counted; the outcomes
	// that do not count (handback, infra_failed) take theirs back in
	// cairn_step_finish. So attempts ≥ counted_attempts, and the difference is the
	// number of uncounted attempts.
	//
	// The steps ($2, $4: run ids and keys) were chosen and locked before, in the
	// same transaction, by sqlClaimCandidates and admit (flow.go). Held steps (of a
	// paused run) are not claimed: steps_claim_idx indexes only ready steps that are
	// not held, so the claim never reads them. Nor are steps whose condition (when)
	// is not decided yet (ConditionsDecide decides it first). An attempt's
	// started_at is the clock's time at the claim, not the transaction's start: a
	// claim may wait for a limit key's lock, and its rate tokens are taken by the
	// clock after that wait.
	sqlClaim = `
WITH c AS (
    SELECT c.run_id, c.key, s.ctid AS tid, s.conc_name, s.conc_key FROM unnest($2::uuid[], $4::text[]) AS c(run_id, key)
    JOIN steps s ON s.run_id = c.run_id AND s.key = c.key
)` + sqlClaimWrites + sqlClaimTurns + sqlClaimSelect

	// sqlClaimTurns is the part of sqlClaim and sqlClaimAlone after their writes
	// that gives the concurrency keys of the steps they lease (c's conc_name and
	// conc_key) their turn, under the keys' locks: a key with more ready steps is
	// served now (its turn comes after the other keys'), one with none loses its
	// row (a new run gives it one again: sqlLimitKeys). Those "more" are the
	// ready steps of the statement's snapshot but those it leases (which are
	// still ready in that snapshot). Nothing to do when c has no key.
	sqlClaimTurns = `, served AS (
    SELECT DISTINCT c.conc_name AS n, c.conc_key AS k,
           EXISTS (SELECT 1 FROM steps s
                   WHERE s.status = 'ready' AND s.conc_name = c.conc_name AND s.conc_key = c.conc_key
                     AND NOT EXISTS (SELECT 1 FROM c o WHERE o.run_id = s.run_id AND o.key = s.key)) AS more
    FROM c WHERE c.conc_name IS NOT NULL
), gone AS (
    DELETE FROM limit_keys lk USING served v WHERE lk.name = v.n AND lk.key = v.k AND NOT v.more
), turn AS (
    INSERT INTO limit_keys (name, key, served_at)
    SELECT v.n, v.k, clock_timestamp() FROM served v WHERE v.more
    ON CONFLICT (name, key) DO UPDATE SET served_at = excluded.served_at
)`

	// sqlClaimDependents is sqlClaim in the transaction that finished steps ($5 run
	// ids, $6 keys) successfully: it leases to $1 up to $4 of their dependents that
	// this finish made ready and that are simple to claim (StepFinishClaim): no
	// concurrency or rate limit, not of a namespace with a running_steps quota
	// (those take turns, tokens and slots under their keys' locks: the claim loop
	// takes them), and claimable by sqlClaimableCheap (not
	// held, condition decided, runs_on within the dispatcher's tags $2). Only when
	// no other step has been waiting for a claim (ready before this transaction
	// began, ready_at < now()): a dependent never goes ahead of a step that waited
	// longer, whatever its priority. Its locks come in the lock order
	// (catalog/sql/run_control.sql): the run's shared lock and row were taken by
	// the finish, and the steps are skipped when locked, never waited for.
	//
	// Its shape keeps it linear in the dependents: d looks each one up by primary
	// key (the LATERAL's LIMIT keeps the planner from joining every ready step to
	// every dependent, which it did when the steps had just become ready: 148 ms
	// for a fan-out of 1,000), and c locks the chosen ones by primary key,
	// checking again that they are ready (held IS NOT TRUE, not NOT held, so that
	// steps_claim_idx does not match and the primary key is used).
	sqlClaimDependents = `
WITH d AS MATERIALIZED (
    SELECT s.run_id, s.key
    FROM (SELECT DISTINCT e.run_id, e.to_key AS key
          FROM unnest($5::uuid[], $6::text[]) AS f(run_id, key)
          JOIN step_edges e ON e.run_id = f.run_id AND e.from_key = f.key) x
    CROSS JOIN LATERAL (SELECT * FROM steps s WHERE s.run_id = x.run_id AND s.key = x.key LIMIT 1) s` + sqlClaimFollowing

	// sqlClaimFollowing is the rest of the statements that lease the steps a
	// finish made ready (sqlClaimDependents, sqlClaimMapInstances), after their
	// candidates s in d: the simple ones (no concurrency or rate limit or quota),
	// when no other step waits for a claim, and c, which locks them.
	sqlClaimFollowing = `
    WHERE ` + sqlClaimableCheap + `
      AND s.conc_name IS NULL AND s.rate_name IS NULL
      AND (s.quota_ns IS NULL OR NOT EXISTS (SELECT 1 FROM namespaces n
                                             WHERE n.name = s.quota_ns AND n.running_steps IS NOT NULL))
      AND NOT EXISTS (SELECT 1 FROM steps o
                      WHERE o.status = 'ready' AND NOT o.held AND o.ready_at < now()
                        AND o.condition IS DISTINCT FROM 'pending'
                        AND (o.runs_on IS NULL OR o.runs_on <@ $2::text[]))
    ORDER BY s.priority DESC, s.ready_at, s.run_id, s.key
    LIMIT $4
), c AS (
    SELECT s.run_id, s.key, s.ctid AS tid FROM d JOIN steps s ON s.run_id = d.run_id AND s.key = d.key
    WHERE s.status = 'ready' AND s.held IS NOT TRUE AND s.condition IS DISTINCT FROM 'pending'
    FOR UPDATE OF s SKIP LOCKED
)` + sqlClaimSteps

	// sqlClaimMapInstances is sqlClaimDependents for the next instances of maps
	// ($5 runs, $6 map steps) that the finish of earlier ones has just created
	// (StepFinishClaim, expandMaps): the same simple steps only, and only when no
	// other step waits for a claim (their own ready_at is now(), the
	// transaction's start). steps_map_idx finds a map's ready instances.
	sqlClaimMapInstances = `
WITH d AS MATERIALIZED (
    SELECT s.run_id, s.key
    FROM unnest($5::uuid[], $6::text[]) AS m(run_id, parent)
    CROSS JOIN LATERAL (SELECT * FROM steps s
                        WHERE s.run_id = m.run_id AND s.map_parent = m.parent AND s.status = 'ready'
                        ORDER BY s.map_index LIMIT $4) s` + sqlClaimFollowing

	// sqlGenericPlans makes the prepared statements of the rest of a transaction
	// run their generic plan (SET LOCAL, as an expression). The finish that leases
	// sets it in its first statement (sqlStepsSucceed with $6 false): on a catalog
	// of 500,000 steps PostgreSQL judged sqlClaimDependents' generic plan dearer
	// than its custom ones (their estimates take the arrays' lengths) and planned
	// it again at every call, ≈ 1 ms in the dispatcher's clock against 0.35 ms of
	// execution (growth scenario, step-to-step filled ÷ empty 1.1–1.7 before,
	// 0.83–0.92 after). A SET LOCAL statement of its own was a round trip more.
	sqlGenericPlans = `set_config('plan_cache_mode', 'force_generic_plan', true) IS NOT NULL`

	// sqlClaimSteps is the part of the claim statements after c, the steps to
	// lease (locked by the same transaction): $1 is the owner, $3 the lease's
	// seconds, and c carries each step's ctid (tid), read under this
	// transaction's lock on it, so it cannot move before upd. sqlClaimWrites
	// leases them, sqlClaimSelect returns them.
	//
	// upd finds the steps by TID (ctid = ANY) and r the runs by primary key (id =
	// ANY), whatever the estimates: a generic plan (prepared statements, after
	// five calls) takes LIMIT $n for a tenth of the candidates, and with 100,000
	// map instances ready it joined them by hash to a scan of every step.
	//
	// No CTE of many rows is joined to another: PostgreSQL estimates a CTE at a
	// few rows and joins two by a nested loop, every step of the batch against
	// every run (64 × 64 rows for a batch of 64, each twice). f is one row, the
	// batch's leases as arrays in (run, key) order: r reads its runs once by
	// primary key (id = ANY (f.ids)), and each run's positions in them
	// (array_positions) are its bump and its events' keys, in key order. Joined
	// to per-run rows (id = p.run_id AND id = ANY), PostgreSQL scanned the whole
	// array for each run once the runs table was large (73 buffers a step
	// claimed, 500,000 runs; growth scenario). The rows returned read their
	// run's workflow, version and input by primary key (they never change, so
	// the statement's snapshot of them is r's). The deps of a step are read one
	// by one by primary key (the LATERAL's LIMIT): joined to unnest(needs), or
	// with key = ANY (needs), PostgreSQL read every step of the run for each step
	// claimed (a fan-out of 1,000: a million rows, 18 times slower on a table of
	// 1,000 claims).
	//
	// rl locks the batch's runs in id order before r writes them (FOR NO KEY
	// UPDATE, as the finishers take them in cairn_steps_succeed: catalog/sql/steps.sql):
	// r alone updated them in whatever order its plan read them, and met
	// finishing batches in a circle (catalog TestLockOrderStress).
	sqlClaimSteps  = sqlClaimWrites + sqlClaimSelect
	sqlClaimWrites = `, upd AS (
    UPDATE steps s SET status = 'running', attempts = s.attempts + 1,
        counted_attempts = s.counted_attempts + 1, lease_owner = $1,
        lease_token = nextval('lease_token_seq'), lease_expires_at = now() + make_interval(secs => $3),
        started_at = coalesce(s.started_at, now())
    FROM c WHERE s.ctid = ANY (ARRAY(SELECT c.tid FROM c)) AND s.ctid = c.tid
      AND s.run_id = c.run_id AND s.key = c.key
    RETURNING s.run_id, s.key, s.attempts, s.lease_token, s.lease_expires_at, s.checkpoint, s.needs, s.map_index, s.map_item, s.ready_at
), att AS (
    INSERT INTO attempts (run_id, step_key, number, dispatcher, lease_token, started_at)
    SELECT run_id, key, attempts, $1, lease_token, clock_timestamp() FROM upd
), f AS (
    SELECT array_agg(run_id ORDER BY run_id, key) AS runs, array_agg(key ORDER BY run_id, key) AS keys,
           array_agg(attempts ORDER BY run_id, key) AS atts, array_agg(lease_token ORDER BY run_id, key) AS tokens,
           array_agg(DISTINCT run_id) AS ids
    FROM upd
), rl AS (
    SELECT runs.id FROM runs, f WHERE runs.id = ANY (f.ids) ORDER BY runs.id FOR NO KEY UPDATE OF runs
), r AS (
    UPDATE runs SET revision = runs.revision + cardinality(array_positions(f.runs, runs.id)),
        status = CASE WHEN runs.status = 'pending' THEN 'running' ELSE runs.status END,
        started_at = coalesce(runs.started_at, now())
    FROM f, rl WHERE runs.id = ANY (f.ids) AND rl.id = runs.id
    RETURNING runs.id, runs.revision, array_positions(f.runs, runs.id) AS at
), ev AS (
    INSERT INTO events (run_id, seq, type, step_key, attempt, data)
    SELECT r.id, r.revision - cardinality(r.at) + k.ord, 'step.started', f.keys[k.i], f.atts[k.i],
           jsonb_build_object('dispatcher', $1::text, 'lease_token', f.tokens[k.i])
    FROM r CROSS JOIN f CROSS JOIN LATERAL unnest(r.at) WITH ORDINALITY AS k(i, ord)
)`
	sqlClaimSelect = `
SELECT u.run_id, u.key, u.attempts AS attempt, u.lease_token, u.lease_expires_at, u.checkpoint,
       rr.workflow, rr.version, rr.input, u.map_index, u.map_item,
       greatest(extract(epoch FROM now() - u.ready_at), 0)::float8 AS queue_wait,
       (SELECT coalesce(jsonb_object_agg(d.key, coalesce(d.output, 'null'::jsonb)), '{}')
        FROM unnest(u.needs) AS n(key)
        CROSS JOIN LATERAL (SELECT d.key, d.output FROM steps d
                            WHERE d.run_id = u.run_id AND d.key = n.key LIMIT 1) d) AS deps
FROM upd u CROSS JOIN LATERAL (SELECT runs.workflow, runs.version, runs.input FROM runs
                               WHERE runs.id = u.run_id LIMIT 1) rr`

	// sqlClaimAlone is the claim by age (sqlClaimCandidatesByAge, admit, sqlClaim)
	// in one statement that is its own transaction, for when no
	// concurrency key takes turns (Store.fairClaims): it leases up to $4
	// candidates to $1 (tags $2, lease $3 seconds). When one of them has a rate
	// limit, it leases nothing and says so (fallback): the claim runs in a
	// transaction that takes the buckets' tokens. When one of them is of a
	// namespace with a running_steps quota (quota.go), it leases nothing either
	// and says so (quota): sqlClaimAloneQuota claims then, which applies the
	// quotas; this one keeps the plan of a claim without them (the steps of
	// default, the common case). One last row, with an empty key, carries
	// fallback, quota and next_in (as sqlClaimNextIn) when one is set.
	//
	// Concurrency limits it applies itself, by the rule admit applies
	// (sqlConcAdmitted, over the candidates in their order): use takes the keys'
	// locks and counts their running steps after them (cairn_conc_usage, whose
	// count has a snapshot of its own: catalog/sql/flow.sql);
	// the keys of the steps leased take their turn (sqlClaimTurns). Without a
	// candidate with a concurrency limit, use calls nothing (the lateral
	// function of an empty row set).
	//
	// It is prepared once for each power of two (claimAloneQuery): cand locks up
	// to that constant number of candidates (%[1]d), top takes the first $4 of
	// them. A generic plan of LIMIT $4 in cand took it for a tenth of the ready
	// steps: over a catalog of 500,000 runs it read every ready step at each claim
	// (5 times the buffers per step; growth steps/s filled ÷ empty 0.77), and with
	// a map's 100,000 instances it joined them to a scan of every step (stop 24).
	// With a constant the generic plan is the custom one, and the claim is not
	// planned again at each call (≈ 1 ms of PostgreSQL's time). The candidates
	// past $4, and those a full key refuses, are locked until the statement
	// ends, and skipped by other claims meanwhile.
	sqlClaimAlone = sqlClaimAloneHead + `
), fb AS (
    SELECT EXISTS (SELECT 1 FROM top WHERE top.rated) AS fallback,
           EXISTS (SELECT 1 FROM top JOIN namespaces n ON n.name = top.quota_ns
                   WHERE top.quota_ns IS NOT NULL AND n.running_steps IS NOT NULL) AS quota
), use AS MATERIALIZED (
    SELECT u.* FROM (
        SELECT ARRAY(SELECT top.conc_name FROM top WHERE top.conc_name IS NOT NULL) AS names,
               ARRAY(SELECT top.conc_key FROM top WHERE top.conc_name IS NOT NULL) AS keys
        FROM fb WHERE NOT fb.fallback AND NOT fb.quota) a
    CROSS JOIN LATERAL cairn_conc_usage(a.names, a.keys) u
    WHERE cardinality(a.names) > 0
), admit_src AS (
    SELECT top.*, row_number() OVER (ORDER BY top.priority DESC, top.ready_at) AS ord
    FROM top, fb WHERE NOT fb.fallback AND NOT fb.quota
), c AS (` + sqlConcAdmitted + `
)` + sqlClaimWrites + sqlClaimTurns + `
SELECT x.*, false AS fallback, false AS quota, NULL::float8 AS next_in FROM (` + sqlClaimSelect + `) x
UNION ALL
SELECT NULL, '', 0, 0, now(), NULL, '', 0, NULL, NULL, NULL, 0, NULL, fb.fallback, fb.quota, n.next_in
FROM fb, (` + sqlClaimNextInValue + `) n
WHERE fb.fallback OR fb.quota OR n.next_in IS NOT NULL`

	// sqlClaimAloneQuota is sqlClaimAlone for candidates of namespaces with a
	// running_steps quota (quota.go): use takes the locks of the concurrency keys
	// and of the quotas together and counts their running steps after them
	// (cairn_claim_usage), and c admits by sqlQuotaAdmitted. Without a candidate
	// with a limit or a quota, use calls nothing.
	sqlClaimAloneQuota = sqlClaimAloneHead + `
), fb AS (
    SELECT EXISTS (SELECT 1 FROM top WHERE top.rated) AS fallback
), use AS MATERIALIZED (
    SELECT u.* FROM (
        SELECT ARRAY(SELECT top.conc_name FROM top WHERE top.conc_name IS NOT NULL) AS names,
               ARRAY(SELECT top.conc_key FROM top WHERE top.conc_name IS NOT NULL) AS keys,
               ARRAY(SELECT DISTINCT top.quota_ns FROM top JOIN namespaces n ON n.name = top.quota_ns
                     WHERE top.quota_ns IS NOT NULL AND n.running_steps IS NOT NULL) AS quotas
        FROM fb WHERE NOT fb.fallback) a
    CROSS JOIN LATERAL cairn_claim_usage(a.names, a.keys, a.quotas) u
    WHERE cardinality(a.names) > 0 OR cardinality(a.quotas) > 0
), admit_src AS (
    SELECT top.*, row_number() OVER (ORDER BY top.priority DESC, top.ready_at) AS ord
    FROM top, fb WHERE NOT fb.fallback
), c AS (` + sqlQuotaAdmitted + `
)` + sqlClaimWrites + sqlClaimTurns + `
SELECT x.*, false AS fallback, false AS quota, NULL::float8 AS next_in FROM (` + sqlClaimSelect + `) x
UNION ALL
SELECT NULL, '', 0, 0, now(), NULL, '', 0, NULL, NULL, NULL, 0, NULL, fb.fallback, false, n.next_in
FROM fb, (` + sqlClaimNextInValue + `) n
WHERE fb.fallback OR n.next_in IS NOT NULL`

	// sqlClaimAloneHead is the candidates of sqlClaimAlone and sqlClaimAloneQuota.
	sqlClaimAloneHead = `
WITH cand AS (
    SELECT s.run_id, s.key, s.ctid AS tid, s.rate_name IS NOT NULL AS rated,
           s.conc_name, s.conc_key, s.conc_limit, s.quota_ns, s.priority, s.ready_at
    FROM steps s
    WHERE ` + sqlClaimable + `
    ORDER BY s.priority DESC, s.ready_at
    LIMIT %[1]d
    FOR UPDATE SKIP LOCKED
), top AS (
    SELECT * FROM cand ORDER BY cand.priority DESC, cand.ready_at LIMIT $4`

	// sqlRunShare takes run $1's shared lock, the first of the locks every writer
	// of a run's steps takes (catalog/sql/run_control.sql: the run's advisory
	// lock, its steps, its row), so that a cancel never waits for it in a circle.
	// The statements that call one catalog function take it in their WHERE
	// instead, evaluated before the function (a one-time filter).
	sqlRunShare = `SELECT cairn_runs_share(ARRAY[$1::uuid])`

	// sqlRunsShare takes the shared locks of the runs $1 (and of their
	// ancestors), as sqlRunShare.
	sqlRunsShare = `SELECT cairn_runs_share($1::uuid[])`

	// sqlStepsFail finishes the attempts that did not succeed, one
	// cairn_step_finish each, in one round trip; rows are finished in array order
	// (the caller sorts by run and key so concurrent batches lock in one order).
	// One boolean per row: written, or false when the lease was lost. Its WHERE
	// takes the runs' shared locks (cairn_runs_share) before a row is finished, as
	// every writer of a run does first (catalog/sql/run_control.sql).
	sqlStepsFail = `
SELECT cairn_step_finish(r.run_id, r.key, r.token, r.outcome, NULL, r.error::jsonb,
                         r.retryable, now() + make_interval(secs => r.retry_in), r.log_key)
FROM unnest($1::uuid[], $2::text[], $3::bigint[], $4::text[], $5::text[],
            $6::boolean[], $7::float8[], $8::text[])
     WITH ORDINALITY AS r(run_id, key, token, outcome, error, retryable, retry_in, log_key, ord)
WHERE cairn_runs_share($1::uuid[])
ORDER BY r.ord`

	// sqlStepsSucceed finishes successful attempts set-based; it returns the
	// ordinals (1-based) of the rows written (the others lost their lease) and
	// how many steps they made ready, which wakes the dispatchers when $6 is true
	// (catalog/sql/steps.sql). $6 false is a finish that leases their
	// dependents next (sqlClaimDependents), in generic plans (sqlGenericPlans).
	// Its WHERE takes the runs' shared locks first, as sqlStepsFail's does;
	// OFFSET 0 keeps the function to one call.
	sqlStepsSucceed = `
SELECT (x.s).ords, (x.s).ready FROM (
    SELECT cairn_steps_succeed($1::uuid[], $2::text[], $3::bigint[], $4::text[], $5::text[], $6) AS s
    WHERE cairn_runs_share($1::uuid[]) AND ($6 OR ` + sqlGenericPlans + `) OFFSET 0) x`

	// sqlWake wakes the dispatchers at the commit (cairn_wake).
	sqlWake = `SELECT cairn_wake()`

	// sqlHeartbeat renews dispatcher $5's liveness (dispatchers.lease_until, which
	// cairn_sweep_next reads: catalog/sql/steps.sql) and extends the
	// leases given, in one statement that waits for no row lock: a step row that
	// another transaction holds locked (a finisher, a claim, a pause) is skipped
	// this time, not waited for, so a heartbeat is never queued behind the
	// catalog's writers, and never meets them in a deadlock. It returns each
	// lease that is still held (extended, or skipped as busy: its token is still
	// the step's); the others are lost.
	//
	// Each step is found by primary key: its status test matches no partial
	// index. As s.status = 'running', it matched steps_lease_expiry_idx, and
	// PostgreSQL scanned it (every running step, and the dead entries of the
	// steps finished since the last vacuum) and joined the leases to it: 4,789
	// buffers and 41 ms a heartbeat after 20,000 steps had run, against a few
	// buffers a lease. What it returns is read without a lock, in the
	// statement's snapshot (before upd's writes, which run whether or not the
	// query reads them): the leases extended and the ones skipped as busy alike.
	sqlHeartbeat = `
WITH me AS (
    INSERT INTO dispatchers (id, lease_until) VALUES ($5, now() + make_interval(secs => $4))
    ON CONFLICT (id) DO UPDATE SET lease_until = excluded.lease_until
), h AS MATERIALIZED (
    SELECT * FROM unnest($1::uuid[], $2::text[], $3::bigint[]) AS h(run_id, key, token)
), l AS (
    SELECT s.ctid AS tid FROM h CROSS JOIN LATERAL (
        SELECT s.ctid FROM steps s
        WHERE s.run_id = h.run_id AND s.key = h.key AND s.lease_token = h.token AND (s.status = 'running') IS TRUE
        FOR UPDATE OF s SKIP LOCKED) s
), upd AS (
    UPDATE steps s SET lease_expires_at = now() + make_interval(secs => $4)
    WHERE s.ctid = ANY (ARRAY(SELECT l.tid FROM l))
    RETURNING s.lease_token
)
SELECT h.token FROM h
WHERE EXISTS (SELECT 1 FROM steps s
              WHERE s.run_id = h.run_id AND s.key = h.key AND s.lease_token = h.token AND (s.status = 'running') IS TRUE)`

	sqlCheckpoint = `
UPDATE steps SET checkpoint = $4
WHERE run_id = $1 AND key = $2 AND lease_token = $3 AND status = 'running'
RETURNING attempts`

	sqlStepEvent = `SELECT cairn_event($1, $2, $3, $4, $5)`

	sqlLeaseHeld = `
SELECT attempts FROM steps WHERE run_id = $1 AND key = $2 AND lease_token = $3 AND status = 'running'`

	sqlSweep = `SELECT cairn_sweep_next(make_interval(secs => $1))`

	// When cairn_sweep_next may next take a lease: a lease of a dead owner at its
	// expiry, one of a live owner (dispatchers.lease_until ahead) when that
	// liveness ends or the lease is $1 past its expiry, whichever comes first; but
	// not before the sweep grace after the database started serving as the
	// primary it is (see cairn_primary_since in catalog/sql/steps.sql).
	sqlNextLeaseExpiry = `
SELECT greatest(min(CASE WHEN d.lease_until > now()
                         THEN least(d.lease_until, s.lease_expires_at + make_interval(secs => $1))
                         ELSE s.lease_expires_at END),
                cairn_primary_since() + make_interval(secs => $1))
FROM steps s LEFT JOIN dispatchers d ON d.id = s.lease_owner
WHERE s.status = 'running'`
)

// Claimed is a step leased to a dispatcher, with what its envelope needs.
type Claimed struct {
	RunID          uuid.UUID `db:"run_id"`
	Key            string    `db:"key"`
	Attempt        int       `db:"attempt"`
	LeaseToken     int64     `db:"lease_token"`
	LeaseExpiresAt time.Time `db:"lease_expires_at"`
	Checkpoint     JSON      `db:"checkpoint"`
	Workflow       string    `db:"workflow"`
	Version        int       `db:"version"`
	Input          JSON      `db:"input"`
	// Deps maps each upstream key to its stored output (inline or a $blob reference).
	Deps JSON `db:"deps"`
	// MapIndex and MapItem are a map instance's index and item; nil otherwise.
	MapIndex *int64 `db:"map_index"`
	MapItem  JSON   `db:"map_item"`
	// QueueWait is how long the step was ready before this claim, in seconds (by the
	// database's clock: ready_at to the claim).
	QueueWait float64 `db:"queue_wait"`
}

// StepClaim leases up to limit ready steps (ready_at reached) to owner for ttl, each
// with a fresh fencing token, in one transaction. Steps locked by another claimer are
// skipped, never waited for; a step whose concurrency key has no free slot is not
// claimed (it stays ready), and claimers of one key take turns (flow.go).
func (s *Store) StepClaim(ctx context.Context, owner string, limit int, ttl time.Duration) ([]Claimed, error) {
	out, _, err := s.StepClaimNext(ctx, owner, nil, limit, ttl)
	return out, err
}

// StepClaimNext is StepClaim for a dispatcher with tags (cairn serve --tags: it
// claims the steps whose runs_on it has all of, and those without), and also says
// when to look again for steps that wait for a rate limit's token: next is how long
// until the first token of an empty bucket that ready steps wait for; 0 when none
// does.
func (s *Store) StepClaimNext(ctx context.Context, owner string, tags []string, limit int, ttl time.Duration) ([]Claimed, time.Duration, error) {
	if tags == nil {
		tags = []string{}
	}
	fair, err := s.fairClaims(ctx)
	if err != nil {
		return nil, 0, fmt.Errorf("claim steps: %w", translateError(err))
	}
	if now := time.Now().UnixNano(); !fair && now >= s.limitedUntil.Load() {
		quota := now < s.quotaUntil.Load()
		out, next, fallback, quoted, err := s.dispatch.claimAlone(ctx, owner, tags, limit, ttl, quota)
		if err == nil && quoted {
			// Steps of a namespace with a running_steps quota are ready: the
			// claims of the next second apply the quotas at once.
			s.quotaUntil.Store(time.Now().Add(fairCheckEvery).UnixNano())
			out, next, fallback, _, err = s.dispatch.claimAlone(ctx, owner, tags, limit, ttl, true)
		}
		if err != nil || !fallback {
			return out, next, err
		}
		// Steps with rate limits are ready: the claims of the next second take
		// their tokens at once.
		s.limitedUntil.Store(time.Now().Add(fairCheckEvery).UnixNano())
	}
	var out []Claimed
	var next time.Duration
	err = s.inTx(ctx, func(tx *sqlx.Tx) error {
		out, next = out[:0], 0
		var rows []claimCandidate
		q := sqlClaimCandidatesByAge
		if fair {
			q = sqlClaimCandidates
		}
		st, err := s.txPrepared(ctx, tx, q)
		if err != nil {
			return err
		}
		if err := st.SelectContext(ctx, &rows, limit, pq.StringArray(tags)); err != nil {
			return s.retryStale(q, err)
		}
		cands := rows[:0:0]
		for _, c := range rows {
			if c.RunID == nil {
				if c.NextIn != nil {
					next = time.Duration(*c.NextIn * float64(time.Second))
				}
				continue
			}
			cands = append(cands, c)
		}
		cands, refused, err := admit(ctx, tx, cands)
		if refused > 0 && (next == 0 || refused < next) {
			next = refused
		}
		if err != nil || len(cands) == 0 {
			return err
		}
		ids := make([]string, len(cands))
		keys := make([]string, len(cands))
		for i, c := range cands {
			ids[i], keys[i] = c.RunID.String(), *c.Key
		}
		st, err = s.txPrepared(ctx, tx, sqlClaim)
		if err != nil {
			return err
		}
		if err := st.SelectContext(ctx, &out, owner, pq.StringArray(ids), ttl.Seconds(), pq.StringArray(keys)); err != nil {
			return s.retryStale(sqlClaim, err)
		}
		return nil
	})
	if err != nil {
		return nil, 0, fmt.Errorf("claim steps: %w", err)
	}
	return out, next, nil
}

// claimAloneQueries are sqlClaimAlone for candidate limits 1, 2, 4, … (index
// i for 1 << i), the constant its plan is made for; claimAloneQuotaQueries
// sqlClaimAloneQuota's.
var claimAloneQueries, claimAloneQuotaQueries = func() (q, quota [16]string) {
	for i := range q {
		q[i], quota[i] = fmt.Sprintf(sqlClaimAlone, 1<<i), fmt.Sprintf(sqlClaimAloneQuota, 1<<i)
	}
	return q, quota
}()

// claimAloneQuery is sqlClaimAlone (sqlClaimAloneQuota with quota) for a claim
// of limit steps: the one for the smallest power of two not below it (the
// largest for a larger limit, which then leases at most that many).
func claimAloneQuery(limit int, quota bool) string {
	i := min(bits.Len(uint(max(limit, 1)-1)), len(claimAloneQueries)-1)
	if quota {
		return claimAloneQuotaQueries[i]
	}
	return claimAloneQueries[i]
}

// claimAlone is StepClaimNext's claim in one statement (sqlClaimAlone, or
// sqlClaimAloneQuota with quota), for when no concurrency key takes turns;
// fallback when a candidate has a rate limit and the claim must take the
// buckets' tokens, quoted when (without quota) a candidate is of a namespace
// with a running_steps quota: nothing was leased then. StepClaimNext runs it on
// the dispatch pool (Store.dispatch), where its plan is generic from the first
// call, which its constant LIMIT makes the custom one. The claim in a
// transaction (keys taking turns, rate limits) stays on the main pool: its
// candidates' LIMIT $1 is a parameter, whose plans PostgreSQL chooses itself.
func (s *Store) claimAlone(ctx context.Context, owner string, tags []string, limit int, ttl time.Duration, quota bool) (
	out []Claimed, next time.Duration, fallback, quoted bool, err error) {
	type row struct {
		Claimed
		Fallback bool     `db:"fallback"`
		Quota    bool     `db:"quota"`
		NextIn   *float64 `db:"next_in"`
	}
	var rows []row
	q := claimAloneQuery(limit, quota)
	err = s.retrying(ctx, func() error {
		rows = rows[:0]
		return translateError(s.selectPrepared(ctx, &rows, q, owner, pq.StringArray(tags), ttl.Seconds(), limit))
	})
	if err != nil {
		return nil, 0, false, false, fmt.Errorf("claim steps: %w", err)
	}
	out = make([]Claimed, 0, len(rows))
	for _, r := range rows {
		if r.Key == "" { // the last row
			if r.NextIn != nil {
				next = time.Duration(*r.NextIn * float64(time.Second))
			}
			fallback, quoted = r.Fallback, r.Quota
			continue
		}
		out = append(out, r.Claimed)
	}
	return out, next, fallback, quoted, nil
}

// StepFinishParams is the end of an attempt.
type StepFinishParams struct {
	RunID      uuid.UUID
	Key        string
	LeaseToken int64
	Outcome    Outcome
	// Output is the step's output (inline JSON or a $blob reference) on success.
	Output json.RawMessage
	// Error describes a failure ({"message", "code", …}).
	Error json.RawMessage
	// Retryable says a failure may be retried if attempts remain.
	Retryable bool
	// RetryIn is how long after the commit a retry becomes claimable.
	RetryIn time.Duration
	// LogKey is the blob key of the attempt's log, if any.
	LogKey string
}

// StepFinish records the end of one attempt, as StepFinishBatch does: ErrLeaseLost if
// the token is no longer the step's lease (nothing is written then), ErrInvalidInput
// for an unknown outcome.
func (s *Store) StepFinish(ctx context.Context, p *StepFinishParams) error {
	errs, err := s.StepFinishBatch(ctx, []*StepFinishParams{p})
	if err != nil {
		return err
	}
	return errs[0]
}

// StepFinishBatch records the end of many attempts and everything that follows from
// each (the step's state, dependents made ready or skipped, the run's final state,
// events) in one transaction and one or two round trips: a group commit. Successes,
// the common case, are written set-based (cairn_steps_succeed); other outcomes go
// through cairn_step_finish one by one (state.go lists what each outcome does).
//
// It returns one error per item, in order: nil, or ErrLeaseLost when the token is no
// longer the step's lease (that item is not written). A failure of the whole batch
// is the returned error, and no item is written: ErrInvalidInput for an unknown
// outcome, or a database error.
func (s *Store) StepFinishBatch(ctx context.Context, items []*StepFinishParams) ([]error, error) {
	out, _, err := s.StepFinishClaim(ctx, items, nil)
	return out, err
}

// ClaimNext asks StepFinishClaim to lease the dependents its successes make
// ready, as StepClaimNext would (Owner, Tags, TTL), up to Limit of them.
type ClaimNext struct {
	Owner string
	Tags  []string
	Limit int
	TTL   time.Duration
	// Page reads the next items of a blob map (MapWorker.Page) for the next
	// instances of maps whose instances succeeded; nil: only inline maps get
	// theirs in the finish. It runs in the finish's transaction: it should not
	// wait (an error leaves the map to the map loop).
	Page func(ctx context.Context, st *MapState, n int) (json.RawMessage, int64, bool, error)
}

// StepFinishClaim is StepFinishBatch that also leases, in the same transaction,
// dependents its successes made ready, when next is not nil and its Limit above
// zero: the dispatcher that finishes a step starts its next one without another
// claim. It leases only the simple ones (no concurrency or rate limit or quota, not held,
// condition decided, runs_on within next.Tags), and only when no other step
// waits for a claim, so that no step goes ahead of one that waited longer
// (sqlClaimDependents); the others stay ready for StepClaimNext. The leases are
// those StepClaimNext gives (fencing tokens, attempt rows, step.started events).
// A batch with other outcomes than successes leases none (finishMixed). It runs
// on the dispatch pool (Store.dispatch).
func (s *Store) StepFinishClaim(ctx context.Context, items []*StepFinishParams, next *ClaimNext) ([]error, []Claimed, error) {
	return s.dispatch.stepFinishClaim(ctx, items, next)
}

// stepFinishClaim is StepFinishClaim on s's pool.
func (s *Store) stepFinishClaim(ctx context.Context, items []*StepFinishParams, next *ClaimNext) ([]error, []Claimed, error) {
	var ok, other []int // indexes into items
	for i, p := range items {
		if p.Outcome == OutcomeSucceeded {
			ok = append(ok, i)
		} else {
			other = append(other, i)
		}
	}
	succeeded, failed := newFinishArrays(items, ok), newFinishArrays(items, other)
	written := make([]bool, len(items))
	var claimed []Claimed
	if len(other) == 0 && (next == nil || next.Limit <= 0) {
		// Successes alone, nothing to lease: one statement, its own transaction.
		err := s.retrying(ctx, func() error {
			clear(written)
			st, err := s.prepared(ctx, sqlStepsSucceed)
			if err != nil {
				return translateError(err)
			}
			var ords pq.Int64Array
			var ready int
			if err := st.QueryRowxContext(ctx, succeeded.succeedArgs(true)...).Scan(&ords, &ready); err != nil {
				return translateError(s.retryStale(sqlStepsSucceed, err))
			}
			for _, o := range ords {
				written[ok[o-1]] = true
			}
			return nil
		})
		return finishResults(items, written, nil, err)
	}
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		clear(written)
		claimed = claimed[:0]
		if len(ok) > 0 && len(other) > 0 {
			return s.finishMixed(ctx, tx, items, written)
		}
		if len(ok) > 0 {
			a := succeeded
			leasing := next != nil && next.Limit > 0
			var ords pq.Int64Array
			var ready int
			st, err := s.txPrepared(ctx, tx, sqlStepsSucceed)
			if err != nil {
				return err
			}
			if err := st.QueryRowxContext(ctx, a.succeedArgs(!leasing)...).Scan(&ords, &ready); err != nil {
				return s.retryStale(sqlStepsSucceed, err)
			}
			for _, o := range ords {
				written[ok[o-1]] = true
			}
			if leasing && len(ords) > 0 {
				if claimed, err = s.claimDependents(ctx, tx, next, a, ords); err != nil {
					return err
				}
			}
			// The steps made ready that this finish did not lease wake the
			// dispatchers, as the function would have (those it leased are this
			// dispatcher's: a wake-up for them makes every dispatcher poll for
			// nothing).
			if leasing && ready > len(claimed) {
				if _, err := tx.ExecContext(ctx, sqlWake); err != nil {
					return err
				}
			}
			// Map instances that succeeded left room in their maps: the
			// next ones are created and leased here, not by the map loop and
			// the claim loop in two more transactions each.
			if room := leaseRoom(next) - len(claimed); room > 0 && len(ords) > 0 {
				more, err := s.expandMaps(ctx, tx, next, room, a, ords)
				if err != nil {
					return err
				}
				claimed = append(claimed, more...)
			}
		}
		if len(other) > 0 {
			return stepsFail(ctx, tx, failed, other, written)
		}
		return nil
	})
	return finishResults(items, written, claimed, err)
}

// finishMixed writes a batch of successes and other outcomes (StepFinishClaim,
// without leasing dependents: the next claim takes them) in the lock order of
// catalog/sql/run_control.sql: every run's shared lock first, in one
// statement, then run by run in ascending order of ID, each run's steps then its
// row (its successes set-based, then its other outcomes). Written whole, the
// successes' runs' rows, then the other outcomes' runs', were locked in two
// ascending passes, not one, and met other batches in a circle.
func (s *Store) finishMixed(ctx context.Context, tx *sqlx.Tx, items []*StepFinishParams, written []bool) error {
	byRun := map[string][2][]int{} // run → indexes of its successes, of its other outcomes
	runs := make([]string, 0, len(items))
	for i, p := range items {
		run := p.RunID.String()
		g, seen := byRun[run]
		if !seen {
			runs = append(runs, run)
		}
		if p.Outcome == OutcomeSucceeded {
			g[0] = append(g[0], i)
		} else {
			g[1] = append(g[1], i)
		}
		byRun[run] = g
	}
	slices.Sort(runs)
	if _, err := tx.ExecContext(ctx, sqlRunsShare, pq.Array(runs)); err != nil {
		return err
	}
	for _, run := range runs {
		ok, other := byRun[run][0], byRun[run][1]
		if len(ok) > 0 {
			st, err := s.txPrepared(ctx, tx, sqlStepsSucceed)
			if err != nil {
				return err
			}
			var ords pq.Int64Array
			var ready int
			if err := st.QueryRowxContext(ctx, newFinishArrays(items, ok).succeedArgs(true)...).Scan(&ords, &ready); err != nil {
				return s.retryStale(sqlStepsSucceed, err)
			}
			for _, o := range ords {
				written[ok[o-1]] = true
			}
		}
		if len(other) > 0 {
			if err := stepsFail(ctx, tx, newFinishArrays(items, other), other, written); err != nil {
				return err
			}
		}
	}
	return nil
}

// stepsFail writes the outcomes a (items other: not successes) with sqlStepsFail
// and marks those written.
func stepsFail(ctx context.Context, tx *sqlx.Tx, a *finishArrays, other []int, written []bool) error {
	var res []bool
	if err := tx.SelectContext(ctx, &res, sqlStepsFail, pq.Array(a.runs), pq.Array(a.keys), pq.Array(a.tokens),
		pq.Array(a.outcomes), pq.GenericArray{A: a.errors}, pq.Array(a.retryable), pq.Array(a.retryIn),
		pq.GenericArray{A: a.logKeys}); err != nil {
		return err
	}
	if len(res) != len(other) {
		return fmt.Errorf("%d results for %d outcomes", len(res), len(other))
	}
	for j, w := range res {
		written[other[j]] = w
	}
	return nil
}

// finishResults is StepFinishClaim's answer: an error per item (ErrLeaseLost
// when not written), or err for the whole batch.
func finishResults(items []*StepFinishParams, written []bool, claimed []Claimed, err error) ([]error, []Claimed, error) {
	if err != nil {
		return nil, nil, fmt.Errorf("finish %d steps: %w", len(items), err)
	}
	out := make([]error, len(items))
	for i, p := range items {
		if !written[i] {
			out[i] = fmt.Errorf("finish step %s/%s: %w", p.RunID, p.Key, ErrLeaseLost)
		}
	}
	return out, claimed, nil
}

// succeedArgs are sqlStepsSucceed's parameters; wake says whether the steps
// made ready wake the dispatchers.
func (a *finishArrays) succeedArgs(wake bool) []any {
	return []any{pq.Array(a.runs), pq.Array(a.keys), pq.Array(a.tokens), pq.GenericArray{A: a.outputs}, pq.GenericArray{A: a.logKeys}, wake}
}

// claimDependents leases the dependents of the successes written (ords, 1-based
// into a) for StepFinishClaim, in its transaction (sqlClaimDependents).
func (s *Store) claimDependents(ctx context.Context, tx *sqlx.Tx, next *ClaimNext, a *finishArrays, ords []int64) ([]Claimed, error) {
	runs := make([]string, len(ords))
	keys := make([]string, len(ords))
	for i, o := range ords {
		runs[i], keys[i] = a.runs[o-1], a.keys[o-1]
	}
	return s.claimFollowing(ctx, tx, sqlClaimDependents, next, next.Limit, runs, keys)
}

// claimFollowing leases, for next and up to limit, what query (a statement of
// sqlClaimFollowing) finds from runs and keys ($5, $6), in tx.
func (s *Store) claimFollowing(ctx context.Context, tx *sqlx.Tx, query string, next *ClaimNext, limit int, runs, keys []string) ([]Claimed, error) {
	tags := next.Tags
	if tags == nil {
		tags = []string{}
	}
	st, err := s.txPrepared(ctx, tx, query)
	if err != nil {
		return nil, err
	}
	var out []Claimed
	if err := st.SelectContext(ctx, &out, next.Owner, pq.StringArray(tags), next.TTL.Seconds(), limit,
		pq.StringArray(runs), pq.StringArray(keys)); err != nil {
		return nil, s.retryStale(query, err)
	}
	return out, nil
}

// leaseRoom is how many steps next may lease: none when it is nil.
func leaseRoom(next *ClaimNext) int {
	if next == nil {
		return 0
	}
	return next.Limit
}

// expandMaps creates the next instances of the maps whose instances among the
// finished steps (ords into a) succeeded, as MapWork would (a blob map's items
// from next.Page), and leases up to limit of them (sqlClaimMapInstances). A map
// another transaction works (lockMap skips it), whose items next.Page has not,
// or that has no room is left to the map loop, which the finishing
// dispatcher nudges anyway. Lock order (catalog/sql/run_control.sql): the
// finish holds the runs' advisory locks, the finished steps and the runs' rows
// already; the map's row is only tried (SKIP LOCKED), and its new instances are
// rows no one else can hold.
func (s *Store) expandMaps(ctx context.Context, tx *sqlx.Tx, next *ClaimNext, limit int, a *finishArrays, ords []int64) ([]Claimed, error) {
	var refs []MapRef
	for _, o := range ords {
		parent, ok := MapParentOf(a.keys[o-1])
		if !ok {
			continue
		}
		run, err := uuid.Parse(a.runs[o-1])
		if err != nil {
			return nil, err
		}
		if ref := (MapRef{RunID: run, Key: parent}); !slices.Contains(refs, ref) {
			refs = append(refs, ref)
		}
	}
	slices.SortFunc(refs, func(x, y MapRef) int {
		if c := strings.Compare(x.RunID.String(), y.RunID.String()); c != 0 {
			return c
		}
		return strings.Compare(x.Key, y.Key)
	})
	var runs, keys []string
	for _, ref := range refs {
		st, err := lockMap(ctx, tx, ref)
		if err != nil {
			return nil, err
		}
		if st == nil || (!st.Inline && next.Page == nil) {
			continue
		}
		n := st.room()
		if n == 0 {
			continue
		}
		items, offset, end, err := st.nextItems(ctx, n, next.Page)
		if err != nil {
			continue // the map loop reads them, or refuses them
		}
		var created int
		if st.Inline {
			if err := tx.GetContext(ctx, &created, sqlMapExpand, ref.RunID, ref.Key, n, nullJSON(items), offset, end); err != nil {
				return nil, err
			}
		} else if created, err = expandPage(ctx, tx, ref, n, items, offset, end); err != nil {
			return nil, err
		}
		if created > 0 {
			runs, keys = append(runs, ref.RunID.String()), append(keys, ref.Key)
		}
	}
	if len(runs) == 0 {
		return nil, nil
	}
	return s.claimFollowing(ctx, tx, sqlClaimMapInstances, next, limit, runs, keys)
}

// expandPage creates the instances of a blob map's page of items in a
// savepoint: a page's items are a function's output, which PostgreSQL may
// refuse (a \u0000): the finish then goes on without them, and the map loop
// refuses them (MapWorker.Refused).
func expandPage(ctx context.Context, tx *sqlx.Tx, ref MapRef, n int, items json.RawMessage, offset int64, end bool) (int, error) {
	if _, err := tx.ExecContext(ctx, `SAVEPOINT map_page`); err != nil {
		return 0, err
	}
	var created int
	err := tx.GetContext(ctx, &created, sqlMapExpand, ref.RunID, ref.Key, n, nullJSON(items), offset, end)
	if err != nil {
		if !errors.Is(translateError(err), ErrInvalidInput) {
			return 0, err
		}
		_, err = tx.ExecContext(ctx, `ROLLBACK TO SAVEPOINT map_page`)
		return 0, err
	}
	_, err = tx.ExecContext(ctx, `RELEASE SAVEPOINT map_page`)
	return created, err
}

// MapParentOf returns the map step of an instance's key ("each[3]" → "each"):
// only instances' keys have brackets (bundle: step keys are [a-z0-9_-]).
func MapParentOf(key string) (string, bool) {
	i := strings.LastIndexByte(key, '[')
	if i <= 0 {
		return "", false
	}
	return key[:i], true
}

// finishArrays lays out some of StepFinishBatch's items as the parallel arrays its
// statements take (sqlStepsSucceed reads the outputs, sqlStepsFail the rest).
type finishArrays struct {
	runs, keys, outcomes     []string
	tokens                   []int64
	outputs, errors, logKeys []sql.NullString
	retryable                []bool
	retryIn                  []float64
}

func newFinishArrays(items []*StepFinishParams, idx []int) *finishArrays {
	n := len(idx)
	a := &finishArrays{
		runs: make([]string, n), keys: make([]string, n), outcomes: make([]string, n), tokens: make([]int64, n),
		outputs: make([]sql.NullString, n), errors: make([]sql.NullString, n), logKeys: make([]sql.NullString, n),
		retryable: make([]bool, n), retryIn: make([]float64, n),
	}
	for j, i := range idx {
		p := items[i]
		a.runs[j], a.keys[j], a.tokens[j], a.outcomes[j] = p.RunID.String(), p.Key, p.LeaseToken, string(p.Outcome)
		a.outputs[j] = sql.NullString{String: string(p.Output), Valid: len(p.Output) > 0}
		a.errors[j] = sql.NullString{String: string(p.Error), Valid: len(p.Error) > 0}
		a.logKeys[j] = sql.NullString{String: p.LogKey, Valid: p.LogKey != ""}
		a.retryable[j], a.retryIn[j] = p.Retryable, p.RetryIn.Seconds()
	}
	return a
}

// Lease identifies a held lease.
type Lease struct {
	RunID uuid.UUID
	Key   string
	Token int64
}

// LeaseExtend renews the liveness of dispatcher owner and extends by ttl from now
// every lease given that it still holds, in one statement that waits for no row
// lock (sqlHeartbeat). It returns the tokens still held: extended, or left as they
// were this time because another transaction had the step's row locked (the
// owner's liveness covers them: cairn_sweep_next); the others are lost. It runs on the
// store's lease connection (Open), so that it does not queue for the pool behind
// the claims and finishes of a busy dispatcher.
func (s *Store) LeaseExtend(ctx context.Context, owner string, leases []Lease, ttl time.Duration) (map[int64]bool, error) {
	runs := make([]string, len(leases))
	keys := make([]string, len(leases))
	tokens := make([]int64, len(leases))
	for i, l := range leases {
		runs[i], keys[i], tokens[i] = l.RunID.String(), l.Key, l.Token
	}
	var held []int64
	if err := s.leaseDB.SelectContext(ctx, &held, sqlHeartbeat, pq.Array(runs), pq.Array(keys), pq.Array(tokens), ttl.Seconds(), owner); err != nil {
		return nil, fmt.Errorf("extend leases: %w", translateError(err))
	}
	out := make(map[int64]bool, len(held))
	for _, t := range held {
		out[t] = true
	}
	return out, nil
}

// StepCheckpoint stores the newest checkpoint of a running attempt (inline JSON or a
// $blob reference) and records a step.checkpointed event with eventData, fenced by
// the lease token: ErrLeaseLost if the lease is not current.
func (s *Store) StepCheckpoint(ctx context.Context, l Lease, checkpoint, eventData json.RawMessage) error {
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		var attempt int
		if err := tx.GetContext(ctx, &attempt, sqlCheckpoint, l.RunID, l.Key, l.Token, JSON(checkpoint)); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, sqlStepEvent, l.RunID, EventStepCheckpointed, l.Key, attempt, nullJSON(eventData))
		return err
	})
	return leaseError(fmt.Sprintf("checkpoint step %s/%s", l.RunID, l.Key), err)
}

// StepEvent records an event for a running attempt (for example EventStepProgress),
// fenced by its lease token: ErrLeaseLost if the lease is not current.
func (s *Store) StepEvent(ctx context.Context, l Lease, typ EventType, data json.RawMessage) error {
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		var attempt int
		if err := tx.GetContext(ctx, &attempt, sqlLeaseHeld+" FOR UPDATE", l.RunID, l.Key, l.Token); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, sqlStepEvent, l.RunID, typ, l.Key, attempt, nullJSON(data))
		return err
	})
	return leaseError(fmt.Sprintf("record %s of %s/%s", typ, l.RunID, l.Key), err)
}

// leaseError turns "no row matched the token" into ErrLeaseLost.
func leaseError(op string, err error) error {
	if err == nil {
		return nil
	}
	if isNotFound(err) {
		return fmt.Errorf("%s: %w", op, ErrLeaseLost)
	}
	return fmt.Errorf("%s: %w", op, err)
}

// StepSweep returns up to limit steps whose lease expired to ready (attempt
// interrupted, not counted) or to failed (interrupted too often). It returns how
// many it handled. Until grace has passed since the database started, or was
// promoted to primary, it sweeps nothing: leases that ran out while the database
// was down belong to owners that could not renew them, and those owners get the
// grace to do so (cairn_sweep_next says why the database's memory decides, not a
// dispatcher's). A lease of a live owner (one still renewing:
// dispatchers.lease_until) is swept only a grace past its expiry. Each step is swept in a transaction of its own, in the catalog's
// lock order, never waiting for a lock (cairn_sweep_next): a step whose run is
// busy is left to the next round.
func (s *Store) StepSweep(ctx context.Context, limit int, grace time.Duration) (int, error) {
	n := 0
	for range limit {
		var got int
		err := s.inTx(ctx, func(tx *sqlx.Tx) error {
			return tx.GetContext(ctx, &got, sqlSweep, grace.Seconds())
		})
		if err != nil {
			return n, fmt.Errorf("sweep expired leases: %w", err)
		}
		if got <= 0 {
			// None due (0), or those due belong to busy runs (-1): the next round.
			break
		}
		n++
	}
	return n, nil
}

// NextLeaseExpiry returns when StepSweep with the same grace may next find an
// expired lease: the earliest expiry of a running step's lease, or the end of the
// grace after the database's start or promotion if that is later. The zero time
// when no step runs.
func (s *Store) NextLeaseExpiry(ctx context.Context, grace time.Duration) (time.Time, error) {
	var t *time.Time
	if err := s.db.GetContext(ctx, &t, sqlNextLeaseExpiry, grace.Seconds()); err != nil {
		return time.Time{}, fmt.Errorf("next lease expiry: %w", translateError(err))
	}
	if t == nil {
		return time.Time{}, nil
	}
	return *t, nil
}

// Notify sends payload on channel through the pool, as every NOTIFY of the
// catalog is sent.
func (s *Store) Notify(ctx context.Context, channel, payload string) error {
	if _, err := s.db.ExecContext(ctx, `SELECT pg_notify($1, $2)`, channel, payload); err != nil {
		return fmt.Errorf("notify %s: %w", channel, translateError(err))
	}
	return nil
}

// Notification is a hint from the database. An empty Channel means the listening
// connection was re-established: anything may have happened meanwhile.
type Notification struct {
	Channel string
	Payload string
}

// Listen LISTENs on channels over a connection of its own to the database at url
// and calls fn for each notification, one at a time, until ctx ends (it returns nil
// then). fn gets an empty Notification once it listens, and again each time it has
// reconnected after a failure: what happened before may have been missed.
// Notifications are hints: callers poll as well. An error means the channels could
// not be listened to at all.
func Listen(ctx context.Context, url string, fn func(Notification), channels ...string) error {
	l := pq.NewListener(url, 100*time.Millisecond, 5*time.Second, nil)
	defer l.Close()
	for _, ch := range channels {
		if err := l.Listen(ch); err != nil {
			return fmt.Errorf("listen on %s: %w", ch, err)
		}
	}
	fn(Notification{})
	for {
		select {
		case <-ctx.Done():
			return nil
		case n := <-l.Notify:
			if n == nil {
				fn(Notification{})
				continue
			}
			fn(Notification{Channel: n.Channel, Payload: n.Extra})
		}
	}
}

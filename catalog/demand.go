package catalog

import (
	"context"
	"fmt"
	"slices"

	"github.com/lib/pq"
)

// sqlPoolDemand counts, for a pool of dispatchers that all run with the tags $2,
// what an autoscaler needs (docs/scaling.md): the steps it could claim now, and the
// attempts its dispatchers hold.
//
// ready is the claim's own test of a step (sqlClaimableCheap, with $2 as the
// dispatcher's tags: ready, not held, ready_at reached, condition decided, runs_on
// within the tags), in the claim's order, at most $1 of them: the cost of a scrape
// is bounded whatever the backlog. Of those, a concurrency key gives as many as it
// has free slots (the limit set at run time, else the steps' own, less its running
// steps: as sqlClaimableLimits counts them), in claim order; then a rate bucket as
// many as it has whole tokens now (a bucket not made yet is full). A step with both
// limits passes both in turn, so the count is what the claims would take, but for
// steps of one rate bucket spread over full and free keys alike, where it may count
// a token twice: an upper bound then.
//
// running counts the running steps leased by a dispatcher whose tags are $2 as a
// set (dispatchers.tags, written at each heartbeat): a dispatcher that died keeps
// its row, and its leases count until the sweep makes their steps ready again. It
// reads the running steps by steps_lease_expiry_idx: as many as the attempts in
// flight over every dispatcher.
const sqlPoolDemand = `
WITH r AS MATERIALIZED (
    SELECT s.conc_name, s.conc_key, s.conc_limit, s.rate_name, s.rate_key, s.rate_limit, s.rate_per_s,
           s.priority, s.ready_at
    FROM steps s
    WHERE ` + sqlClaimableCheap + `
    ORDER BY s.priority DESC, s.ready_at
    LIMIT $1
), conc AS (
    SELECT k.conc_name, k.conc_key,
           coalesce((SELECT l.concurrency FROM limits l WHERE l.name = k.conc_name), k.lim)
           - (SELECT count(*) FROM steps x
              WHERE (x.status = 'running') IS TRUE AND x.conc_name = k.conc_name AND x.conc_key = k.conc_key) AS free
    FROM (SELECT r.conc_name, r.conc_key, max(r.conc_limit) AS lim FROM r
          WHERE r.conc_name IS NOT NULL GROUP BY r.conc_name, r.conc_key) k
), admitted AS (
    SELECT q.rate_name, q.rate_key, q.rate_limit, q.rate_per_s,
           row_number() OVER (PARTITION BY q.rate_name, q.rate_key ORDER BY q.priority DESC, q.ready_at) AS place
    FROM (SELECT r.*, row_number() OVER (PARTITION BY r.conc_name, r.conc_key
                                         ORDER BY r.priority DESC, r.ready_at) AS place
          FROM r) q
    LEFT JOIN conc ON conc.conc_name = q.conc_name AND conc.conc_key = q.conc_key
    WHERE q.conc_name IS NULL OR q.place <= conc.free
), rate AS (
    SELECT k.rate_name, k.rate_key,
           floor(coalesce((SELECT least(rl.lim, b.tokens + extract(epoch FROM clock_timestamp() - b.at) * rl.lim / rl.per_s)
                           FROM rate_buckets b
                           LEFT JOIN limits l ON l.name = b.name
                           CROSS JOIN LATERAL (SELECT coalesce(l.rate_limit, b.lim) AS lim,
                                                      coalesce(l.rate_per_s, b.per_s) AS per_s) rl
                           WHERE b.name = k.rate_name AND b.key = k.rate_key),
                          coalesce((SELECT l.rate_limit FROM limits l WHERE l.name = k.rate_name), k.lim))) AS tokens
    FROM (SELECT a.rate_name, a.rate_key, max(a.rate_limit) AS lim FROM admitted a
          WHERE a.rate_name IS NOT NULL GROUP BY a.rate_name, a.rate_key) k
)
SELECT (SELECT count(*) FROM admitted a
        LEFT JOIN rate ON rate.rate_name = a.rate_name AND rate.rate_key = a.rate_key
        WHERE a.rate_name IS NULL OR a.place <= rate.tokens) AS claimable,
       (SELECT count(*) FROM steps s
        WHERE s.status = 'running'
          AND s.lease_owner IN (SELECT d.id FROM dispatchers d WHERE d.tags @> $2::text[] AND d.tags <@ $2::text[])) AS running`

// DefaultDemandCap is how many claimable steps PoolDemandGet counts at most.
const DefaultDemandCap = 100_000

// PoolDemand is the work a pool of dispatchers, all with the same tags, has now: an
// autoscaler's signal (docs/scaling.md).
type PoolDemand struct {
	// Tags are the pool's tags, sorted, without duplicates.
	Tags []string
	// Claimable counts the ready steps the pool could claim now: their runs_on
	// within its tags, not held by a paused run, their concurrency key not full
	// and their rate bucket not empty (as many as the key's free slots and the
	// bucket's whole tokens). At most the cap PoolDemandGet was given.
	Claimable int64
	// Running counts the attempts the pool's dispatchers hold a lease on.
	Running int64
}

// Demand is Claimable + Running: 0 only when the pool has nothing to start and
// nothing to lose, when scaling it to zero is safe.
func (d PoolDemand) Demand() int64 { return d.Claimable + d.Running }

// NormalizeTags returns tags sorted, without duplicates and empty strings: the one
// spelling of a pool's tag set (cairn_pool_demand's tags label).
func NormalizeTags(tags []string) []string {
	out := make([]string, 0, len(tags))
	for _, t := range tags {
		if t != "" {
			out = append(out, t)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// PoolDemandGet reads the demand of the pool whose dispatchers run with tags (nil:
// the untagged pool), counting at most limit claimable steps (0:
// DefaultDemandCap), in one statement.
func (s *Store) PoolDemandGet(ctx context.Context, tags []string, limit int) (PoolDemand, error) {
	if limit <= 0 {
		limit = DefaultDemandCap
	}
	d := PoolDemand{Tags: NormalizeTags(tags)}
	if err := s.db.QueryRowContext(ctx, sqlPoolDemand, limit, pq.StringArray(d.Tags)).Scan(&d.Claimable, &d.Running); err != nil {
		return PoolDemand{}, fmt.Errorf("demand of pool %v: %w", d.Tags, translateError(err))
	}
	return d, nil
}

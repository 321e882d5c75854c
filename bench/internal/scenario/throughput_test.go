package scenario

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// The claim and finish batch sizes of the profile come from matching Cairn's
// statements in pg_stat_statements: these are their texts as it recorded them.
func TestBatchKind(t *testing.T) {
	for _, tt := range []struct{ query, want string }{
		{`
WITH c AS (
    SELECT c.run_id, c.key FROM unnest($2::uuid[], $4::text[]) AS c(run_id, key)
), upd AS (
    UPDATE steps s SET status = $5, attempts = s.attempts + $6
    FROM c WHERE s.run_id = c.run_id AND s.key = c.key
    RETURNING s.run_id, s.key
), att AS (
    INSERT INTO attempts (run_id, step_key, number, dispatcher, lease_token, started_at)
    SELECT run_id, key, attempts, $1, lease_token, clock_timestamp() FROM upd
)
SELECT u.run_id FROM upd u`, "claim"},
		{`SELECT cairn_steps_succeed($1::uuid[], $2::text[], $3::bigint[], $4::text[], $5::text[])`, "finish"},
		{`
SELECT cairn_step_finish(r.run_id, r.key, r.token, r.outcome, NULL, r.error::jsonb,
                         r.retryable, now() + make_interval(secs => r.retry_in), r.log_key)
FROM unnest($1::uuid[], $2::text[]) WITH ORDINALITY AS r(run_id, key, ord)`, "finish"},
		{`WITH c AS ( SELECT s.run_id, s.key, s.conc_name FROM steps s WHERE s.status = $3 LIMIT $1 FOR UPDATE SKIP LOCKED ) SELECT * FROM c`, ""},
		{`WITH w AS ( SELECT w.paused FROM workflows w WHERE w.name = $2 FOR KEY SHARE ), r AS ( INSERT INTO runs (id) SELECT $1 ), st AS ( INSERT INTO steps (run_id) SELECT $1 ) SELECT r.* FROM r`, ""},
		{`COMMIT`, ""},
	} {
		assert.Equal(t, tt.want, batchKind(tt.query), tt.query)
	}
}

// The 1-dispatcher figures are the means of the rounds before and after the
// limited one, rate and profile alike.
func TestMeanRound(t *testing.T) {
	round := func(perS, trips, commits, cairnCPU, pgCPU float64) Round {
		return Round{Dispatchers: 1, Steps: 100, StepsPerS: perS, Profile: &RunProfile{
			CommitsPerStep: commits, CairnCPUMSPerStep: cairnCPU, PostgresCPUMSPerStep: pgCPU,
			SQL: &SQLProfile{RoundTripsPer: trips}}}
	}
	m := meanRound([]Round{round(4000, 0.06, 0.1, 0.1, 0.4), round(3000, 0.08, 0.2, 0.2, 0.5)})
	assert.Equal(t, 1, m.Dispatchers)
	assert.Equal(t, 200, m.Steps)
	assert.InDelta(t, 3500, m.StepsPerS, 1e-9)
	assert.InDelta(t, 0.07, m.Profile.SQL.RoundTripsPer, 1e-9)
	assert.InDelta(t, 0.15, m.Profile.CommitsPerStep, 1e-9)
	assert.InDelta(t, 0.15, m.Profile.CairnCPUMSPerStep, 1e-9)
	assert.InDelta(t, 0.45, m.Profile.PostgresCPUMSPerStep, 1e-9)
}

package catalog_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/internal/testenv"
)

// retentionVersion registers a version of workflow with one step, "s", whose
// definition has the retention ret (JSON; "" for none).
func retentionVersion(t *testing.T, s *catalog.Store, workflow, ret string) {
	t.Helper()
	var sum [32]byte
	_, _ = rand.Read(sum[:])
	digest := "sha256:" + hex.EncodeToString(sum[:])
	def := `{"steps":[{"key":"s","needs":[]}]}`
	if ret != "" {
		def = `{"steps":[{"key":"s","needs":[]}],"retention":` + ret + `}`
	}
	_, _, err := s.VersionRegister(t.Context(), &catalog.VersionRegisterParams{
		Workflow: workflow, Digest: digest, Size: 1, BlobKey: "bundles/sha256/" + digest[7:],
		Definition: json.RawMessage(def), Fingerprint: digest, Steps: []catalog.NewStep{{Key: "s", MaxAttempts: 1}},
	})
	require.NoError(t, err)
}

// endedRun creates a run of workflow (child of parent when not Nil), runs its
// step to outcome and dates its end ago in the past.
func endedRun(t *testing.T, ctx context.Context, s *catalog.Store, workflow string, parent uuid.UUID,
	outcome catalog.Outcome, ago time.Duration) uuid.UUID {
	t.Helper()
	r, _, err := s.RunCreate(ctx, &catalog.RunCreateParams{Workflow: workflow, Input: json.RawMessage(`{}`), Parent: parent})
	require.NoError(t, err)
	var lease *catalog.Claimed
	for lease == nil {
		claimed, err := s.StepClaim(ctx, "test", 10, time.Minute)
		require.NoError(t, err)
		require.NotEmpty(t, claimed)
		for i, c := range claimed {
			if c.RunID == r.ID {
				lease = &claimed[i]
				continue
			}
			// Another run's step (a parent's): handed back for later.
			require.NoError(t, s.StepFinish(ctx, &catalog.StepFinishParams{RunID: c.RunID, Key: c.Key,
				LeaseToken: c.LeaseToken, Outcome: catalog.OutcomeHandback}))
		}
	}
	p := &catalog.StepFinishParams{RunID: r.ID, Key: "s", LeaseToken: lease.LeaseToken, Outcome: outcome}
	if outcome == catalog.OutcomeSucceeded {
		p.Output = json.RawMessage(`{"ok":true}`)
	} else {
		p.Error = json.RawMessage(`{"message":"boom"}`)
	}
	require.NoError(t, s.StepFinish(ctx, p))
	_, err = s.DB().ExecContext(ctx, `UPDATE runs SET finished_at = now() - make_interval(secs => $2) WHERE id = $1`,
		r.ID, ago.Seconds())
	require.NoError(t, err)
	return r.ID
}

// rowsOf counts the rows of run id in each table that holds rows of a run.
func rowsOf(t *testing.T, ctx context.Context, s *catalog.Store, id uuid.UUID) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, table := range []string{"runs", "steps", "step_edges", "attempts", "events", "signals", "span_outbox", "run_trees"} {
		col := "run_id"
		switch table {
		case "runs":
			col = "id"
		case "run_trees":
			col = "root_id"
		}
		var n int
		require.NoError(t, s.DB().GetContext(ctx, &n, `SELECT count(*) FROM `+table+` WHERE `+col+` = $1`, id))
		out[table] = n
	}
	return out
}

// reapAll deletes every expired run, as the reaper does, and returns the ids.
func reapAll(t *testing.T, ctx context.Context, s *catalog.Store, d catalog.RetentionDefaults) []uuid.UUID {
	t.Helper()
	var all []uuid.UUID
	for {
		exp, err := s.RunsExpired(ctx, d, 2)
		require.NoError(t, err)
		if len(exp) == 0 {
			return all
		}
		ids := make([]uuid.UUID, len(exp))
		for i, e := range exp {
			ids[i] = e.ID
		}
		del, err := s.RunsDelete(ctx, d, ids, nil)
		require.NoError(t, err)
		require.NotEmpty(t, del)
		all = append(all, del...)
	}
}

// TestRetentionReap: runs past their version's retention, else the server's
// default, are deleted with all their rows, and nothing else: not the recent
// ones, not those kept longer or forever, not a child whose parent is unfinished.
func TestRetentionReap(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	retentionVersion(t, s, "short", `{"succeeded_s":3600,"failed_s":-1,"archive":true}`)
	retentionVersion(t, s, "plain", "")

	old := endedRun(t, ctx, s, "short", uuid.Nil, catalog.OutcomeSucceeded, 2*time.Hour)
	_, err := s.DB().ExecContext(ctx, `INSERT INTO signals (run_id, name, payload, actor) VALUES ($1, 'x', '{}', 'test')`, old)
	require.NoError(t, err)
	_, err = s.DB().ExecContext(ctx, `INSERT INTO span_outbox (run_id) VALUES ($1)`, old)
	require.NoError(t, err)
	_, err = s.DB().ExecContext(ctx, `INSERT INTO run_trees (root_id, runs) VALUES ($1, 2)`, old)
	require.NoError(t, err)
	before := rowsOf(t, ctx, s, old)
	require.Equal(t, 1, before["attempts"])
	require.Positive(t, before["events"])
	require.Equal(t, 1, before["span_outbox"])
	require.Equal(t, 1, before["run_trees"])
	recent := endedRun(t, ctx, s, "short", uuid.Nil, catalog.OutcomeSucceeded, 10*time.Minute)
	failed := endedRun(t, ctx, s, "short", uuid.Nil, catalog.OutcomeFailed, 1000*time.Hour)
	// Runs that name old (a rerun of it, a run it started) keep a NULL once it
	// is gone.
	_, err = s.DB().ExecContext(ctx, `UPDATE runs SET rerun_of = $1, rerun_from_step = 's' WHERE id = $2`, old, recent)
	require.NoError(t, err)
	_, err = s.DB().ExecContext(ctx, `UPDATE runs SET parent_id = $1 WHERE id = $2`, old, failed)
	require.NoError(t, err)
	plain := endedRun(t, ctx, s, "plain", uuid.Nil, catalog.OutcomeSucceeded, 2*time.Hour)
	// A parent still running, with an old finished child: the child stays.
	parent, _, err := s.RunCreate(ctx, &catalog.RunCreateParams{Workflow: "plain", Input: json.RawMessage(`{}`)})
	require.NoError(t, err)
	child := endedRun(t, ctx, s, "short", parent.ID, catalog.OutcomeSucceeded, 2*time.Hour)

	// Server default: forever.
	exp, err := s.RunsExpired(ctx, catalog.RetentionDefaults{}, 10)
	require.NoError(t, err)
	require.Equal(t, []catalog.ExpiredRun{{ID: old, Archive: true}}, exp)
	require.ElementsMatch(t, []uuid.UUID{old}, reapAll(t, ctx, s, catalog.RetentionDefaults{}))
	for table, n := range rowsOf(t, ctx, s, old) {
		require.Zero(t, n, table)
	}
	var named int
	require.NoError(t, s.DB().GetContext(ctx, &named, `SELECT count(*) FROM runs WHERE rerun_of = $1 OR parent_id = $1`, old))
	require.Zero(t, named, "runs still naming the deleted run")
	for _, id := range []uuid.UUID{recent, failed, plain, parent.ID, child} {
		r, err := s.RunGet(ctx, id)
		require.NoError(t, err)
		require.Equal(t, 1, rowsOf(t, ctx, s, id)["steps"], r.Workflow)
	}

	// A server default of an hour reaches the version without retention; the
	// version's forever for failed runs holds.
	d := catalog.RetentionDefaults{Succeeded: time.Hour, Failed: time.Hour, Canceled: time.Hour}
	require.ElementsMatch(t, []uuid.UUID{plain}, reapAll(t, ctx, s, d))
	_, err = s.RunGet(ctx, failed)
	require.NoError(t, err)

	// Once the parent is gone (canceled and past retention), the child goes too.
	require.NoError(t, s.RunCancel(ctx, parent.ID, "test"))
	_, err = s.DB().ExecContext(ctx, `UPDATE runs SET finished_at = now() - interval '2 hours' WHERE id = $1`, parent.ID)
	require.NoError(t, err)
	require.ElementsMatch(t, []uuid.UUID{parent.ID, child}, reapAll(t, ctx, s, d))
	_, err = s.RunGet(ctx, recent)
	require.NoError(t, err)
}

// TestRetentionSkipsLocked: the reaper skips a run another transaction holds,
// and its deletion in progress does not hold up a claim of another run's step.
func TestRetentionSkipsLocked(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	retentionVersion(t, s, "short", `{"succeeded_s":60}`)
	a := endedRun(t, ctx, s, "short", uuid.Nil, catalog.OutcomeSucceeded, time.Hour)
	b := endedRun(t, ctx, s, "short", uuid.Nil, catalog.OutcomeSucceeded, time.Hour)
	d := catalog.RetentionDefaults{}

	tx, err := s.DB().BeginTxx(ctx, nil)
	require.NoError(t, err)
	defer tx.Rollback() //nolint:errcheck
	_, err = tx.ExecContext(ctx, `SELECT 1 FROM runs WHERE id = $1 FOR UPDATE`, a)
	require.NoError(t, err)
	del, err := s.RunsDelete(ctx, d, []uuid.UUID{a, b}, map[uuid.UUID]string{b: "archives/sha256/" + strings.Repeat("0", 64)})
	require.NoError(t, err)
	require.Equal(t, []uuid.UUID{b}, del)
	require.NoError(t, tx.Rollback())
	arch, err := s.ArchivedRunGet(ctx, b)
	require.NoError(t, err)
	require.Equal(t, "succeeded", arch.Status)
	_, err = s.ArchivedRunGet(ctx, a)
	require.ErrorIs(t, err, catalog.ErrNotFound)

	// A deletion left uncommitted (its run's row, steps, attempts and events
	// locked) while a new run's step is claimed and finished.
	tx, err = s.DB().BeginTxx(ctx, nil)
	require.NoError(t, err)
	defer tx.Rollback() //nolint:errcheck
	// As sqlRunsDelete deletes.
	for _, table := range []string{"steps", "events", "runs"} {
		column := "run_id"
		if table == "runs" {
			column = "id"
		}
		_, err = tx.ExecContext(ctx, `DELETE FROM `+table+` WHERE `+column+` = $1`, a)
		require.NoError(t, err)
	}
	fresh := endedRun(t, ctx, s, "short", uuid.Nil, catalog.OutcomeSucceeded, 0)
	require.NoError(t, tx.Commit())
	r, err := s.RunGet(ctx, fresh)
	require.NoError(t, err)
	require.Equal(t, "succeeded", string(r.Status))
}

// TestIdempotencyExpiry: a key holds for the TTL; an expired key, or one whose
// run was deleted, starts a new run; expired keys are deleted, a schedule's not.
func TestIdempotencyExpiry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := catalog.New(testenv.DB(t), &catalog.Config{IdempotencyTTL: time.Hour})
	retentionVersion(t, s, "w", "")
	p := &catalog.RunCreateParams{Workflow: "w", Input: json.RawMessage(`{}`),
		IdempotencyKey: "k", IdempotencyScope: "runs", RequestHash: "h"}
	first, created, err := s.RunCreate(ctx, p)
	require.NoError(t, err)
	require.True(t, created)
	again, created, err := s.RunCreate(ctx, p)
	require.NoError(t, err)
	require.False(t, created)
	require.Equal(t, first.ID, again.ID)

	_, err = s.DB().ExecContext(ctx, `UPDATE idempotency_keys SET created_at = now() - interval '61 minutes'`)
	require.NoError(t, err)
	second, created, err := s.RunCreate(ctx, p)
	require.NoError(t, err)
	require.True(t, created)
	require.NotEqual(t, first.ID, second.ID)
	again, created, err = s.RunCreate(ctx, p)
	require.NoError(t, err)
	require.False(t, created)
	require.Equal(t, second.ID, again.ID)

	// The key's run deleted (by retention) before the key expired.
	_, err = s.DB().ExecContext(ctx, `DELETE FROM runs WHERE id = $1`, second.ID)
	require.NoError(t, err)
	third, created, err := s.RunCreate(ctx, p)
	require.NoError(t, err)
	require.True(t, created)
	require.NotEqual(t, second.ID, third.ID)

	_, err = s.DB().ExecContext(ctx, `INSERT INTO idempotency_keys (scope, key, request_hash, resource_id, created_at)
VALUES ('runs', 'old', 'h', $1, now() - interval '2 hours'), ('schedule', 'schedule:1:x', 'schedule', $1, now() - interval '2 hours')`,
		first.ID.String())
	require.NoError(t, err)
	n, err := s.IdempotencyKeysExpire(ctx, 100)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	var keys []string
	require.NoError(t, s.DB().SelectContext(ctx, &keys, `SELECT key FROM idempotency_keys ORDER BY key`))
	require.Equal(t, []string{"k", "schedule:1:x"}, keys)
}

// TestRetentionUnderLoad: while runs are created, claimed and finished, a reaper
// loops over the expired runs: every claim and finish goes through, every new run
// ends and stays, and every expired run goes with all its rows.
func TestRetentionUnderLoad(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	retentionVersion(t, s, "w", `{"succeeded_s":60,"failed_s":60}`)
	const old, fresh, workers = 60, 120, 4
	var expired []uuid.UUID
	for i := 0; i < old; i++ {
		expired = append(expired, endedRun(t, ctx, s, "w", uuid.Nil, catalog.OutcomeSucceeded, time.Hour))
	}
	d := catalog.RetentionDefaults{}

	stop := make(chan struct{})
	var g, reaper errgroup.Group
	reaper.Go(func() error {
		for {
			select {
			case <-stop:
				return nil
			default:
			}
			exp, err := s.RunsExpired(ctx, d, 5)
			if err != nil {
				return err
			}
			if len(exp) == 0 {
				time.Sleep(5 * time.Millisecond) // not a timing: only not to spin
				continue
			}
			ids := make([]uuid.UUID, len(exp))
			for i, e := range exp {
				ids[i] = e.ID
			}
			if _, err := s.RunsDelete(ctx, d, ids, nil); err != nil {
				return err
			}
		}
	})
	created := make(chan uuid.UUID, fresh)
	for w := 0; w < workers; w++ {
		g.Go(func() error {
			for i := 0; i < fresh/workers; i++ {
				r, _, err := s.RunCreate(ctx, &catalog.RunCreateParams{Workflow: "w", Input: json.RawMessage(`{}`)})
				if err != nil {
					return err
				}
				created <- r.ID
				claimed, err := s.StepClaim(ctx, "load", 3, time.Minute)
				if err != nil {
					return err
				}
				for _, c := range claimed {
					if err := s.StepFinish(ctx, &catalog.StepFinishParams{RunID: c.RunID, Key: c.Key, LeaseToken: c.LeaseToken,
						Outcome: catalog.OutcomeSucceeded, Output: json.RawMessage(`1`)}); err != nil {
						return err
					}
				}
			}
			return nil
		})
	}
	require.NoError(t, g.Wait())
	// What the workers left ready.
	for {
		claimed, err := s.StepClaim(ctx, "load", 50, time.Minute)
		require.NoError(t, err)
		if len(claimed) == 0 {
			break
		}
		for _, c := range claimed {
			require.NoError(t, s.StepFinish(ctx, &catalog.StepFinishParams{RunID: c.RunID, Key: c.Key,
				LeaseToken: c.LeaseToken, Outcome: catalog.OutcomeSucceeded, Output: json.RawMessage(`1`)}))
		}
	}
	close(stop)
	require.NoError(t, reaper.Wait())
	reapAll(t, ctx, s, d)
	close(created)
	n := 0
	for id := range created {
		r, err := s.RunGet(ctx, id)
		require.NoError(t, err)
		require.Equal(t, "succeeded", string(r.Status))
		n++
	}
	require.Equal(t, fresh, n)
	for _, id := range expired {
		for table, c := range rowsOf(t, ctx, s, id) {
			require.Zero(t, c, "%s of %s", table, id)
		}
	}
}

// TestReceivedEventExpiry: received events are kept for the idempotency TTL, and
// past it while an unfinished run created before them could still take them (a
// wait_for_event step takes the events received since its run was created); an
// expired event goes with its event_takes, and its id is then a new event.
func TestReceivedEventExpiry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := catalog.New(testenv.DB(t), &catalog.Config{IdempotencyTTL: time.Hour})
	retentionVersion(t, s, "w", "")
	for _, id := range []string{"before-run", "after-run", "recent"} {
		_, dup, err := s.EventIngest(ctx, &catalog.EventIngestParams{ID: id, Name: "paid", Data: json.RawMessage(`{}`), Actor: "test"})
		require.NoError(t, err)
		require.False(t, dup)
	}
	run, _, err := s.RunCreate(ctx, &catalog.RunCreateParams{Workflow: "w", Input: json.RawMessage(`{}`)})
	require.NoError(t, err)
	_, err = s.DB().ExecContext(ctx, `UPDATE runs SET created_at = now() - interval '90 minutes' WHERE id = $1`, run.ID)
	require.NoError(t, err)
	_, err = s.DB().ExecContext(ctx, `UPDATE received_events SET received_at = now() - CASE id
    WHEN 'before-run' THEN interval '3 hours' WHEN 'after-run' THEN interval '80 minutes' ELSE interval '1 minute' END`)
	require.NoError(t, err)
	_, err = s.DB().ExecContext(ctx, `INSERT INTO event_takes (run_id, step_key, event_seq)
SELECT $1, 's', seq FROM received_events WHERE id = 'before-run'`, uuid.New())
	require.NoError(t, err)
	ids := func() []string {
		var out []string
		require.NoError(t, s.DB().SelectContext(ctx, &out, `SELECT id FROM received_events ORDER BY id`))
		return out
	}

	n, err := s.ReceivedEventsExpire(ctx, 100)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, []string{"after-run", "recent"}, ids(), "the run, unfinished, could still take after-run")
	var takes int
	require.NoError(t, s.DB().GetContext(ctx, &takes, `SELECT count(*) FROM event_takes`))
	require.Zero(t, takes, "event_takes go with their event")

	// The run gone, after-run is past its retention too.
	_, err = s.DB().ExecContext(ctx, `DELETE FROM runs WHERE id = $1`, run.ID)
	require.NoError(t, err)
	n, err = s.ReceivedEventsExpire(ctx, 100)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, []string{"recent"}, ids())

	_, dup, err := s.EventIngest(ctx, &catalog.EventIngestParams{ID: "before-run", Name: "paid", Data: json.RawMessage(`{"again": true}`), Actor: "test"})
	require.NoError(t, err)
	require.False(t, dup, "an expired event's id is a new event")
}

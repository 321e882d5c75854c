package catalog_test

import (
	"encoding/json"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/cairnrun/cairn/bundle"
	"github.com/cairnrun/cairn/catalog"
)

// nextFire is the fire loop's NextFireFunc, as the runtime gives it.
func nextFire(cronExpr, tz string, t time.Time) (time.Time, bool) {
	loc, err := time.LoadLocation(tz)
	if err != nil {
		return time.Time{}, false
	}
	s, err := bundle.ParseCron(cronExpr, loc)
	if err != nil {
		return time.Time{}, false
	}
	return bundle.NextFire(s, t)
}

// deployDef registers the next version of workflow with the given schedules (as
// bundle.ScheduleDefinition JSON) and a one-step layout, moving latest to it.
func deployDef(t *testing.T, s *catalog.Store, workflow string, schedules ...bundle.ScheduleDefinition) *catalog.Version {
	t.Helper()
	def, err := json.Marshal(bundle.Definition{Schema: 1, Name: workflow, Schedules: schedules})
	require.NoError(t, err)
	d := fakeDigest(fmt.Sprintf("%s-%s", workflow, time.Now().Format(time.RFC3339Nano)))
	v, _, err := s.VersionRegister(t.Context(), &catalog.VersionRegisterParams{
		Workflow: workflow, Digest: d, Size: 1, BlobKey: "k", Definition: def, Fingerprint: d,
		Steps: []catalog.NewStep{{Key: "a", MaxAttempts: 1}}, Actor: "alice",
	})
	require.NoError(t, err)
	return v
}

func schedulesByName(t *testing.T, s *catalog.Store, workflow string) map[string]catalog.Schedule {
	t.Helper()
	list, err := s.ScheduleList(t.Context(), &catalog.ScheduleListParams{Workflow: workflow})
	require.NoError(t, err)
	out := map[string]catalog.Schedule{}
	for _, sc := range list {
		out[sc.Name] = sc
	}
	return out
}

func TestSchedulesFollowLatest(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	hourly := bundle.ScheduleDefinition{Name: "a", Cron: "0 * * * *", Timezone: "UTC", Overlap: bundle.OverlapSkip}
	daily := bundle.ScheduleDefinition{Name: "b", Cron: "0 3 * * *", Timezone: "Europe/Paris", Overlap: bundle.OverlapAllow,
		Input: map[string]any{"x": 1}, Catchup: bundle.Duration(time.Hour), CatchupMS: 3600000}
	v1 := deployDef(t, s, "wf", hourly, daily)

	got := schedulesByName(t, s, "wf")
	require.Len(t, got, 2)
	require.True(t, got["a"].Active)
	require.Equal(t, v1.Version, got["b"].Version)
	require.Equal(t, "Europe/Paris", got["b"].Timezone)
	require.JSONEq(t, `{"x":1}`, string(got["b"].Input))
	require.Equal(t, time.Hour, got["b"].Catchup())
	require.Nil(t, got["a"].NextFireAt, "computed by the fire loop")

	// The fire loop computes the next fire; nothing fires.
	res, err := s.ScheduleFire(ctx, &catalog.ScheduleFireParams{Next: nextFire})
	require.NoError(t, err)
	require.Equal(t, 0, res.Created)
	require.NotNil(t, res.NextDue)
	got = schedulesByName(t, s, "wf")
	require.NotNil(t, got["a"].NextFireAt)
	require.Equal(t, 0, got["a"].NextFireAt.Minute())

	changed, err := s.SchedulePause(ctx, got["a"].ID, true, "bob")
	require.NoError(t, err)
	require.True(t, changed)

	// v2 changes a's cron, drops b, adds c: a keeps its pause, b becomes inactive.
	hourly2 := hourly
	hourly2.Cron = "30 * * * *"
	c := bundle.ScheduleDefinition{Name: "c", Cron: "@daily", Timezone: "UTC", Overlap: bundle.OverlapBufferOne}
	v2 := deployDef(t, s, "wf", hourly2, c)
	got = schedulesByName(t, s, "wf")
	require.Len(t, got, 3)
	require.True(t, got["a"].Active)
	require.True(t, got["a"].Paused)
	require.Equal(t, "30 * * * *", got["a"].Cron)
	require.Equal(t, v2.Version, got["a"].Version)
	require.False(t, got["b"].Active)
	require.Nil(t, got["b"].NextFireAt)
	require.True(t, got["c"].Active)

	// Rolling latest back brings v1's schedules back.
	back, err := s.AliasRollback(ctx, "wf", catalog.AliasLatest, "carol")
	require.NoError(t, err)
	require.Equal(t, v1.Version, back)
	got = schedulesByName(t, s, "wf")
	require.True(t, got["b"].Active)
	require.False(t, got["c"].Active)
	require.Equal(t, "0 * * * *", got["a"].Cron)
	require.True(t, got["a"].Paused)
	require.Equal(t, "carol", got["b"].UpdatedBy)

	// An inactive schedule cannot be triggered.
	_, err = s.ScheduleTrigger(ctx, got["c"].ID, "dave")
	require.ErrorIs(t, err, catalog.ErrConflict)
	_, err = s.ScheduleTrigger(ctx, 424242, "dave")
	require.ErrorIs(t, err, catalog.ErrNotFound)
}

// setNextFire moves a schedule's next fire into the past, as after a downtime.
func setNextFire(t *testing.T, s *catalog.Store, id int64, ago time.Duration) {
	t.Helper()
	_, err := s.DB().ExecContext(t.Context(),
		`UPDATE schedules SET next_fire_at = date_trunc('second', now()) - $2 * interval '1 millisecond' WHERE id = $1`,
		id, ago.Milliseconds())
	require.NoError(t, err)
}

func scheduledRuns(t *testing.T, s *catalog.Store, workflow, name string) []catalog.Run {
	t.Helper()
	runs, err := s.RunList(t.Context(), &catalog.RunListParams{Workflow: workflow, Labels: catalog.Labels{catalog.ScheduleLabel: name}, Limit: 1000})
	require.NoError(t, err)
	return runs
}

func TestScheduleFireExactlyOnce(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	deployDef(t, s, "wf", bundle.ScheduleDefinition{Name: "tick", Cron: "* * * * * *", Timezone: "UTC",
		Overlap: bundle.OverlapAllow, Catchup: bundle.Duration(time.Hour), CatchupMS: 3600000})
	sc := schedulesByName(t, s, "wf")["tick"]
	setNextFire(t, s, sc.ID, 40*time.Second)

	// Eight fire loops at once, each making several passes.
	var g errgroup.Group
	created := make([]int, 8)
	for i := range created {
		g.Go(func() error {
			for range 5 {
				res, err := s.ScheduleFire(ctx, &catalog.ScheduleFireParams{Next: nextFire, Limit: 10})
				if err != nil {
					return err
				}
				created[i] += res.Created
			}
			return nil
		})
	}
	require.NoError(t, g.Wait())
	total := 0
	for _, n := range created {
		total += n
	}
	sc = schedulesByName(t, s, "wf")["tick"]
	runs := scheduledRuns(t, s, "wf", "tick")
	require.GreaterOrEqual(t, total, 40)
	require.Len(t, runs, total)
	require.EqualValues(t, total, sc.Fires)
	require.Zero(t, sc.Skipped)

	// One run per second, consecutive, none twice: the idempotency keys.
	var keys []string
	require.NoError(t, s.DB().SelectContext(ctx, &keys,
		`SELECT key FROM idempotency_keys WHERE scope = 'schedule' ORDER BY key`))
	require.Len(t, keys, total)
	sort.Strings(keys)
	var prev time.Time
	for i, k := range keys {
		at, err := time.Parse(time.RFC3339, k[len(fmt.Sprintf("schedule:%d:", sc.ID)):])
		require.NoError(t, err)
		if i > 0 {
			require.Equal(t, time.Second, at.Sub(prev), "fires %s and %s", prev, at)
		}
		prev = at
	}
	require.Equal(t, prev, sc.LastFireAt.UTC())
	require.True(t, sc.NextFireAt.After(prev))
}

func TestScheduleCatchup(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	deployDef(t, s, "wf", bundle.ScheduleDefinition{Name: "h", Cron: "@every 1h", Timezone: "UTC",
		Overlap: bundle.OverlapAllow, Catchup: bundle.Duration(3 * time.Hour), CatchupMS: 3 * 3600000})
	sc := schedulesByName(t, s, "wf")["h"]
	// Down for 9.5 hours: fires at now-9.5h, …, now-0.5h; those within 3h are made.
	setNextFire(t, s, sc.ID, 9*time.Hour+30*time.Minute)
	res, err := s.ScheduleFire(ctx, &catalog.ScheduleFireParams{Next: nextFire})
	require.NoError(t, err)
	require.Equal(t, 3, res.Created)
	require.Equal(t, 7, res.Skipped)
	require.Len(t, scheduledRuns(t, s, "wf", "h"), 3)

	// A repeat pass makes nothing: next_fire_at moved on.
	res, err = s.ScheduleFire(ctx, &catalog.ScheduleFireParams{Next: nextFire})
	require.NoError(t, err)
	require.Zero(t, res.Created)
	sc = schedulesByName(t, s, "wf")["h"]
	require.EqualValues(t, 7, sc.Skipped)
	require.WithinDuration(t, time.Now().Add(30*time.Minute), *sc.NextFireAt, time.Minute)
}

func TestScheduleOverlap(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	mk := func(name string, o bundle.Overlap) bundle.ScheduleDefinition {
		return bundle.ScheduleDefinition{Name: name, Cron: "* * * * * *", Timezone: "UTC", Overlap: o,
			Catchup: bundle.Duration(time.Hour), CatchupMS: 3600000}
	}
	deployDef(t, s, "wf", mk("skip", bundle.OverlapSkip), mk("allow", bundle.OverlapAllow),
		mk("cancel", bundle.OverlapCancelOther), mk("buffer", bundle.OverlapBufferOne))
	byName := schedulesByName(t, s, "wf")
	for _, sc := range byName {
		setNextFire(t, s, sc.ID, 5*time.Second)
	}
	// One pass: the runs it makes stay pending (no dispatcher), so each later fire
	// of the pass overlaps.
	_, err := s.ScheduleFire(ctx, &catalog.ScheduleFireParams{Next: nextFire})
	require.NoError(t, err)
	byName = schedulesByName(t, s, "wf")

	require.Len(t, scheduledRuns(t, s, "wf", "skip"), 1)
	require.GreaterOrEqual(t, byName["skip"].Skipped, int64(5))

	allow := scheduledRuns(t, s, "wf", "allow")
	require.GreaterOrEqual(t, len(allow), 6)

	cancel := scheduledRuns(t, s, "wf", "cancel")
	require.Len(t, cancel, len(allow))
	for _, r := range cancel[1:] { // newest first: all but the newest canceled
		require.Equal(t, catalog.RunCanceled, r.Status)
	}
	require.Equal(t, catalog.RunPending, cancel[0].Status)
	require.Equal(t, cancel[0].ID, *byName["cancel"].LastRunID)

	buffer := scheduledRuns(t, s, "wf", "buffer")
	require.Len(t, buffer, 1)
	require.NotNil(t, byName["buffer"].BufferedFireAt)
	buffered := *byName["buffer"].BufferedFireAt
	// When the unfinished run ends, the buffered fire is created.
	require.NoError(t, s.RunCancel(ctx, buffer[0].ID, "test"))
	_, err = s.ScheduleFire(ctx, &catalog.ScheduleFireParams{Next: nextFire})
	require.NoError(t, err)
	buffer = scheduledRuns(t, s, "wf", "buffer")
	require.GreaterOrEqual(t, len(buffer), 2)
	var key string
	require.NoError(t, s.DB().GetContext(ctx, &key,
		`SELECT key FROM idempotency_keys WHERE scope = 'schedule' AND resource_id = $1`, buffer[len(buffer)-2].ID.String()))
	require.Equal(t, catalog.ScheduleFireKey(byName["buffer"].ID, buffered), key)
}

func TestScheduleTriggerBackfill(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	deployDef(t, s, "wf", bundle.ScheduleDefinition{Name: "h", Cron: "0 * * * *", Timezone: "UTC", Overlap: bundle.OverlapSkip})
	sc := schedulesByName(t, s, "wf")["h"]

	run, err := s.ScheduleTrigger(ctx, sc.ID, "alice")
	require.NoError(t, err)
	require.Equal(t, catalog.Labels{"schedule": "h"}, run.Labels)

	day := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	var fires []time.Time
	for i := range 24 {
		fires = append(fires, day.Add(time.Duration(i)*time.Hour))
	}
	created, skipped, err := s.ScheduleBackfill(ctx, sc.ID, fires, "alice")
	require.NoError(t, err)
	require.Equal(t, 24, created)
	require.Zero(t, skipped)
	created, skipped, err = s.ScheduleBackfill(ctx, sc.ID, fires[:6], "alice")
	require.NoError(t, err)
	require.Zero(t, created)
	require.Equal(t, 6, skipped)
	require.Len(t, scheduledRuns(t, s, "wf", "h"), 25)

	var actors []string
	require.NoError(t, s.DB().SelectContext(ctx, &actors,
		`SELECT type || ':' || actor FROM schedule_events WHERE schedule_id = $1 ORDER BY id`, sc.ID))
	require.Equal(t, []string{"schedule.triggered:alice", "schedule.backfilled:alice", "schedule.backfilled:alice"}, actors)
}

// TestScheduleFireFailureIsolated: a schedule whose run cannot be created is rolled
// back alone and reported; the other schedules of the pass fire.
func TestScheduleFireFailureIsolated(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	every := bundle.ScheduleDefinition{Name: "tick", Cron: "* * * * * *", Timezone: "UTC", Overlap: bundle.OverlapAllow,
		Catchup: bundle.Duration(time.Hour), CatchupMS: 3600000}
	deployDef(t, s, "good", every)
	deployDef(t, s, "bad", every)
	// The database refuses every run of workflow bad.
	_, err := s.DB().ExecContext(ctx, `
CREATE FUNCTION test_refuse_run() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'refused by the test'; END $$;
CREATE TRIGGER test_refuse_run BEFORE INSERT ON runs FOR EACH ROW WHEN (NEW.workflow = 'bad')
EXECUTE FUNCTION test_refuse_run();`)
	require.NoError(t, err)
	good, bad := schedulesByName(t, s, "good")["tick"], schedulesByName(t, s, "bad")["tick"]
	setNextFire(t, s, bad.ID, 5*time.Second)
	setNextFire(t, s, good.ID, 3*time.Second)

	res, err := s.ScheduleFire(ctx, &catalog.ScheduleFireParams{Next: nextFire})
	require.NoError(t, err)
	require.Len(t, res.Failed, 1)
	require.ErrorContains(t, res.Failed[0], "refused by the test")
	require.ErrorContains(t, res.Failed[0], "bad/tick")
	require.GreaterOrEqual(t, res.Created, 3)
	require.Len(t, scheduledRuns(t, s, "good", "tick"), res.Created)

	after := schedulesByName(t, s, "bad")["tick"]
	require.Equal(t, bad.ID, after.ID)
	require.Zero(t, after.Fires)
	var due bool
	require.NoError(t, s.DB().GetContext(ctx, &due, `SELECT next_fire_at <= now() FROM schedules WHERE id = $1`, bad.ID))
	require.True(t, due, "the failed schedule stays due")
}

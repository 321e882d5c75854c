package catalog_test

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/catalog/catalogtest"
	"github.com/cairnrun/cairn/internal/testenv"
)

// TestVirtualClockCoversTheCatalog: on a database with the virtual clock
// (catalog.InstallVirtualClock) and its search_path, what the catalog's SQL
// stamps follows the clock: a column DEFAULT (runs.created_at), a statement of
// this package and a SQL function (the steps' ready_at at creation); the same
// database read without that search_path, as production reads its own, sees
// the real time. And no statement of the catalog reads the time in a way the
// search_path cannot reach (CURRENT_TIMESTAMP and the like, pg_catalog.now).
func TestVirtualClockCoversTheCatalog(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("sql/*.sql")
	require.NoError(t, err)
	goFiles, err := filepath.Glob("*.go")
	require.NoError(t, err)
	for _, f := range append(files, goFiles...) {
		if strings.HasSuffix(f, "_test.go") || f == "clock.go" {
			continue
		}
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		text := strings.ToLower(string(b))
		for _, bad := range []string{"current_timestamp", "localtimestamp", "current_time", "pg_catalog.now", "pg_catalog.clock_timestamp", "timeofday("} {
			require.NotContains(t, text, bad, "%s reads the time where the virtual clock cannot reach it (catalog/clock.go)", f)
		}
	}

	ctx := context.Background()
	dbURL := testenv.DatabaseURL(t)
	sep := "?"
	if strings.Contains(dbURL, "?") {
		sep = "&"
	}
	virtual, err := catalog.Open(ctx, dbURL+sep+"search_path="+url.QueryEscape(catalog.ClockSearchPath), nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = virtual.Close() })
	require.NoError(t, virtual.InstallVirtualClock(ctx))
	at := time.Date(2031, 5, 5, 12, 0, 0, 0, time.UTC)
	require.NoError(t, virtual.ClockSet(ctx, at))

	v := catalogtest.Version(t, virtual, "clocked", catalog.NewStep{Key: "a", MaxAttempts: 1})
	run, _, err := virtual.RunCreate(ctx, &catalog.RunCreateParams{Workflow: v.Workflow, Version: v.Version})
	require.NoError(t, err)
	require.True(t, run.CreatedAt.Equal(at), "created_at %s, the clock is at %s", run.CreatedAt, at)
	steps, err := virtual.StepList(ctx, run.ID)
	require.NoError(t, err)
	require.Len(t, steps, 1)
	require.NotNil(t, steps[0].ReadyAt)
	require.True(t, steps[0].ReadyAt.Equal(at), "ready_at %s, the clock is at %s", steps[0].ReadyAt, at)
	next, err := virtual.ClockNextDue(ctx)
	require.NoError(t, err)
	require.True(t, next.IsZero(), "nothing is due later: the step is ready now")
	busy, err := virtual.ClockBusy(ctx)
	require.NoError(t, err)
	require.Equal(t, catalog.Busy{Due: true}, busy, "the ready step is due at the clock's time")

	// The same database, without the clock's search_path, as production reads
	// its own: now() is pg_catalog's (the DEFAULTs stay the clock's: they were
	// changed in this database).
	real, err := catalog.Open(ctx, dbURL, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = real.Close() })
	before := time.Now()
	run2, _, err := real.RunCreate(ctx, &catalog.RunCreateParams{Workflow: v.Workflow, Version: v.Version})
	require.NoError(t, err)
	steps, err = real.StepList(ctx, run2.ID)
	require.NoError(t, err)
	require.NotNil(t, steps[0].ReadyAt)
	require.WithinDuration(t, before, *steps[0].ReadyAt, time.Minute)
}

package catalog_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/catalog/catalogtest"
)

// register registers a version of wf from a bundle named by digest (the same
// digest: the same version), as deploy does, and returns its number.
func register(t *testing.T, s *catalog.Store, wf, digest string, noPromote bool, actor string) (int, bool) {
	t.Helper()
	d := fakeDigest(digest)
	v, created, err := s.VersionRegister(t.Context(), &catalog.VersionRegisterParams{
		Workflow: wf, Digest: d, Size: 1, BlobKey: "k", Definition: json.RawMessage(`{}`), Fingerprint: d,
		Steps: []catalog.NewStep{{Key: "a", MaxAttempts: 1}}, NoPromote: noPromote, Actor: actor,
	})
	require.NoError(t, err)
	return v.Version, created
}

func aliasOf(t *testing.T, s *catalog.Store, wf, alias string) int {
	t.Helper()
	v, err := s.AliasResolve(t.Context(), wf, alias)
	require.NoError(t, err)
	return v
}

type change struct {
	version, previous int
	kind              catalog.AliasChangeKind
	actor             string
}

// history returns an alias's changes, oldest first (previous 0: none).
func history(t *testing.T, s *catalog.Store, wf, alias string) []change {
	t.Helper()
	rows, err := s.AliasHistory(t.Context(), wf, alias, 1000)
	require.NoError(t, err)
	out := make([]change, len(rows))
	for i, r := range rows {
		c := change{version: r.Version, kind: r.Kind, actor: r.Actor}
		if r.PreviousVersion != nil {
			c.previous = *r.PreviousVersion
		}
		out[len(rows)-1-i] = c
	}
	return out
}

// TestDeployMovesLatest: a deploy moves latest to the version it registers, in the
// same transaction, unless told not to; redeploying an old bundle makes it latest
// again. Each move is in latest's history with its actor.
func TestDeployMovesLatest(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store

	v1, _ := register(t, s, "wf", "b1", false, "alice")
	v2, _ := register(t, s, "wf", "b2", false, "bob")
	require.Equal(t, []int{1, 2}, []int{v1, v2})
	require.Equal(t, 2, aliasOf(t, s, "wf", catalog.AliasLatest))

	// --no-promote: a new version, latest stays.
	v3, created := register(t, s, "wf", "b3", true, "carol")
	require.True(t, created)
	require.Equal(t, 3, v3)
	w, err := s.WorkflowGet(ctx, "wf")
	require.NoError(t, err)
	require.Equal(t, 2, w.LatestVersion, "latest_version is the version latest names, not the newest")
	require.Equal(t, catalog.AliasVersions{"latest": 2}, w.Aliases)
	run, _, err := s.RunCreate(ctx, &catalog.RunCreateParams{Workflow: "wf"})
	require.NoError(t, err)
	require.Equal(t, 2, run.Version, "a run without a version starts on latest")
	v, err := s.VersionGet(ctx, "wf", 0)
	require.NoError(t, err)
	require.Equal(t, 2, v.Version)

	// The next upload still gets the next number.
	v4, _ := register(t, s, "wf", "b4", false, "dave")
	require.Equal(t, 4, v4)
	require.Equal(t, 4, aliasOf(t, s, "wf", catalog.AliasLatest))

	// Redeploying the first bundle: the same version, and latest again.
	again, created := register(t, s, "wf", "b1", false, "erin")
	require.False(t, created)
	require.Equal(t, 1, again)
	require.Equal(t, 1, aliasOf(t, s, "wf", catalog.AliasLatest))
	// And once more: latest names it already, nothing to record.
	register(t, s, "wf", "b1", false, "erin")

	require.Equal(t, []change{
		{version: 1, kind: catalog.AliasDeploy, actor: "alice"},
		{version: 2, previous: 1, kind: catalog.AliasDeploy, actor: "bob"},
		{version: 4, previous: 2, kind: catalog.AliasDeploy, actor: "dave"},
		{version: 1, previous: 4, kind: catalog.AliasDeploy, actor: "erin"},
	}, history(t, s, "wf", catalog.AliasLatest))

	// A workflow deployed only without promoting has no latest: a run without a
	// version has nothing to start on.
	register(t, s, "quiet", "q1", true, "")
	w, err = s.WorkflowGet(ctx, "quiet")
	require.NoError(t, err)
	require.Equal(t, 0, w.LatestVersion)
	require.Empty(t, w.Aliases)
	_, _, err = s.RunCreate(ctx, &catalog.RunCreateParams{Workflow: "quiet"})
	require.ErrorIs(t, err, catalog.ErrNotFound)
}

// TestAliasPromoteAndRollback: promotions push onto an alias's history, rollbacks
// walk back through it (not a toggle between the last two), and nothing left to go
// back to is ErrNothingToRollBack.
func TestAliasPromoteAndRollback(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	for i := 1; i <= 3; i++ {
		register(t, s, "wf", fmt.Sprint("b", i), false, "ci")
	}
	promote := func(alias string, version int, actor string) bool {
		t.Helper()
		changed, err := s.AliasSet(ctx, &catalog.AliasSetParams{Workflow: "wf", Alias: alias, Version: version, Actor: actor})
		require.NoError(t, err)
		return changed
	}
	rollback := func(alias string) int {
		t.Helper()
		v, err := s.AliasRollback(ctx, "wf", alias, "ops")
		require.NoError(t, err)
		require.Equal(t, v, aliasOf(t, s, "wf", alias))
		return v
	}

	require.True(t, promote("stable", 1, "alice"))
	require.True(t, promote("stable", 2, "alice"))
	require.True(t, promote("stable", 3, "bob"))
	require.False(t, promote("stable", 3, "bob"), "promoting to the version it names changes nothing")
	require.Equal(t, 2, rollback("stable"))
	require.Equal(t, 1, rollback("stable"), "a second rollback goes further back, not back to 3")
	_, err := s.AliasRollback(ctx, "wf", "stable", "ops")
	require.ErrorIs(t, err, catalog.ErrNothingToRollBack)
	require.Contains(t, catalog.Reason(err), "names version 1")
	require.Equal(t, 1, aliasOf(t, s, "wf", "stable"))

	// A promotion after rollbacks pushes onto where the alias is now.
	require.True(t, promote("stable", 3, "carol"))
	require.Equal(t, 1, rollback("stable"))

	require.Equal(t, []change{
		{version: 1, kind: catalog.AliasPromote, actor: "alice"},
		{version: 2, previous: 1, kind: catalog.AliasPromote, actor: "alice"},
		{version: 3, previous: 2, kind: catalog.AliasPromote, actor: "bob"},
		{version: 2, previous: 3, kind: catalog.AliasRollback, actor: "ops"},
		{version: 1, previous: 2, kind: catalog.AliasRollback, actor: "ops"},
		{version: 3, previous: 1, kind: catalog.AliasPromote, actor: "carol"},
		{version: 1, previous: 3, kind: catalog.AliasRollback, actor: "ops"},
	}, history(t, s, "wf", "stable"))

	// latest rolls back the same way: the Done-when of a bad deploy.
	require.Equal(t, 2, rollback(catalog.AliasLatest))

	a, err := s.AliasGet(ctx, "wf", "stable")
	require.NoError(t, err)
	require.Equal(t, "ops", a.UpdatedBy)
	list, err := s.AliasList(ctx, &catalog.AliasListParams{Workflow: "wf", Limit: 10})
	require.NoError(t, err)
	require.Len(t, list, 2)
	require.Equal(t, []string{"latest", "stable"}, []string{list[0].Alias, list[1].Alias})
	w, err := s.WorkflowGet(ctx, "wf")
	require.NoError(t, err)
	require.Equal(t, catalog.AliasVersions{"latest": 2, "stable": 1}, w.Aliases)
}

func TestAliasErrors(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	register(t, s, "wf", "b1", true, "")

	_, err := s.AliasSet(ctx, &catalog.AliasSetParams{Workflow: "nope", Alias: "stable", Version: 1})
	require.ErrorIs(t, err, catalog.ErrNotFound)
	_, err = s.AliasSet(ctx, &catalog.AliasSetParams{Workflow: "wf", Alias: "stable", Version: 9})
	require.ErrorIs(t, err, catalog.ErrInvalidInput)
	require.Equal(t, "workflow wf has no version 9", catalog.Reason(err))
	for _, bad := range []string{"", "123", "Stable", "-x", "x_y"} {
		_, err = s.AliasSet(ctx, &catalog.AliasSetParams{Workflow: "wf", Alias: bad, Version: 1})
		require.ErrorIs(t, err, catalog.ErrInvalidInput, "alias %q", bad)
	}
	_, err = s.AliasRollback(ctx, "wf", "stable", "ops")
	require.ErrorIs(t, err, catalog.ErrNotFound)
	_, err = s.AliasRollback(ctx, "nope", "latest", "ops")
	require.ErrorIs(t, err, catalog.ErrNotFound)
	_, err = s.AliasResolve(ctx, "wf", "stable")
	require.ErrorIs(t, err, catalog.ErrNotFound)
	_, err = s.AliasResolve(ctx, "nope", "latest")
	require.ErrorIs(t, err, catalog.ErrNotFound)
	_, err = s.AliasGet(ctx, "wf", "latest")
	require.ErrorIs(t, err, catalog.ErrNotFound)
	require.Empty(t, history(t, s, "wf", "stable"), "a refused change records nothing")
}

// TestAliasConcurrentPromotes: promotions of one alias at the same time are
// serialized; none is lost, and each records the version the one before it set.
func TestAliasConcurrentPromotes(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	const n = 16
	for i := 1; i <= n; i++ {
		register(t, s, "wf", fmt.Sprint("b", i), true, "ci")
	}
	var g errgroup.Group
	for i := 1; i <= n; i++ {
		g.Go(func() error {
			changed, err := s.AliasSet(ctx, &catalog.AliasSetParams{Workflow: "wf", Alias: "stable", Version: i, Actor: fmt.Sprint("op", i)})
			if err == nil && !changed {
				err = fmt.Errorf("promote to %d: no change", i)
			}
			return err
		})
	}
	require.NoError(t, g.Wait())
	h := history(t, s, "wf", "stable")
	require.Len(t, h, n)
	seen := map[int]bool{}
	for i, c := range h {
		seen[c.version] = true
		require.Equal(t, fmt.Sprint("op", c.version), c.actor)
		if i > 0 {
			require.Equal(t, h[i-1].version, c.previous, "change %d records the version change %d set", i, i-1)
		}
	}
	require.Len(t, seen, n)
	require.Equal(t, h[n-1].version, aliasOf(t, s, "wf", "stable"))
	// Rolling back walks the same chain.
	v, err := s.AliasRollback(ctx, "wf", "stable", "ops")
	require.NoError(t, err)
	require.Equal(t, h[n-2].version, v)
}

// TestRunCreateOnAlias: a run started on an alias gets the version the alias names
// when the run is created, and keeps it when the alias moves.
func TestRunCreateOnAlias(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	v1 := catalogtest.Version(t, s, "wf", catalog.NewStep{Key: "a", MaxAttempts: 1})
	v2 := catalogtest.Version(t, s, "wf", catalog.NewStep{Key: "a", MaxAttempts: 1}, catalog.NewStep{Key: "b", Needs: []string{"a"}, MaxAttempts: 1})
	_, err := s.AliasSet(ctx, &catalog.AliasSetParams{Workflow: "wf", Alias: "stable", Version: v1.Version, Actor: "alice"})
	require.NoError(t, err)

	onStable, _, err := s.RunCreate(ctx, &catalog.RunCreateParams{Workflow: "wf", Alias: "stable"})
	require.NoError(t, err)
	require.Equal(t, v1.Version, onStable.Version)
	require.Equal(t, 1, onStable.StepsTotal, "the steps of the version the alias names")
	onLatest, _, err := s.RunCreate(ctx, &catalog.RunCreateParams{Workflow: "wf"})
	require.NoError(t, err)
	require.Equal(t, v2.Version, onLatest.Version)
	require.Equal(t, 2, onLatest.StepsTotal)
	explicit, _, err := s.RunCreate(ctx, &catalog.RunCreateParams{Workflow: "wf", Version: v1.Version})
	require.NoError(t, err)
	require.Equal(t, v1.Version, explicit.Version)

	// With an idempotency key too (the transaction path).
	p := &catalog.RunCreateParams{Workflow: "wf", Alias: "stable", IdempotencyKey: "k", IdempotencyScope: "s", RequestHash: "h"}
	idem, created, err := s.RunCreate(ctx, p)
	require.NoError(t, err)
	require.True(t, created)
	require.Equal(t, v1.Version, idem.Version)

	// The alias moves; the runs stay on theirs.
	_, err = s.AliasSet(ctx, &catalog.AliasSetParams{Workflow: "wf", Alias: "stable", Version: v2.Version})
	require.NoError(t, err)
	got, err := s.RunGet(ctx, onStable.ID)
	require.NoError(t, err)
	require.Equal(t, v1.Version, got.Version)
	moved, _, err := s.RunCreate(ctx, &catalog.RunCreateParams{Workflow: "wf", Alias: "stable"})
	require.NoError(t, err)
	require.Equal(t, v2.Version, moved.Version)

	_, _, err = s.RunCreate(ctx, &catalog.RunCreateParams{Workflow: "wf", Alias: "canary"})
	require.ErrorIs(t, err, catalog.ErrNotFound)
	_, _, err = s.RunCreate(ctx, &catalog.RunCreateParams{Workflow: "nope", Alias: "stable"})
	require.ErrorIs(t, err, catalog.ErrNotFound)
}

// TestRunCreateWhileAliasMoves: runs created while their alias moves each get a
// version the alias named, never a mix (the version and its steps are read by the
// one statement that creates the run).
func TestRunCreateWhileAliasMoves(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	one := []catalog.NewStep{{Key: "a", MaxAttempts: 1}}
	two := append(one, catalog.NewStep{Key: "b", Needs: []string{"a"}, MaxAttempts: 1})
	v1 := catalogtest.Version(t, s, "wf", one...)
	v2 := catalogtest.Version(t, s, "wf", two...)
	var g errgroup.Group
	g.Go(func() error {
		for i := range 20 {
			v := v1.Version
			if i%2 == 1 {
				v = v2.Version
			}
			if _, err := s.AliasSet(context.Background(), &catalog.AliasSetParams{Workflow: "wf", Alias: "latest", Version: v}); err != nil {
				return err
			}
		}
		return nil
	})
	for range 4 {
		g.Go(func() error {
			for range 10 {
				run, _, err := s.RunCreate(ctx, &catalog.RunCreateParams{Workflow: "wf"})
				if err != nil {
					return err
				}
				if want := map[int]int{v1.Version: 1, v2.Version: 2}[run.Version]; run.StepsTotal != want {
					return fmt.Errorf("run on version %d has %d steps, want %d", run.Version, run.StepsTotal, want)
				}
			}
			return nil
		})
	}
	require.NoError(t, g.Wait())
}

package catalog_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/catalog/catalogtest"
)

// listFinisher resolves a map as the runtime does, simply: the list of outputs
// (null for a failure), failing past the tolerance.
func listFinisher(t *testing.T) func(context.Context, *catalog.MapState, iter.Seq2[*catalog.MapItem, error], []catalog.MapItem) (catalog.Resolution, error) {
	return func(_ context.Context, st *catalog.MapState, items iter.Seq2[*catalog.MapItem, error], failures []catalog.MapItem) (catalog.Resolution, error) {
		var parts []string
		for it, err := range items {
			require.NoError(t, err)
			if it.Status == catalog.StepSucceeded {
				parts = append(parts, string(it.Output))
			} else {
				parts = append(parts, "null")
			}
		}
		if !st.Tolerated(st.Failed, st.NextIndex) || st.FailingFast() {
			return catalog.Resolution{Outcome: catalog.OutcomeFailed, Reason: "map_failed",
				Error: json.RawMessage(fmt.Sprintf(`{"message":"%d failed","code":"map_failed"}`, len(failures)))}, nil
		}
		return catalog.Resolution{Outcome: catalog.OutcomeSucceeded, Reason: "map_done",
			Output: json.RawMessage("[" + strings.Join(parts, ",") + "]")}, nil
	}
}

// mapRun starts a run of (m → after) and claims m.
func mapRun(t *testing.T, ctx context.Context, s *catalog.Store, maxAttempts int) (*catalog.Run, catalog.Claimed) {
	t.Helper()
	v := catalogtest.Version(t, s, "wf", catalog.NewStep{Key: "m", MaxAttempts: maxAttempts},
		catalog.NewStep{Key: "after", Needs: []string{"m"}, MaxAttempts: 1})
	run, _, err := s.RunCreate(ctx, &catalog.RunCreateParams{Workflow: "wf", Version: v.Version})
	require.NoError(t, err)
	return run, claimKeys(t, ctx, s, "d1", 1)["m"]
}

// TestMapInline: a map of inline items runs them in pages, never more than
// max_parallel live, each instance a step with its item and index; when all have
// succeeded the map step gets their outputs in order and its dependents run.
func TestMapInline(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	run, m := mapRun(t, ctx, s, 1)
	require.ErrorIs(t, s.MapStart(ctx, catalog.Lease{RunID: m.RunID, Key: m.Key, Token: m.LeaseToken + 1},
		&catalog.MapStartParams{MaxParallel: 2, Items: json.RawMessage(`[1]`)}), catalog.ErrLeaseLost)
	require.NoError(t, s.MapStart(ctx, lease(m), &catalog.MapStartParams{MaxParallel: 2,
		Items: json.RawMessage(`["a","b","c","d","e"]`)}))
	st, err := s.StepGet(ctx, run.ID, "m")
	require.NoError(t, err)
	require.Equal(t, catalog.StepSuspended, st.Status)
	require.Equal(t, catalog.WaitMap, *st.WaitKind)
	open, err := s.MapsOpen(ctx, 10)
	require.NoError(t, err)
	require.Equal(t, []catalog.MapRef{{RunID: run.ID, Key: "m"}}, open)

	w := catalog.MapWorker{Finish: listFinisher(t)}
	ref := open[0]
	seen := map[int64]string{}
	for round := 0; ; round++ {
		require.Less(t, round, 10)
		created, resolved, err := s.MapWork(ctx, ref, w)
		require.NoError(t, err)
		if resolved {
			break
		}
		again, _, err := s.MapWork(ctx, ref, w)
		require.NoError(t, err)
		require.Zero(t, again, "max_parallel instances live: nothing more until some end")
		claimed := claimKeys(t, ctx, s, "d1", created)
		require.LessOrEqual(t, len(claimed), 2)
		for key, c := range claimed {
			require.NotNil(t, c.MapIndex)
			require.Equal(t, fmt.Sprintf("m[%d]", *c.MapIndex), key)
			seen[*c.MapIndex] = string(c.MapItem)
			require.NoError(t, finish(t, ctx, s, c, catalog.OutcomeSucceeded, false, fmt.Sprintf(`{"i":%d}`, *c.MapIndex)))
		}
	}
	require.Equal(t, map[int64]string{0: `"a"`, 1: `"b"`, 2: `"c"`, 3: `"d"`, 4: `"e"`}, seen)
	st, err = s.StepGet(ctx, run.ID, "m")
	require.NoError(t, err)
	require.Equal(t, catalog.StepSucceeded, st.Status)
	require.JSONEq(t, `[{"i":0},{"i":1},{"i":2},{"i":3},{"i":4}]`, string(st.Output))
	require.NotContains(t, statuses(t, ctx, s, run.ID), "m[0]", "instances are not listed with the steps")
	items, err := s.MapItemList(ctx, &catalog.MapItemListParams{RunID: run.ID, Key: "m", After: 1, Limit: 2})
	require.NoError(t, err)
	require.Len(t, items, 2)
	require.EqualValues(t, 2, *items[0].MapIndex)
	prog, err := s.MapProgressList(ctx, run.ID)
	require.NoError(t, err)
	require.Equal(t, catalog.MapProgress{Key: "m", Created: 5, Expanded: true, Succeeded: 5}, prog["m"])

	after := claimKeys(t, ctx, s, "d1", 1)["after"]
	require.JSONEq(t, `{"m":[{"i":0},{"i":1},{"i":2},{"i":3},{"i":4}]}`, string(after.Deps))
	require.NoError(t, finish(t, ctx, s, after, catalog.OutcomeSucceeded, false, `1`))
	r := runOf(t, ctx, s, run.ID)
	require.Equal(t, catalog.RunSucceeded, r.Status)
	require.Equal(t, 7, r.StepsTotal, "two steps and five instances")
}

// TestMapBlobPages: a blob map takes its items from Page, a page at a time, with the
// cursor it returns; a failure past the tolerance stops the expansion and fails the
// map once the live instances end; a retry of the run reruns only the failed
// instances.
func TestMapBlobPages(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	run, m := mapRun(t, ctx, s, 1)
	require.NoError(t, s.MapStart(ctx, lease(m), &catalog.MapStartParams{MaxParallel: 3, BlobKey: "payloads/x", BlobFormat: "lines"}))
	var offsets []int64
	w := catalog.MapWorker{
		Page: func(_ context.Context, st *catalog.MapState, n int) (json.RawMessage, int64, bool, error) {
			offsets = append(offsets, st.NextOffset)
			var items []string
			n = min(n, 10-int(st.NextIndex))
			for i := range n {
				items = append(items, fmt.Sprint(st.NextIndex+int64(i)))
			}
			end := st.NextIndex+int64(n) >= 10
			return json.RawMessage("[" + strings.Join(items, ",") + "]"), st.NextOffset + 100, end, nil
		},
		Finish: listFinisher(t),
	}
	ref := catalog.MapRef{RunID: run.ID, Key: "m"}
	created, _, err := s.MapWork(ctx, ref, w)
	require.NoError(t, err)
	require.Equal(t, 3, created)
	claimed := claimKeys(t, ctx, s, "d1", 3)
	require.NoError(t, finish(t, ctx, s, claimed["m[0]"], catalog.OutcomeFailed, false, ""))
	created, resolved, err := s.MapWork(ctx, ref, w)
	require.NoError(t, err)
	require.False(t, resolved)
	require.Zero(t, created, "past the tolerance (0): no more instances")
	require.Equal(t, []int64{0}, offsets)
	require.NoError(t, finish(t, ctx, s, claimed["m[1]"], catalog.OutcomeSucceeded, false, `1`))
	require.NoError(t, finish(t, ctx, s, claimed["m[2]"], catalog.OutcomeSucceeded, false, `2`))
	_, resolved, err = s.MapWork(ctx, ref, w)
	require.NoError(t, err)
	require.True(t, resolved)
	require.Equal(t, catalog.StepFailed, stepStatus(t, ctx, s, run.ID, "m"))
	r := runOf(t, ctx, s, run.ID)
	require.Equal(t, catalog.RunFailed, r.Status)
	require.Contains(t, string(r.Error), `"step": "m"`, "the map step fails the run, not its instance")

	// Retry: only m[0] runs again, then the expansion goes on from its cursor.
	_, _, err = s.RunRetry(ctx, &catalog.RunRetryParams{RunID: run.ID, Actor: "op"})
	require.NoError(t, err)
	claimed = claimKeys(t, ctx, s, "d1", 2)
	require.Contains(t, claimed, "m[0]")
	require.NoError(t, s.MapStart(ctx, lease(claimed["m"]), &catalog.MapStartParams{MaxParallel: 3, BlobKey: "payloads/x", BlobFormat: "lines"}))
	require.NoError(t, finish(t, ctx, s, claimed["m[0]"], catalog.OutcomeSucceeded, false, `0`))
	for round := 0; ; round++ {
		require.Less(t, round, 20)
		created, resolved, err := s.MapWork(ctx, ref, w)
		require.NoError(t, err)
		if resolved {
			break
		}
		for _, c := range claimKeys(t, ctx, s, "d1", created) {
			require.NoError(t, finish(t, ctx, s, c, catalog.OutcomeSucceeded, false, string(c.MapItem)))
		}
	}
	require.Equal(t, []int64{0, 100, 200, 300}, offsets)
	st, err := s.StepGet(ctx, run.ID, "m")
	require.NoError(t, err)
	require.JSONEq(t, `[0,1,2,3,4,5,6,7,8,9]`, string(st.Output))
	var n int
	require.NoError(t, s.DB().GetContext(ctx, &n, `SELECT count(*) FROM steps WHERE run_id = $1 AND map_parent = 'm'`, run.ID))
	require.Equal(t, 10, n, "no instance twice")
	_ = uuid.Nil
}

// TestMapRetryOntoVersion: a run with a map retried onto another version keeps the
// map's instances (they are not steps of a version): the failed one runs again and
// the map completes with every item once.
func TestMapRetryOntoVersion(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	run, m := mapRun(t, ctx, s, 1)
	require.NoError(t, s.MapStart(ctx, lease(m), &catalog.MapStartParams{MaxParallel: 3, Items: json.RawMessage(`[10, 20, 30]`)}))
	w := catalog.MapWorker{Finish: listFinisher(t)}
	ref := catalog.MapRef{RunID: run.ID, Key: "m"}
	created, _, err := s.MapWork(ctx, ref, w)
	require.NoError(t, err)
	require.Equal(t, 3, created)
	for key, c := range claimKeys(t, ctx, s, "d1", 3) {
		if key == "m[1]" {
			require.NoError(t, finish(t, ctx, s, c, catalog.OutcomeFailed, false, ""))
			continue
		}
		require.NoError(t, finish(t, ctx, s, c, catalog.OutcomeSucceeded, false, string(c.MapItem)))
	}
	_, resolved, err := s.MapWork(ctx, ref, w)
	require.NoError(t, err)
	require.True(t, resolved)
	require.Equal(t, catalog.RunFailed, runOf(t, ctx, s, run.ID).Status)

	v2 := catalogtest.Version(t, s, "wf", catalog.NewStep{Key: "m", MaxAttempts: 2},
		catalog.NewStep{Key: "after", Needs: []string{"m"}, MaxAttempts: 1})
	_, _, err = s.RunRetry(ctx, &catalog.RunRetryParams{RunID: run.ID, Version: v2.Version, Actor: "op"})
	require.NoError(t, err)
	claimed := claimKeys(t, ctx, s, "d1", 2)
	require.Contains(t, claimed, "m[1]")
	require.NoError(t, s.MapStart(ctx, lease(claimed["m"]), &catalog.MapStartParams{MaxParallel: 3, Items: json.RawMessage(`[10, 20, 30]`)}))
	require.NoError(t, finish(t, ctx, s, claimed["m[1]"], catalog.OutcomeSucceeded, false, `20`))
	_, resolved, err = s.MapWork(ctx, ref, w)
	require.NoError(t, err)
	require.True(t, resolved)
	st, err := s.StepGet(ctx, run.ID, "m")
	require.NoError(t, err)
	require.JSONEq(t, `[10, 20, 30]`, string(st.Output))
	require.NoError(t, finish(t, ctx, s, claimKeys(t, ctx, s, "d1", 1)["after"], catalog.OutcomeSucceeded, false, `1`))
	r := runOf(t, ctx, s, run.ID)
	require.Equal(t, catalog.RunSucceeded, r.Status)
	require.Equal(t, v2.Version, r.Version)
}

// TestMapItemsRefused: a page of items the database refuses (a \u0000) or that
// Page says are not items ends the map as Refused says once its live instances
// have ended, instead of being tried at every MapWork.
func TestMapItemsRefused(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		page func(n int64) (json.RawMessage, error)
	}{
		{name: "refused by the database", page: func(n int64) (json.RawMessage, error) {
			if n == 0 {
				return json.RawMessage(`[0]`), nil
			}
			return json.RawMessage(`["\u0000"]`), nil
		}},
		{name: "not items", page: func(n int64) (json.RawMessage, error) {
			if n == 0 {
				return json.RawMessage(`[0]`), nil
			}
			return nil, fmt.Errorf("%w: items: the item at byte 9: invalid character", catalog.ErrInvalidInput)
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx, tb := setup(t)
			s := tb.store
			run, m := mapRun(t, ctx, s, 1)
			require.NoError(t, s.MapStart(ctx, lease(m), &catalog.MapStartParams{MaxParallel: 2, BlobKey: "payloads/x", BlobFormat: "lines"}))
			var refused []error
			w := catalog.MapWorker{
				Page: func(_ context.Context, st *catalog.MapState, n int) (json.RawMessage, int64, bool, error) {
					items, err := tt.page(st.NextIndex)
					return items, st.NextOffset + 10, false, err
				},
				Finish: listFinisher(t),
				Refused: func(st *catalog.MapState, err error) catalog.Resolution {
					refused = append(refused, err)
					return catalog.Resolution{Outcome: catalog.OutcomeFailed, Error: json.RawMessage(`{"message": "refused", "code": "invalid_output"}`), Reason: "invalid_output"}
				},
			}
			ref := catalog.MapRef{RunID: run.ID, Key: "m"}
			created, _, err := s.MapWork(ctx, ref, w)
			require.NoError(t, err)
			require.Equal(t, 1, created)
			_, resolved, err := s.MapWork(ctx, ref, w)
			require.ErrorIs(t, err, catalog.ErrInvalidInput, "refused while an instance is live: not ended yet")
			require.False(t, resolved)
			require.Empty(t, refused)
			claimed := claimKeys(t, ctx, s, "d1", 1)
			require.NoError(t, finish(t, ctx, s, claimed["m[0]"], catalog.OutcomeSucceeded, false, `0`))
			_, resolved, err = s.MapWork(ctx, ref, w)
			require.NoError(t, err)
			require.True(t, resolved)
			require.Len(t, refused, 1)
			require.ErrorIs(t, refused[0], catalog.ErrInvalidInput)
			require.Equal(t, catalog.StepFailed, stepStatus(t, ctx, s, run.ID, "m"))
			require.Equal(t, catalog.RunFailed, runOf(t, ctx, s, run.ID).Status)
			open, err := s.MapsOpen(ctx, 100)
			require.NoError(t, err)
			for _, o := range open {
				require.NotEqual(t, ref, o, "the map is no longer open")
			}
		})
	}
}

// TestMapFinishLeasesNextInstances: the finish of a map's instance that leases
// (StepFinishClaim with room) creates the map's next instances in its
// transaction and leases them to the finishing dispatcher, never past
// max_parallel: an inline map's items, and a blob map's from ClaimNext.Page. A
// page it cannot have leaves the map to the map loop (MapWork), which also
// resolves the map once its instances have ended.
func TestMapFinishLeasesNextInstances(t *testing.T) {
	t.Parallel()
	for _, blob := range []bool{false, true} {
		t.Run(fmt.Sprintf("blob=%v", blob), func(t *testing.T) {
			t.Parallel()
			ctx, tb := setup(t)
			s := tb.store
			run, m := mapRun(t, ctx, s, 1)
			start := &catalog.MapStartParams{MaxParallel: 2, Items: json.RawMessage(`["a","b","c","d","e"]`)}
			if blob {
				start = &catalog.MapStartParams{MaxParallel: 2, BlobKey: "payloads/x", BlobFormat: "lines"}
			}
			require.NoError(t, s.MapStart(ctx, lease(m), start))
			page := func(_ context.Context, st *catalog.MapState, n int) (json.RawMessage, int64, bool, error) {
				var items []string
				n = min(n, 5-int(st.NextIndex))
				for i := range n {
					items = append(items, fmt.Sprintf("%q", string(rune('a'+st.NextIndex+int64(i)))))
				}
				return json.RawMessage("[" + strings.Join(items, ",") + "]"), st.NextOffset + 2*int64(n), st.NextIndex+int64(n) >= 5, nil
			}
			w := catalog.MapWorker{Page: page, Finish: listFinisher(t)}
			ref := catalog.MapRef{RunID: run.ID, Key: "m"}
			created, _, err := s.MapWork(ctx, ref, w)
			require.NoError(t, err)
			require.Equal(t, 2, created)
			live := claimKeys(t, ctx, s, "d1", 2)
			refused := false
			next := &catalog.ClaimNext{Owner: "d1", Limit: 10, TTL: time.Minute,
				Page: func(ctx context.Context, st *catalog.MapState, n int) (json.RawMessage, int64, bool, error) {
					if !refused {
						refused = true
						return nil, 0, false, errors.New("not read ahead")
					}
					return page(ctx, st, n)
				}}
			items := map[int64]string{}
			var byFinish int
			for round := 0; len(live) > 0; round++ {
				require.Less(t, round, 10)
				keys := slices.Sorted(maps.Keys(live))
				c := live[keys[0]]
				delete(live, c.Key)
				items[*c.MapIndex] = string(c.MapItem)
				res, claimed, err := s.StepFinishClaim(ctx, []*catalog.StepFinishParams{succeeded(c, fmt.Sprintf(`{"i":%d}`, *c.MapIndex))}, next)
				require.NoError(t, err)
				require.NoError(t, res[0])
				require.LessOrEqual(t, len(claimed), 1, "one ended: room for one")
				byFinish += len(claimed)
				for _, n := range claimed {
					require.Equal(t, fmt.Sprintf("m[%d]", *n.MapIndex), n.Key)
					live[n.Key] = n
				}
				if len(claimed) == 0 && blob && round == 0 {
					// The refused page: the map loop creates the instance, a claim leases it.
					created, _, err := s.MapWork(ctx, ref, w)
					require.NoError(t, err)
					require.Equal(t, 1, created)
					maps.Copy(live, claimKeys(t, ctx, s, "d1", 1))
				}
				require.LessOrEqual(t, len(live), 2, "never more than max_parallel live")
			}
			require.Equal(t, map[int64]string{0: `"a"`, 1: `"b"`, 2: `"c"`, 3: `"d"`, 4: `"e"`}, items)
			if blob {
				require.Equal(t, 2, byFinish, "the refused page's instance came from the map loop")
			} else {
				require.Equal(t, 3, byFinish)
			}
			_, resolved, err := s.MapWork(ctx, ref, w)
			require.NoError(t, err)
			require.True(t, resolved)
			st, err := s.StepGet(ctx, run.ID, "m")
			require.NoError(t, err)
			require.Equal(t, catalog.StepSucceeded, st.Status)
			require.JSONEq(t, `[{"i":0},{"i":1},{"i":2},{"i":3},{"i":4}]`, string(st.Output))
		})
	}
}

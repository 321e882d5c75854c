package catalog_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/catalog/catalogtest"
)

// TestRunLabelsRoundTrip: the labels given at start come back from get and list; a
// run started without labels has an empty set, never nil.
func TestRunLabelsRoundTrip(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	catalogtest.Version(t, s, "wf", catalog.NewStep{Key: "a", MaxAttempts: 1})

	labels := catalog.Labels{"tenant": "acme", "env": "prod", "note": "a = b, é ✓", "empty": ""}
	run, _, err := s.RunCreate(ctx, &catalog.RunCreateParams{Workflow: "wf", Labels: labels})
	require.NoError(t, err)
	require.Equal(t, labels, run.Labels)
	require.Nil(t, run.ParentID)
	got, err := s.RunGet(ctx, run.ID)
	require.NoError(t, err)
	require.Equal(t, labels, got.Labels)

	bare, _, err := s.RunCreate(ctx, &catalog.RunCreateParams{Workflow: "wf"})
	require.NoError(t, err)
	require.NotNil(t, bare.Labels)
	require.Empty(t, bare.Labels)

	runs, err := s.RunList(ctx, &catalog.RunListParams{Limit: 10})
	require.NoError(t, err)
	require.Len(t, runs, 2)
	require.Equal(t, bare.ID, runs[0].ID)
	require.Equal(t, catalog.Labels{}, runs[0].Labels)
	require.Equal(t, labels, runs[1].Labels)

	// A child run names its parent.
	child, _, err := s.RunCreate(ctx, &catalog.RunCreateParams{Workflow: "wf", Parent: run.ID})
	require.NoError(t, err)
	require.NotNil(t, child.ParentID)
	require.Equal(t, run.ID, *child.ParentID)
}

// TestRunLabelLimits: at most 32 labels, keys like step keys, values of at most 256
// bytes of UTF-8 without NUL; a run breaking a rule is not created.
func TestRunLabelLimits(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	catalogtest.Version(t, s, "wf", catalog.NewStep{Key: "a", MaxAttempts: 1})

	many := func(n int) catalog.Labels {
		l := catalog.Labels{}
		for i := range n {
			l[fmt.Sprintf("k%d", i)] = "v"
		}
		return l
	}
	for _, tc := range []struct {
		name   string
		labels catalog.Labels
		ok     bool
	}{
		{name: "32 labels", labels: many(32), ok: true},
		{name: "33 labels", labels: many(33)},
		{name: "longest key", labels: catalog.Labels{"a" + strings.Repeat("b_-", 20) + "cd": "v"}, ok: true},
		{name: "key too long", labels: catalog.Labels{strings.Repeat("a", 64): "v"}},
		{name: "empty key", labels: catalog.Labels{"": "v"}},
		{name: "upper-case key", labels: catalog.Labels{"Tenant": "v"}},
		{name: "key starting with _", labels: catalog.Labels{"_x": "v"}},
		{name: "key with =", labels: catalog.Labels{"a=b": "v"}},
		{name: "value of 256 bytes", labels: catalog.Labels{"k": strings.Repeat("é", 128)}, ok: true},
		{name: "value of 257 bytes", labels: catalog.Labels{"k": strings.Repeat("é", 128) + "x"}},
		{name: "value with NUL", labels: catalog.Labels{"k": "a\x00b"}},
		{name: "value not UTF-8", labels: catalog.Labels{"k": "a\xffb"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run, _, err := s.RunCreate(ctx, &catalog.RunCreateParams{Workflow: "wf", Labels: tc.labels})
			if tc.ok {
				require.NoError(t, err)
				require.Equal(t, tc.labels, run.Labels)
				return
			}
			require.ErrorIs(t, err, catalog.ErrInvalidInput)
		})
	}
}

// TestRunListFilters: every filter of the list, alone and combined, pages newest
// first through keyset cursors of every page size without duplicates or gaps, and
// returns exactly the runs a plain reading of the filter selects.
func TestRunListFilters(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	step := catalog.NewStep{Key: "a", MaxAttempts: 1}
	catalogtest.Version(t, s, "orders", step)
	catalogtest.Version(t, s, "orders", step)
	catalogtest.Version(t, s, "billing", step)

	// 60 runs over two workflows and versions, three tenants, some with a second
	// label; every fourth failed with one of two codes, every seventh canceled, a
	// few the children of the first run.
	type model struct {
		run    *catalog.Run
		code   string // error.cause.code when failed
		status catalog.RunStatus
	}
	var runs []model
	var parent uuid.UUID
	tenants := []string{"acme", "globex", "initech"}
	for i := range 60 {
		p := &catalog.RunCreateParams{Workflow: "orders", Version: 1 + i%2,
			Labels: catalog.Labels{"tenant": tenants[i%3]}}
		if i%5 == 0 {
			p.Workflow, p.Version = "billing", 1
		}
		if i%2 == 0 {
			p.Labels["env"] = "prod"
		}
		if i > 0 && i%6 == 0 {
			p.Parent = parent
		}
		run, _, err := s.RunCreate(ctx, p)
		require.NoError(t, err)
		if i == 0 {
			parent = run.ID
		}
		m := model{run: run, status: catalog.RunPending}
		switch {
		case i%4 == 1:
			m.status, m.code = catalog.RunFailed, []string{"timeout", "exit"}[i%8/4]
			_, err = s.DB().ExecContext(ctx, `UPDATE runs SET status = 'failed', finished_at = now(),
  error = jsonb_build_object('message', 'step a failed', 'step', 'a', 'cause', jsonb_build_object('message', 'no', 'code', $2::text))
WHERE id = $1`, run.ID, m.code)
			require.NoError(t, err)
		case i%7 == 3:
			// A canceled run's error has a code of its own, not a step's: no
			// error_code filter matches it.
			m.status = catalog.RunCanceled
			_, err = s.DB().ExecContext(ctx, `UPDATE runs SET status = 'canceled', finished_at = now(),
  error = '{"message": "canceled", "code": "timeout"}' WHERE id = $1`, run.ID)
			require.NoError(t, err)
		}
		runs = append(runs, m)
	}
	slices.Reverse(runs) // newest first, as the list
	idTime := func(id uuid.UUID) int64 { sec, nsec := id.Time().UnixTime(); return sec*1000 + nsec/1e6 }
	// The ids of one millisecond cannot be told apart by a time bound: pick bounds
	// at the millisecond of the 20th and the 45th newest run.
	after := time.UnixMilli(idTime(runs[45].run.ID))
	before := time.UnixMilli(idTime(runs[20].run.ID))

	for _, tc := range []struct {
		name   string
		params catalog.RunListParams
		want   func(m model) bool
		none   bool // the filter matches no run
	}{
		{name: "none", want: func(model) bool { return true }},
		{name: "workflow", params: catalog.RunListParams{Workflow: "orders"},
			want: func(m model) bool { return m.run.Workflow == "orders" }},
		{name: "one label", params: catalog.RunListParams{Labels: catalog.Labels{"tenant": "acme"}},
			want: func(m model) bool { return m.run.Labels["tenant"] == "acme" }},
		{name: "two labels", params: catalog.RunListParams{Labels: catalog.Labels{"tenant": "acme", "env": "prod"}},
			want: func(m model) bool { return m.run.Labels["tenant"] == "acme" && m.run.Labels["env"] == "prod" }},
		{name: "label nobody has", params: catalog.RunListParams{Labels: catalog.Labels{"tenant": "hooli"}},
			want: func(model) bool { return false }, none: true},
		{name: "label and status", params: catalog.RunListParams{Labels: catalog.Labels{"tenant": "globex"}, Status: "failed"},
			want: func(m model) bool { return m.run.Labels["tenant"] == "globex" && m.status == catalog.RunFailed }},
		{name: "version", params: catalog.RunListParams{Workflow: "orders", Version: 2},
			want: func(m model) bool { return m.run.Workflow == "orders" && m.run.Version == 2 }},
		{name: "version of another workflow", params: catalog.RunListParams{Workflow: "billing", Version: 2},
			want: func(model) bool { return false }, none: true},
		{name: "error code", params: catalog.RunListParams{ErrorCode: "timeout"},
			want: func(m model) bool { return m.code == "timeout" }},
		{name: "error code and label", params: catalog.RunListParams{ErrorCode: "exit", Labels: catalog.Labels{"tenant": "initech"}},
			want: func(m model) bool { return m.code == "exit" && m.run.Labels["tenant"] == "initech" }},
		{name: "error code of succeeded runs", params: catalog.RunListParams{ErrorCode: "exit", Status: "succeeded"},
			want: func(model) bool { return false }, none: true},
		{name: "parent", params: catalog.RunListParams{Parent: parent},
			want: func(m model) bool { return m.run.ParentID != nil && *m.run.ParentID == parent }},
		{name: "parent and workflow", params: catalog.RunListParams{Parent: parent, Workflow: "orders"},
			want: func(m model) bool { return m.run.ParentID != nil && m.run.Workflow == "orders" }},
		{name: "created after", params: catalog.RunListParams{CreatedAfter: after},
			want: func(m model) bool { return idTime(m.run.ID) >= after.UnixMilli() }},
		{name: "created before", params: catalog.RunListParams{CreatedBefore: before},
			want: func(m model) bool { return idTime(m.run.ID) < before.UnixMilli() }},
		{name: "created between, workflow and label", params: catalog.RunListParams{CreatedAfter: after, CreatedBefore: before,
			Workflow: "orders", Labels: catalog.Labels{"env": "prod"}},
			want: func(m model) bool {
				return idTime(m.run.ID) >= after.UnixMilli() && idTime(m.run.ID) < before.UnixMilli() &&
					m.run.Workflow == "orders" && m.run.Labels["env"] == "prod"
			}},
		{name: "everything", params: catalog.RunListParams{Workflow: "orders", Version: 2, Status: "failed", ErrorCode: "timeout",
			Labels: catalog.Labels{"tenant": "acme"}, CreatedAfter: time.UnixMilli(0), CreatedBefore: time.Now().Add(time.Hour)},
			want: func(m model) bool {
				return m.run.Workflow == "orders" && m.run.Version == 2 && m.code == "timeout" && m.run.Labels["tenant"] == "acme"
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var want []uuid.UUID
			for _, m := range runs {
				if tc.want(m) {
					want = append(want, m.run.ID)
				}
			}
			require.Equal(t, tc.none, len(want) == 0, "the runs the filter selects: %d", len(want))
			for _, size := range []int{1, 3, 7, 100} {
				var got []uuid.UUID
				p := tc.params
				p.Limit = size
				for range 100 {
					page, err := s.RunList(ctx, &p)
					require.NoError(t, err)
					require.LessOrEqual(t, len(page), size)
					for _, r := range page {
						got = append(got, r.ID)
					}
					if len(page) < size {
						break
					}
					p.Before = page[len(page)-1].ID
				}
				require.Equal(t, want, got, "page size %d", size)
			}
		})
	}
	require.NotEmpty(t, runs[0].run.Labels)
}

// TestFirstRunIDAt: the bound of a time sits between the ids made before its
// millisecond and those made in it or after.
func TestFirstRunIDAt(t *testing.T) {
	t.Parallel()
	at := time.Date(2025, 3, 1, 12, 0, 0, 123_456_789, time.UTC)
	bound := catalog.FirstRunIDAt(at)
	require.Equal(t, uuid.Version(7), bound.Version())
	require.Equal(t, uuid.RFC4122, bound.Variant())
	sec, nsec := bound.Time().UnixTime()
	require.Equal(t, at.Truncate(time.Millisecond), time.Unix(sec, nsec).UTC())
	require.Equal(t, "01955193-de7b-7000-8000-000000000000", bound.String())
	require.Equal(t, uuid.UUID{6: 0x70, 8: 0x80}, catalog.FirstRunIDAt(time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC)))
}

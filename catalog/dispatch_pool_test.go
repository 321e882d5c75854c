package catalog_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/internal/testenv"
)

// A Store from Open claims and finishes on a pool of its own whose connections
// plan generically from a statement's first call; the main pool keeps
// PostgreSQL's default, which plans the API's statements for their values. In
// transaction pooling there is one pool (nothing is prepared), with the
// default. Close closes both.
func TestDispatchPool(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := testenv.DatabaseURL(t)
	s, err := catalog.Open(ctx, url, nil)
	require.NoError(t, err)
	show := func(t *testing.T, s *catalog.Store, dispatch bool) string {
		t.Helper()
		db := s.DB()
		if dispatch {
			db = catalog.DispatchDB(s)
		}
		var m string
		require.NoError(t, db.GetContext(ctx, &m, `SHOW plan_cache_mode`))
		return m
	}
	require.Equal(t, "auto", show(t, s, false))
	require.Equal(t, "force_generic_plan", show(t, s, true))

	// A chain a → (b, c) → d claimed and finished through it: the finish of a
	// leases b and c.
	run := newRun(t, ctx, s, diamond(1))
	a := claimKeys(t, ctx, s, "d1", 1)["a"]
	res, claimed, err := s.StepFinishClaim(ctx, []*catalog.StepFinishParams{succeeded(a, `1`)},
		&catalog.ClaimNext{Owner: "d1", Limit: 10, TTL: time.Minute})
	require.NoError(t, err)
	require.NoError(t, res[0])
	require.Len(t, claimed, 2)
	require.Equal(t, map[string]string{"a": "succeeded", "b": "running", "c": "running", "d": "waiting"}, statuses(t, ctx, s, run.ID))

	require.NoError(t, s.Close())
	require.Error(t, catalog.DispatchDB(s).PingContext(ctx), "closed with the store")

	pooled, err := catalog.Open(ctx, url, &catalog.Config{TransactionPooling: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pooled.Close() })
	require.Same(t, pooled.DB(), catalog.DispatchDB(pooled))
	require.Equal(t, "auto", show(t, pooled, false))
}

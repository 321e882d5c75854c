package catalog

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/internal/testenv"
)

// TestStepsSucceedPlans: a finish that leases next (sqlStepsSucceed with $6
// false) makes the rest of its transaction run generic plans, as a SET LOCAL
// would (sqlGenericPlans); one that does not leaves the setting alone.
func TestStepsSucceedPlans(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.DB(t)
	for _, tc := range []struct {
		wake bool
		want string
	}{{wake: false, want: "force_generic_plan"}, {wake: true, want: "auto"}} {
		tx, err := db.BeginTxx(ctx, nil)
		require.NoError(t, err)
		var ords []byte
		var ready int
		a := newFinishArrays(nil, nil)
		require.NoError(t, tx.QueryRowContext(ctx, sqlStepsSucceed, a.succeedArgs(tc.wake)...).Scan(&ords, &ready))
		var mode string
		require.NoError(t, tx.GetContext(ctx, &mode, `SELECT current_setting('plan_cache_mode')`))
		require.Equal(t, tc.want, mode, "wake %v", tc.wake)
		require.NoError(t, tx.Rollback())
		require.NoError(t, db.GetContext(ctx, &mode, `SELECT current_setting('plan_cache_mode')`))
		require.Equal(t, "auto", mode, "the setting ends with its transaction")
	}
}

package maintenance_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/maintenance"
)

// TestReapAuditRecords: a pass deletes the audit records older than
// AuditRetention and keeps the others; without AuditRetention it keeps all.
func TestReapAuditRecords(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	for _, rid := range []string{"old", "new"} {
		a := &catalog.Audit{Actor: "root", Role: "admin", Action: "putLimit", RequestID: rid}
		require.NoError(t, tb.store.AuditRecordDone(ctx, a))
	}
	_, err := tb.store.DB().ExecContext(ctx, `UPDATE audit_log SET at = now() - interval '100 days' WHERE request_id = 'old'`)
	require.NoError(t, err)
	count := func() int {
		var n int
		require.NoError(t, tb.store.DB().GetContext(ctx, &n, `SELECT count(*) FROM audit_log`))
		return n
	}

	maintenance.NewReaper(tb.store, tb.blobs, nil).Reap(ctx)
	require.Equal(t, 2, count(), "kept forever by default")

	reg := prometheus.NewRegistry()
	maintenance.NewReaper(tb.store, tb.blobs, &maintenance.ReaperConfig{AuditRetention: 90 * 24 * time.Hour, Registerer: reg}).Reap(ctx)
	var left string
	require.NoError(t, tb.store.DB().GetContext(ctx, &left, `SELECT request_id FROM audit_log`))
	require.Equal(t, "new", left)
	require.Equal(t, 1.0, counter(t, reg, "cairn_audit_records_expired_total"))
}

package catalog_test

import (
	"crypto/sha256"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/catalog"
)

// TestAuditInTransaction: an Audit in the context is recorded by the first
// transaction that writes, once; a transaction that only reads (revoking a
// token revoked already) leaves it to the next; a refusal is recorded apart; the
// list filters and pages; expiry deletes old records only.
func TestAuditInTransaction(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	count := func() int {
		var n int
		require.NoError(t, s.DB().GetContext(ctx, &n, `SELECT count(*) FROM audit_log`))
		return n
	}
	h := sha256.Sum256([]byte("t1"))
	tok, err := s.TokenCreate(ctx, catalog.TokenCreateParams{Name: "t1", Role: "viewer", Hash: h[:], CreatedBy: "root"})
	require.NoError(t, err)
	require.Equal(t, 0, count(), "no Audit in the context: nothing recorded")
	_, err = s.TokenRevoke(ctx, tok.ID, "root")
	require.NoError(t, err)

	a := &catalog.Audit{Actor: "root", Role: "admin", Action: "revokeToken", Target: "id=" + tok.ID.String(), RequestID: "r1"}
	actx := catalog.WithAudit(ctx, a)
	_, err = s.TokenRevoke(actx, tok.ID, "root") // revoked already: reads only
	require.NoError(t, err)
	require.False(t, a.Recorded())
	require.Equal(t, 0, count())
	h2 := sha256.Sum256([]byte("t2"))
	_, err = s.TokenCreate(actx, catalog.TokenCreateParams{Name: "t2", Role: "viewer", Hash: h2[:], CreatedBy: "root"})
	require.NoError(t, err)
	require.True(t, a.Recorded())
	h3 := sha256.Sum256([]byte("t3"))
	_, err = s.TokenCreate(actx, catalog.TokenCreateParams{Name: "t3", Role: "viewer", Hash: h3[:], CreatedBy: "root"})
	require.NoError(t, err)
	require.Equal(t, 1, count(), "one record per Audit")
	require.NoError(t, s.AuditRecordFailed(ctx, a), "recorded already: nothing more")
	require.Equal(t, 1, count())

	// A write that fails (a hash stored already) records nothing in its
	// transaction; the refusal is recorded apart.
	b := &catalog.Audit{Actor: "root", Role: "admin", Action: "createToken", RequestID: "r2"}
	_, err = s.TokenCreate(catalog.WithAudit(ctx, b), catalog.TokenCreateParams{Name: "dup", Role: "viewer", Hash: h2[:], CreatedBy: "root"})
	require.ErrorIs(t, err, catalog.ErrConflict)
	require.False(t, b.Recorded())
	b.Code = "conflict"
	require.NoError(t, s.AuditRecordFailed(ctx, b))
	require.True(t, b.Recorded())

	rows, err := s.AuditList(ctx, catalog.AuditListParams{})
	require.NoError(t, err)
	require.Len(t, rows, 2)
	require.Equal(t, []string{"createToken", catalog.AuditFailed, "conflict"}, []string{rows[0].Action, rows[0].Outcome, rows[0].Code})
	require.Equal(t, []string{"revokeToken", catalog.AuditOK, "root"}, []string{rows[1].Action, rows[1].Outcome, rows[1].Actor})
	rows, err = s.AuditList(ctx, catalog.AuditListParams{Action: "revokeToken"})
	require.NoError(t, err)
	require.Len(t, rows, 1)
	rows, err = s.AuditList(ctx, catalog.AuditListParams{Before: rows[0].Seq})
	require.NoError(t, err)
	require.Empty(t, rows)
	rows, err = s.AuditList(ctx, catalog.AuditListParams{Since: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	require.Empty(t, rows)

	// Retention: the records older than it go, the others stay.
	_, err = s.DB().ExecContext(ctx, `UPDATE audit_log SET at = now() - interval '40 days' WHERE request_id = 'r1'`)
	require.NoError(t, err)
	n, err := s.AuditExpire(ctx, 30*24*time.Hour, 100)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, 1, count())
}

// TestTokenLookup: a token is found by its hash, revoked and expired ones too
// (the API tells them apart); an unknown hash is ErrNotFound.
func TestTokenLookup(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	h := sha256.Sum256([]byte("value"))
	past := time.Now().Add(-time.Minute)
	tok, err := s.TokenCreate(ctx, catalog.TokenCreateParams{Name: "x", Role: "operator", Hash: h[:], CreatedBy: "root", ExpiresAt: &past})
	require.NoError(t, err)
	got, err := s.TokenLookup(ctx, h[:])
	require.NoError(t, err)
	require.Equal(t, tok.ID, got.ID)
	require.NotNil(t, got.ExpiresAt)
	require.Nil(t, got.LastUsedAt, "an expired token's use is not recorded")
	other := sha256.Sum256([]byte("other"))
	_, err = s.TokenLookup(ctx, other[:])
	require.ErrorIs(t, err, catalog.ErrNotFound)
	_, err = s.TokenRevoke(ctx, uuid.New(), "root")
	require.ErrorIs(t, err, catalog.ErrNotFound)
}

// TestAuditRunCreate: a run started by an audited write records it in the
// statement that creates it (one round trip, as without an audit), or in the
// transaction that does when it takes one (an idempotency key); once per Audit.
func TestAuditRunCreate(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	definitionVersion(t, s, "audited", `{"name":"audited"}`)
	records := func(requestID string) int {
		var n int
		require.NoError(t, s.DB().GetContext(ctx, &n, `SELECT count(*) FROM audit_log WHERE request_id = $1 AND action = 'startRun'`, requestID))
		return n
	}
	a := &catalog.Audit{Actor: "ci", Role: "operator", Action: "startRun", Target: "name=audited", RequestID: "one-statement"}
	actx := catalog.WithAudit(ctx, a)
	run, created, err := s.RunCreate(actx, &catalog.RunCreateParams{Workflow: "audited"})
	require.NoError(t, err)
	require.True(t, created)
	require.True(t, a.Recorded())
	require.Equal(t, 1, records("one-statement"))
	_, _, err = s.RunCreate(actx, &catalog.RunCreateParams{Workflow: "audited"})
	require.NoError(t, err)
	require.Equal(t, 1, records("one-statement"), "one record per Audit")
	got, err := s.RunGet(ctx, run.ID)
	require.NoError(t, err)
	require.Equal(t, "audited", got.Workflow)

	b := &catalog.Audit{Actor: "ci", Role: "operator", Action: "startRun", Target: "name=audited", RequestID: "in-a-transaction"}
	_, created, err = s.RunCreate(catalog.WithAudit(ctx, b), &catalog.RunCreateParams{Workflow: "audited", IdempotencyKey: "k1"})
	require.NoError(t, err)
	require.True(t, created)
	require.Equal(t, 1, records("in-a-transaction"))

	// No such workflow: nothing created, nothing recorded.
	c := &catalog.Audit{Actor: "ci", Role: "operator", Action: "startRun", Target: "name=nope", RequestID: "refused"}
	_, _, err = s.RunCreate(catalog.WithAudit(ctx, c), &catalog.RunCreateParams{Workflow: "nope"})
	require.Error(t, err)
	require.False(t, c.Recorded())
	require.Equal(t, 0, records("refused"))
}

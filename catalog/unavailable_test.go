package catalog_test

import (
	"context"
	"encoding/json"
	"net"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/catalog/catalogtest"
	"github.com/cairnrun/cairn/internal/testenv"
)

// closedPortURL is the URL of a database on a port of 127.0.0.1 where nothing
// listens: connecting is refused.
func closedPortURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return "postgres://cairn:secret@" + addr + "/cairn?sslmode=disable&connect_timeout=5"
}

type storeCall struct {
	name string
	call func(ctx context.Context, s *catalog.Store) error
}

// storeCalls exercise the Store's read, write and transaction paths on a run.
func storeCalls(runID uuid.UUID) []storeCall {
	d := fakeDigest("unavailable")
	return []storeCall{
		{"Ping", func(ctx context.Context, s *catalog.Store) error { return s.Ping(ctx) }},
		{"CheckSchema", func(ctx context.Context, s *catalog.Store) error { return s.CheckSchema(ctx) }},
		{"RunList", func(ctx context.Context, s *catalog.Store) error {
			_, err := s.RunList(ctx, &catalog.RunListParams{Limit: 10})
			return err
		}},
		{"RunGet", func(ctx context.Context, s *catalog.Store) error {
			_, err := s.RunGet(ctx, runID)
			return err
		}},
		{"RunCreate", func(ctx context.Context, s *catalog.Store) error {
			_, _, err := s.RunCreate(ctx, &catalog.RunCreateParams{Workflow: "wf"})
			return err
		}},
		{"RunCreate idempotent", func(ctx context.Context, s *catalog.Store) error {
			_, _, err := s.RunCreate(ctx, &catalog.RunCreateParams{Workflow: "wf", IdempotencyKey: "k", IdempotencyScope: "s", RequestHash: "h"})
			return err
		}},
		{"RunCancel", func(ctx context.Context, s *catalog.Store) error { return s.RunCancel(ctx, runID, "test") }},
		{"EventList", func(ctx context.Context, s *catalog.Store) error {
			_, err := s.EventList(ctx, runID, 0, 10)
			return err
		}},
		{"StepList", func(ctx context.Context, s *catalog.Store) error {
			_, err := s.StepList(ctx, runID)
			return err
		}},
		{"WorkflowList", func(ctx context.Context, s *catalog.Store) error {
			_, err := s.WorkflowList(ctx, &catalog.WorkflowListParams{Limit: 10})
			return err
		}},
		{"VersionGet", func(ctx context.Context, s *catalog.Store) error {
			_, err := s.VersionGet(ctx, "wf", 0)
			return err
		}},
		{"VersionRegister", func(ctx context.Context, s *catalog.Store) error {
			_, _, err := s.VersionRegister(ctx, &catalog.VersionRegisterParams{
				Workflow: "wf2", Digest: d, Size: 1, BlobKey: "k", Definition: json.RawMessage(`{}`), Fingerprint: d,
			})
			return err
		}},
		{"StepClaim", func(ctx context.Context, s *catalog.Store) error {
			_, err := s.StepClaim(ctx, "test", 1, time.Minute)
			return err
		}},
	}
}

// requireUnavailable runs every call against s and requires ErrUnavailable.
func requireUnavailable(t *testing.T, s *catalog.Store, runID uuid.UUID) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, c := range storeCalls(runID) {
		err := c.call(ctx, s)
		require.ErrorIs(t, err, catalog.ErrUnavailable, "%s", c.name)
		require.NotErrorIs(t, err, catalog.ErrNotFound, "%s", c.name)
	}
}

// TestUnavailableRefused: a database whose port refuses connections makes every
// call fail with ErrUnavailable, and Open too.
func TestUnavailableRefused(t *testing.T) {
	t.Parallel()
	url := closedPortURL(t)
	db, err := sqlx.Open("postgres", url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	requireUnavailable(t, catalog.New(db, nil), uuid.New())

	_, err = catalog.Open(context.Background(), url, nil)
	require.ErrorIs(t, err, catalog.ErrUnavailable)
}

// TestUnavailableStopped: PostgreSQL stops (its connections in the pool are closed
// by the shutdown) and then crashes; meanwhile every call fails with
// ErrUnavailable, and the store works again once the server is back.
func TestUnavailableStopped(t *testing.T) {
	t.Parallel()
	c := testenv.PG(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := catalog.Open(ctx, testenv.ClusterDatabaseURL(t, c), nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	catalogtest.Version(t, s, "wf", catalog.NewStep{Key: "a", MaxAttempts: 1})
	run, _, err := s.RunCreate(ctx, &catalog.RunCreateParams{Workflow: "wf"})
	require.NoError(t, err)
	// Every call works, leaving connections in the pool.
	for _, call := range storeCalls(run.ID) {
		err := call.call(ctx, s)
		require.NotErrorIs(t, err, catalog.ErrUnavailable, "%s", call.name)
	}

	require.NoError(t, c.Stop(ctx))
	requireUnavailable(t, s, run.ID)

	require.NoError(t, c.Start(ctx))
	got, err := s.RunGet(ctx, run.ID)
	require.NoError(t, err, "after the restart")
	require.Equal(t, run.ID, got.ID)

	require.NoError(t, c.Kill())
	requireUnavailable(t, s, run.ID)
}

// TestUnavailableReadOnly: the database only reads, as a standby does, or a
// primary that a failover left behind (default_transaction_read_only stands in
// for it here: the failover itself is internal/e2e's TestFailover). A write
// fails with ErrUnavailable (SQLSTATE 25006), transient; and the connection
// that met it is not used again: once the database takes writes, the next write
// succeeds on a fresh connection, where the old one would still only read.
func TestUnavailableReadOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testenv.DatabaseURL(t)
	admin, err := sqlx.Open("postgres", url) // as the database's owner
	require.NoError(t, err)
	t.Cleanup(func() { _ = admin.Close() })
	var dbname string
	require.NoError(t, admin.GetContext(ctx, &dbname, `SELECT current_database()`))
	_, err = admin.ExecContext(ctx, `ALTER DATABASE `+dbname+` SET default_transaction_read_only = on`)
	require.NoError(t, err)

	s, err := catalog.Open(ctx, url, &catalog.Config{MaxOpenConns: 1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	// A statement of its own: a transaction of the catalog's begins READ WRITE,
	// which a standby refuses at BEGIN and this database does not.
	err = s.SessionDelete(ctx, bytes32(1))
	require.ErrorIs(t, err, catalog.ErrUnavailable)
	require.True(t, catalog.Transient(err))

	_, err = admin.ExecContext(ctx, `ALTER DATABASE `+dbname+` RESET default_transaction_read_only`)
	require.NoError(t, err)
	require.NoError(t, s.SessionDelete(ctx, bytes32(1)), "the connection that only read was discarded")
}

// bytes32 is 32 bytes of b.
func bytes32(b byte) []byte {
	out := make([]byte, 32)
	for i := range out {
		out[i] = b
	}
	return out
}

package api_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/api"
	"github.com/cairnrun/cairn/blobstore"
	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/internal/testenv"
)

// countingConnector counts the statements its connections run.
type countingConnector struct {
	driver.Connector
	n *atomic.Int64
}

func (c countingConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: conn, n: c.n}, nil
}

// countingConn forwards what lib/pq's connection implements, counting queries and
// execs.
type countingConn struct {
	driver.Conn
	n *atomic.Int64
}

func (c *countingConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	c.n.Add(1)
	return c.Conn.(driver.QueryerContext).QueryContext(ctx, q, args)
}

func (c *countingConn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	c.n.Add(1)
	return c.Conn.(driver.ExecerContext).ExecContext(ctx, q, args)
}

func (c *countingConn) PrepareContext(ctx context.Context, q string) (driver.Stmt, error) {
	return c.Conn.(driver.ConnPrepareContext).PrepareContext(ctx, q)
}

func (c *countingConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	return c.Conn.(driver.ConnBeginTx).BeginTx(ctx, opts)
}

func (c *countingConn) Ping(ctx context.Context) error { return c.Conn.(driver.Pinger).Ping(ctx) }

func (c *countingConn) CheckNamedValue(nv *driver.NamedValue) error {
	return c.Conn.(driver.NamedValueChecker).CheckNamedValue(nv)
}

func (c *countingConn) ResetSession(ctx context.Context) error {
	return c.Conn.(driver.SessionResetter).ResetSession(ctx)
}

func (c *countingConn) IsValid() bool { return c.Conn.(driver.Validator).IsValid() }

// TestStreamsOfOneRunSharePolls: the live streams of one run wake together
// and share their polls of the catalog, so fifty streams cost about what one does,
// not fifty times as much (each polled twice every 100 ms before).
func TestStreamsOfOneRunSharePolls(t *testing.T) {
	t.Parallel()
	const streams = 50
	connector, err := pq.NewConnector(testenv.DatabaseURL(t))
	require.NoError(t, err)
	var queries atomic.Int64
	db := sqlx.NewDb(sql.OpenDB(countingConnector{Connector: connector, n: &queries}), "postgres")
	t.Cleanup(func() { db.Close() })
	store := catalog.New(db, nil)
	blobs, err := blobstore.NewFile(t.TempDir(), nil)
	require.NoError(t, err)
	tokens, err := api.ParseTokens("operator:" + operatorToken)
	require.NoError(t, err)
	hs := httptest.NewServer(api.New(store, blobs, &api.Config{Tokens: tokens}).Handler())
	t.Cleanup(hs.Close)
	tb := &testBundle{store: store, url: hs.URL}
	id := tb.makeRun(t) // pending: its streams stay open, polling

	var open []*http.Response
	for range streams {
		resp := tb.openStream(t, id)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		open = append(open, resp)
	}
	defer func() {
		for _, r := range open {
			r.Body.Close()
		}
	}()
	// Measuring one second of steady state, once every stream is open.
	before := queries.Load()
	time.Sleep(time.Second)
	n := queries.Load() - before
	t.Logf("%d streams: %d statements in 1 s", streams, n)
	// Alone, each stream polls 10 times a second with two statements (events, run):
	// 1,000. Shared: about 20.
	require.Less(t, n, int64(100))
}

package catalog

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/lib/pq"
	"github.com/lib/pq/pqerror"
)

// After a failover the URL may lead to a server that only reads: the old
// primary back as a standby, a host name that still names it, a pooler not yet
// repointed. Its writes fail with SQLSTATE 25006 (read_only_sql_transaction),
// which the catalog reports as ErrUnavailable (isUnavailable), and the
// connection that got it is discarded instead of going back to the pool: the
// next call dials again and may reach the new primary (with a multi-host URL and
// target_session_attrs=read-write, lib/pq skips servers that only read). lib/pq
// keeps such a connection as good, so the pool's connections are wrapped
// (readOnlyConn) to report it bad to database/sql.

// connector opens lib/pq connections that database/sql discards once they have
// met a read-only server, each running the statements setup first.
type connector struct {
	pq    *pq.Connector
	setup []string
}

// newConnector is a connector for dsn (a lib/pq URL or DSN) whose connections
// run setup first.
func newConnector(dsn string, setup ...string) (*connector, error) {
	c, err := pq.NewConnector(dsn)
	if err != nil {
		return nil, err
	}
	return &connector{pq: c, setup: setup}, nil
}

// Connect implements driver.Connector.
func (c *connector) Connect(ctx context.Context) (driver.Conn, error) {
	dc, err := c.pq.Connect(ctx)
	if err != nil {
		return nil, err
	}
	pc, ok := dc.(pqConn)
	if !ok {
		_ = dc.Close()
		return nil, fmt.Errorf("lib/pq connection %T lacks the methods the catalog uses", dc)
	}
	for _, q := range c.setup {
		if _, err := pc.ExecContext(ctx, q, nil); err != nil {
			_ = pc.Close()
			return nil, fmt.Errorf("set up a connection (%s): %w", q, err)
		}
	}
	return &readOnlyConn{pqConn: pc}, nil
}

// Driver implements driver.Connector.
func (c *connector) Driver() driver.Driver { return c.pq.Driver() }

// pqConn is what database/sql uses of a lib/pq connection.
type pqConn interface {
	driver.Conn
	driver.ConnBeginTx
	driver.ConnPrepareContext
	driver.QueryerContext
	driver.ExecerContext
	driver.Pinger
	driver.NamedValueChecker
	driver.SessionResetter
	driver.Validator
}

// readOnlyConn is a lib/pq connection that turns bad once a statement on it
// failed because its server only reads.
type readOnlyConn struct {
	pqConn
	readOnly atomic.Bool
}

// note marks the connection bad when err says its server only reads, and
// returns err.
func (c *readOnlyConn) note(err error) error {
	if isReadOnly(err) {
		c.readOnly.Store(true)
	}
	return err
}

// isReadOnly reports whether err is SQLSTATE 25006: a write on a server in
// recovery (a standby) or in a read-only transaction.
func isReadOnly(err error) bool {
	var pqErr *pq.Error
	return errors.As(err, &pqErr) && pqErr.Code == pqerror.ReadOnlySQLTransaction
}

func (c *readOnlyConn) IsValid() bool { return !c.readOnly.Load() && c.pqConn.IsValid() }

func (c *readOnlyConn) ResetSession(ctx context.Context) error {
	if c.readOnly.Load() {
		return driver.ErrBadConn
	}
	return c.pqConn.ResetSession(ctx)
}

func (c *readOnlyConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	r, err := c.pqConn.ExecContext(ctx, query, args)
	return r, c.note(err)
}

func (c *readOnlyConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	r, err := c.pqConn.QueryContext(ctx, query, args)
	if err != nil {
		return nil, c.note(err)
	}
	return &readOnlyRows{Rows: r, c: c}, nil
}

func (c *readOnlyConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	st, err := c.pqConn.PrepareContext(ctx, query)
	if err != nil {
		return nil, c.note(err)
	}
	ps, ok := st.(pqStmt)
	if !ok {
		return st, nil
	}
	return &readOnlyStmt{pqStmt: ps, c: c}, nil
}

func (c *readOnlyConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	tx, err := c.pqConn.BeginTx(ctx, opts)
	if err != nil {
		return nil, c.note(err)
	}
	return &readOnlyTx{Tx: tx, c: c}, nil
}

// readOnlyTx notes the error of a commit (a deferred constraint's write, say).
type readOnlyTx struct {
	driver.Tx
	c *readOnlyConn
}

func (t *readOnlyTx) Commit() error { return t.c.note(t.Tx.Commit()) }

// readOnlyRows notes the error of a row: a statement that writes fails as it
// runs, after its columns were described.
type readOnlyRows struct {
	driver.Rows
	c *readOnlyConn
}

func (r *readOnlyRows) Next(dest []driver.Value) error { return r.c.note(r.Rows.Next(dest)) }

// pqStmt is what database/sql uses of a lib/pq prepared statement.
type pqStmt interface {
	driver.Stmt
	driver.StmtExecContext
	driver.StmtQueryContext
}

// readOnlyStmt notes the errors of a prepared statement.
type readOnlyStmt struct {
	pqStmt
	c *readOnlyConn
}

func (s *readOnlyStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	r, err := s.pqStmt.ExecContext(ctx, args)
	return r, s.c.note(err)
}

func (s *readOnlyStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	r, err := s.pqStmt.QueryContext(ctx, args)
	if err != nil {
		return nil, s.c.note(err)
	}
	return &readOnlyRows{Rows: r, c: s.c}, nil
}

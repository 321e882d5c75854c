package catalog

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"
)

// Prepared statements for the API's hottest requests (create-run, get-run) and
// the dispatcher's path from one step to the next (the claim's candidates and
// claim, the finish of successes and the lease of their dependents, the check
// for conditions to decide): one round trip each, and no planning, which one
// step after another waits for (bench/results/issue18-perf-before-after.md,
// "step-to-step latency").
//
// lib/pq runs a statement with parameters in two round trips: Parse and Describe
// of an unnamed statement, then Bind and Execute; and PostgreSQL plans it again
// every time. A statement prepared once on the pool (database/sql prepares it on
// each connection the first time that connection runs it) is one round trip, Bind
// and Execute, and its plan is kept. Only a few statements are prepared, each a
// constant of this package, so the cache is bounded by their number.
//
// A prepared statement outlives a migration that changes the columns it returns
// ("cached plan must not change result type"): such a statement is dropped from
// the cache and the call is run again unprepared, once.

// In transaction pooling (Config.TransactionPooling: the URL goes through a
// pooler such as PgBouncer in pool_mode=transaction, where consecutive
// transactions of one client connection may run on different server
// connections) nothing is prepared: a named statement would exist on one server
// connection only, and lib/pq's unnamed statements with parameters, prepared in
// one round trip and run in the next, could be run on another. Open makes lib/pq
// send each statement with its parameters in one message instead
// (binary_parameters), so every call is one round trip still, but planned each
// time.

// stmt is a statement to run with its arguments: prepared on the pool (a
// *sqlx.Stmt) or, in transaction pooling, sent whole each time (unprepared).
type stmt interface {
	GetContext(ctx context.Context, dest any, args ...any) error
	SelectContext(ctx context.Context, dest any, args ...any) error
	QueryRowxContext(ctx context.Context, args ...any) *sqlx.Row
}

// unprepared is a stmt that sends its query with every call, on q (the pool or
// a transaction).
type unprepared struct {
	q     sqlx.QueryerContext
	query string
}

func (u unprepared) GetContext(ctx context.Context, dest any, args ...any) error {
	return sqlx.GetContext(ctx, u.q, dest, u.query, args...)
}

func (u unprepared) SelectContext(ctx context.Context, dest any, args ...any) error {
	return sqlx.SelectContext(ctx, u.q, dest, u.query, args...)
}

func (u unprepared) QueryRowxContext(ctx context.Context, args ...any) *sqlx.Row {
	return u.q.QueryRowxContext(ctx, u.query, args...)
}

// preparedCache maps a query to its statement on the pool.
type preparedCache struct {
	mu    sync.Mutex
	stmts map[string]*sqlx.Stmt
}

// prepared returns query prepared on the pool, preparing it on first use; in
// transaction pooling, query unprepared.
func (s *Store) prepared(ctx context.Context, query string) (stmt, error) {
	if s.cfg.TransactionPooling {
		return unprepared{s.db, query}, nil
	}
	st, err := s.preparedOnPool(ctx, query)
	if err != nil {
		return nil, err
	}
	return st, nil
}

// preparedOnPool is prepared's statement on the pool.
func (s *Store) preparedOnPool(ctx context.Context, query string) (*sqlx.Stmt, error) {
	c := s.stmts
	c.mu.Lock()
	defer c.mu.Unlock()
	if st, ok := c.stmts[query]; ok {
		return st, nil
	}
	st, err := s.db.PreparexContext(ctx, query)
	if err != nil {
		return nil, err
	}
	if c.stmts == nil {
		c.stmts = map[string]*sqlx.Stmt{}
	}
	c.stmts[query] = st
	return st, nil
}

// forget drops query's statement (after a plan went stale).
func (s *Store) forget(query string) {
	c := s.stmts
	c.mu.Lock()
	st := c.stmts[query]
	delete(c.stmts, query)
	c.mu.Unlock()
	if st != nil {
		_ = st.Close()
	}
}

// closePrepared closes every prepared statement.
func (c *preparedCache) closeAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for q, st := range c.stmts {
		_ = st.Close()
		delete(c.stmts, q)
	}
}

// stalePlan reports the error of a prepared statement whose result columns a
// migration changed since it was prepared.
func stalePlan(err error) bool {
	var pqErr *pq.Error
	return errors.As(err, &pqErr) && pqErr.Code == "0A000" && pqErr.Message == "cached plan must not change result type"
}

// getPrepared is GetContext through query's prepared statement; it falls back to
// an unprepared call when the statement cannot be prepared or its plan is stale.
func (s *Store) getPrepared(ctx context.Context, dest any, query string, args ...any) error {
	return s.runPrepared(ctx, query, stmt.GetContext, s.db.GetContext, dest, args)
}

// selectPrepared is getPrepared for SelectContext (rows into a slice).
func (s *Store) selectPrepared(ctx context.Context, dest any, query string, args ...any) error {
	return s.runPrepared(ctx, query, stmt.SelectContext, s.db.SelectContext, dest, args)
}

// runPrepared runs query through its prepared statement (prepared), or
// unprepared (direct) when it cannot be prepared or its plan went stale.
func (s *Store) runPrepared(ctx context.Context, query string,
	prepared func(stmt, context.Context, any, ...any) error,
	direct func(context.Context, any, string, ...any) error,
	dest any, args []any,
) error {
	st, err := s.prepared(ctx, query)
	if err == nil {
		err = prepared(st, ctx, dest, args...)
		if !stalePlan(err) {
			return err
		}
		s.forget(query)
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return direct(ctx, dest, query, args...)
}

// pooledQueryer is the pool as runCreateTx's queryer, for a run created outside a
// transaction: its GetContext goes through prepared statements.
type pooledQueryer struct {
	*sqlx.DB
	s *Store
}

func (q pooledQueryer) GetContext(ctx context.Context, dest any, query string, args ...any) error {
	return q.s.getPrepared(ctx, dest, query, args...)
}

// txPrepared returns query's prepared statement bound to tx (prepared on tx's
// connection the first time that connection runs it, then kept); in
// transaction pooling, query unprepared on tx. A statement whose plan went stale
// fails the transaction: see retryStale.
func (s *Store) txPrepared(ctx context.Context, tx *sqlx.Tx, query string) (stmt, error) {
	if s.cfg.TransactionPooling {
		return unprepared{tx, query}, nil
	}
	st, err := s.preparedOnPool(ctx, query)
	if err != nil {
		return nil, err
	}
	return tx.StmtxContext(ctx, st), nil
}

// retryStale turns the error of query's prepared statement whose plan went stale
// into ErrRetryable, after dropping the statement: inTx runs the transaction
// again, and the statement is prepared anew.
func (s *Store) retryStale(query string, err error) error {
	if stalePlan(err) {
		s.forget(query)
		return fmt.Errorf("%w: %w", ErrRetryable, err)
	}
	return err
}

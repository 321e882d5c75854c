package catalog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	neturl "net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jmoiron/sqlx"
	_ "github.com/lib/pq" // the "postgres" driver
)

// Config tunes a Store. A nil *Config means all defaults.
type Config struct {
	// Logger receives the store's logs; default: a logger that discards.
	Logger *slog.Logger
	// MaxOpenConns bounds the connection pool; default 20.
	MaxOpenConns int
	// MaxIdleConns bounds idle connections kept; default MaxOpenConns.
	MaxIdleConns int
	// ConnMaxLifetime recycles connections; default 30 minutes.
	ConnMaxLifetime time.Duration
	// TxRetries is how many times inTx re-runs a transaction that failed with
	// ErrRetryable; default 5.
	TxRetries int
	// TransactionPooling says the database URL goes through a pooler in
	// transaction mode (PgBouncer's pool_mode=transaction), where consecutive
	// transactions of one connection may run on different server connections:
	// nothing is prepared (prepared.go), and Open has lib/pq send each statement
	// with its parameters in one message (binary_parameters). Default false.
	TransactionPooling bool
	// BinaryVersion names the binary in the servers' registry
	// (DispatcherBeat), so that `cairn servers` shows which versions run
	// during a rolling upgrade; default none.
	BinaryVersion string
	// IdempotencyTTL is how long an idempotency key of a run's creation holds:
	// past it, the key starts a new run (retention.go); default
	// DefaultIdempotencyTTL. A schedule's fire keys never expire. Received events
	// are kept as long (ReceivedEventsExpire).
	IdempotencyTTL time.Duration
}

func (c *Config) withDefaults() Config {
	var out Config
	if c != nil {
		out = *c
	}
	if out.Logger == nil {
		out.Logger = slog.New(slog.DiscardHandler)
	}
	if out.MaxOpenConns <= 0 {
		out.MaxOpenConns = 20
	}
	if out.MaxIdleConns <= 0 {
		out.MaxIdleConns = out.MaxOpenConns
	}
	if out.ConnMaxLifetime <= 0 {
		out.ConnMaxLifetime = 30 * time.Minute
	}
	if out.IdempotencyTTL <= 0 {
		out.IdempotencyTTL = DefaultIdempotencyTTL
	}
	if out.TxRetries <= 0 {
		out.TxRetries = 5
	}
	return out
}

// Store is the catalog. It is safe for concurrent use.
type Store struct {
	db *sqlx.DB
	// leaseDB carries the heartbeats (LeaseExtend): a pool of its own (Open),
	// so that a renewal never waits for a connection behind the claims and
	// finishes of a busy dispatcher, whose leases it must keep. db itself for
	// a Store made by New.
	leaseDB *sqlx.DB
	// dispatch carries the dispatcher's claims and finishes (StepClaimNext's
	// claim in one statement, StepFinishClaim): a Store on a pool of its own
	// whose connections plan prepared statements generically from their first
	// call (Open: dispatchSetup). s itself for a Store made by New, and in
	// transaction pooling, where nothing is prepared.
	dispatch *Store
	cfg      Config
	stmts    *preparedCache
	// fair caches whether claims take turns between concurrency keys
	// (fairClaims).
	fair fairCache
	// limitedUntil is when claims try sqlClaimAlone again (unix nanoseconds)
	// after one fell back because a candidate had a rate limit.
	limitedUntil atomic.Int64
	// quotaUntil is until when claims in one statement apply the namespaces'
	// quotas (sqlClaimAloneQuota, unix nanoseconds), after one found a candidate
	// of a namespace with a quota.
	quotaUntil atomic.Int64
	// wakes sends the dispatchers' wake-ups asked for after a commit (RunCreate).
	wakes waker
	// creating counts the RunCreate calls under way.
	creating atomic.Int64
	// ownKeys caches whether large payloads may be written under keys of their
	// own (BlobIndex).
	ownKeys ownKeysCache
}

// Open connects to the database at url (a lib/pq URL or DSN) and returns a Store. It
// does not check the schema: see CheckSchema.
func Open(ctx context.Context, url string, cfg *Config) (*Store, error) {
	if cfg != nil && cfg.TransactionPooling {
		var err error
		if url, err = withOneMessageStatements(url); err != nil {
			return nil, fmt.Errorf("open database: %w", err)
		}
	}
	db, err := openPool(url)
	if err != nil {
		return nil, err
	}
	s := New(db, cfg)
	if err := s.Ping(ctx); err != nil {
		db.Close()
		return nil, err
	}
	lease, err := openPool(url)
	if err != nil {
		db.Close()
		return nil, err
	}
	// Two connections: a heartbeat whose statement was cut by its deadline may
	// leave its connection to be reset while the next one starts.
	lease.SetMaxOpenConns(leaseConns)
	lease.SetMaxIdleConns(leaseConns)
	lease.SetConnMaxLifetime(s.cfg.ConnMaxLifetime)
	s.leaseDB = lease
	if !s.cfg.TransactionPooling {
		hot, err := openPool(url, dispatchSetup)
		if err != nil {
			lease.Close()
			db.Close()
			return nil, err
		}
		hot.SetMaxOpenConns(dispatchConns)
		hot.SetMaxIdleConns(dispatchConns)
		hot.SetConnMaxLifetime(s.cfg.ConnMaxLifetime)
		s.dispatch = &Store{db: hot, leaseDB: lease, cfg: s.cfg, stmts: &preparedCache{}}
		s.dispatch.dispatch = s.dispatch
		s.dispatch.wakes.send = s.wakes.send
	}
	return s, nil
}

// The dispatch pool (Store.dispatch): a dispatcher claims in one statement and
// commits its outcomes in one batch at a time, so it uses two connections at
// once; dispatchConns leaves room for a second dispatcher on the same Store.
//
// Its connections start with dispatchSetup: the statements they prepare (the
// claim, prepared once for each power of two of its batch, the finish, the
// lease of dependents) and the catalog functions those call are planned
// generically from their first call. PostgreSQL's default plans a prepared
// statement afresh for its first five calls on each connection before it keeps
// the generic plan, and the functions' statements likewise: in the bench's
// throughput rounds of fresh servers, 0.018–0.024 plans a step (0.012–0.021 ms
// of PostgreSQL's ≈ 0.25 ms), against 0.008–0.012 (0.005–0.011 ms) on this
// pool (bench/README.md, "Throughput: where PostgreSQL's time goes"). The
// claim's candidates are a constant LIMIT (claimAloneQuery), so its generic
// plan is its custom one, and the finish was written for generic plans
// (catalog/sql/steps.sql). The main pool keeps the default: there lib/pq's
// unnamed statements (the API's searches, with their optional filters) are
// planned for their values.
const (
	dispatchConns = 4
	dispatchSetup = "SET plan_cache_mode = force_generic_plan"
)

// openPool is a pool of connections to url that are discarded once they meet a
// read-only server (conn.go).
// Each new connection runs setup first, when given.
func openPool(url string, setup ...string) (*sqlx.DB, error) {
	c, err := newConnector(url, setup...)
	if err != nil {
		return nil, fmt.Errorf("open database: %w", err)
	}
	return sqlx.NewDb(sql.OpenDB(c), "postgres"), nil
}

// withOneMessageStatements is url (a URL or a key=value DSN) with lib/pq's
// binary_parameters=yes: a statement with parameters is sent in one message
// (Parse, Bind, Execute, Sync) instead of being prepared as the unnamed
// statement in one round trip and run in the next, between which a
// transaction-mode pooler may hand the connection's server to another client.
// With it lib/pq sends []byte arguments in binary format: the catalog passes
// JSON documents as text (JSON.Value) and []byte only to bytea columns.
func withOneMessageStatements(url string) (string, error) {
	if strings.HasPrefix(url, "postgres://") || strings.HasPrefix(url, "postgresql://") {
		u, err := neturl.Parse(url)
		if err != nil {
			return "", fmt.Errorf("parse the database URL: %w", err)
		}
		q := u.Query()
		q.Set("binary_parameters", "yes")
		u.RawQuery = q.Encode()
		return u.String(), nil
	}
	return url + " binary_parameters=yes", nil
}

// leaseConns is the size of a Store's lease pool (Store.leaseDB).
const leaseConns = 2

// New wraps an open database handle and applies the pool settings of cfg.
func New(db *sqlx.DB, cfg *Config) *Store {
	c := cfg.withDefaults()
	db.SetMaxOpenConns(c.MaxOpenConns)
	db.SetMaxIdleConns(c.MaxIdleConns)
	db.SetConnMaxLifetime(c.ConnMaxLifetime)
	s := &Store{db: db, leaseDB: db, cfg: c, stmts: &preparedCache{}}
	s.dispatch = s
	s.wakes.send = func(ctx context.Context) error {
		_, err := s.db.ExecContext(ctx, sqlWake)
		if err != nil {
			s.cfg.Logger.DebugContext(ctx, "wake-up not sent: the dispatchers find the steps at their next poll", "error", err)
		}
		return err
	}
	return s
}

// DB returns the underlying handle, for tests that prepare or inspect rows by hand;
// production code goes through the Store's methods.
func (s *Store) DB() *sqlx.DB { return s.db }

// Close closes the connection pool.
func (s *Store) Close() error {
	s.stmts.closeAll()
	if s.dispatch != s {
		s.dispatch.stmts.closeAll()
		_ = s.dispatch.db.Close() // its connections only claim and finish
	}
	if s.leaseDB != s.db {
		_ = s.leaseDB.Close() // its connections only carry heartbeats
	}
	return s.db.Close()
}

// Ping checks that the database answers; ErrUnavailable if it cannot be reached.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.db.PingContext(ctx); err != nil {
		return fmt.Errorf("ping database: %w", translateError(err))
	}
	return nil
}

// inTx runs fn in a transaction and commits it, or rolls back when fn fails. A
// transaction that fails with ErrRetryable is run again, up to Config.TxRetries
// times, so fn must not have effects outside the transaction.
func (s *Store) inTx(ctx context.Context, fn func(tx *sqlx.Tx) error) error {
	var err error
	for i := 0; ; i++ {
		err = s.inTxOnce(ctx, fn)
		if err == nil || !errors.Is(err, ErrRetryable) || i >= s.cfg.TxRetries || ctx.Err() != nil {
			return err
		}
		s.cfg.Logger.DebugContext(ctx, "retrying transaction", "error", err, "try", i+1)
	}
}

// retrying runs fn, a statement that is a transaction of its own, again when it
// fails with ErrRetryable, as inTx does (fn translates its errors).
func (s *Store) retrying(ctx context.Context, fn func() error) error {
	var err error
	for i := 0; ; i++ {
		err = fn()
		if err == nil || !errors.Is(err, ErrRetryable) || i >= s.cfg.TxRetries || ctx.Err() != nil {
			return err
		}
		s.cfg.Logger.DebugContext(ctx, "retrying transaction", "error", err, "try", i+1)
	}
}

func (s *Store) inTxOnce(ctx context.Context, fn func(tx *sqlx.Tx) error) (err error) {
	tx, err := s.db.BeginTxx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin transaction: %w", translateError(err))
	}
	defer func() {
		if err != nil {
			// The rollback must happen even when ctx is canceled.
			_ = tx.Rollback()
		}
	}()
	if err = fn(tx); err != nil {
		return translateError(err)
	}
	// The audit record of the API's write, in its transaction (audit.go).
	audited, err := auditInTx(ctx, tx)
	if err != nil {
		return translateError(err)
	}
	err = tx.Commit()
	audited(err == nil)
	if err != nil {
		return fmt.Errorf("commit: %w", translateError(err))
	}
	return nil
}

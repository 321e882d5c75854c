package catalog

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jmoiron/sqlx"
)

// The audit log (docs/security.md, "Audit log") records who did what through the
// API: one row per write. The API puts an Audit in the context of every write it
// serves (WithAudit); the first transaction of that context which writes anything
// (inTxOnce) inserts the row before it commits, so the record and the write commit
// together or not at all: a transaction that rolls back (and is retried, or
// fails) leaves no record, and a retried one that commits leaves one. A write the
// API refuses (a 4xx problem) writes nothing of its own: the API records its
// outcome with AuditRecord.

const (
	auditColumns = `seq, at, actor, role, namespace, action, target, request_id, outcome, code`

	// sqlAuditInTx inserts the record of a transaction's write, only if the
	// transaction wrote something: pg_current_xact_id_if_assigned() is NULL until
	// a transaction changes or locks a row (evaluated here before this row is
	// inserted), so a transaction that only read records nothing and leaves the
	// record to the context's next one.
	sqlAuditInTx = `
INSERT INTO audit_log (actor, role, namespace, action, target, request_id, outcome, code)
SELECT $1, $2, $3, $4, $5, $6, 'ok', ''
WHERE pg_current_xact_id_if_assigned() IS NOT NULL`

	sqlAuditInsert = `
INSERT INTO audit_log (actor, role, namespace, action, target, request_id, outcome, code)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`

	// sqlAuditList pages the log newest first ($5: before this seq; 0 none).
	sqlAuditList = `SELECT ` + auditColumns + ` FROM audit_log
WHERE ($1::timestamptz IS NULL OR at >= $1) AND ($2::timestamptz IS NULL OR at < $2)
  AND ($3 = '' OR actor = $3) AND ($4 = '' OR action = $4) AND ($5 <= 0 OR seq < $5)
ORDER BY seq DESC LIMIT $6`

	// sqlAuditRange pages the log oldest first ($3: after this seq), for exports.
	sqlAuditRange = `SELECT ` + auditColumns + ` FROM audit_log
WHERE ($1::timestamptz IS NULL OR at >= $1) AND ($2::timestamptz IS NULL OR at < $2) AND seq > $3
ORDER BY seq LIMIT $4`

	// sqlAuditExpire deletes up to $2 records older than $1 seconds, oldest first.
	sqlAuditExpire = `
DELETE FROM audit_log a USING (
    SELECT seq FROM audit_log WHERE at < now() - make_interval(secs => $1)
    ORDER BY at LIMIT $2 FOR UPDATE SKIP LOCKED) old
WHERE a.seq = old.seq`
)

// Outcomes of an audit record.
const (
	AuditOK     = "ok"
	AuditFailed = "failed"
)

// AuditRecord is a row of the audit log.
type AuditRecord struct {
	// Seq orders the log (and its cursor).
	Seq int64 `db:"seq" json:"seq"`
	// At is when the write's transaction began (or the refusal was recorded).
	At time.Time `db:"at" json:"at"`
	// Actor is the name of the token (Identity.Name in package api).
	Actor string `db:"actor" json:"actor"`
	// Role is the token's role then.
	Role string `db:"role" json:"role"`
	// Namespace is the namespace the write acted in; nil for a write of none.
	Namespace *string `db:"namespace" json:"namespace,omitempty"`
	// Action is what was done: the API operation's ID ("cancelRun") or "uiLogin".
	Action string `db:"action" json:"action"`
	// Target names what it was done to: the operation's path parameters
	// ("id=0193…", "name=deploy alias=prod"); "" when it has none.
	Target string `db:"target" json:"target"`
	// RequestID is the request's X-Request-Id.
	RequestID string `db:"request_id" json:"request_id"`
	// Outcome is AuditOK or AuditFailed.
	Outcome string `db:"outcome" json:"outcome"`
	// Code is a failed write's problem code ("run_finished"); "" when ok.
	Code string `db:"code" json:"code,omitempty"`
}

// Audit is the pending record of one write, carried by its context (WithAudit)
// until a transaction records it. It is safe for concurrent use: of two
// transactions of one context, one records it.
type Audit struct {
	// Actor, Role, Action, Target and RequestID fill the record (AuditRecord).
	Actor, Role, Action, Target, RequestID string
	// Namespace is the namespace the write acted in; nil: none (a write of
	// every namespace, such as a UI login).
	Namespace *string
	// Code is the problem code of a refused write, set by the API before it
	// records the failure.
	Code string

	// mu is held from the insert of the record to the end of its transaction, so
	// that a second transaction of the context sees whether the first committed.
	mu       sync.Mutex
	recorded bool
}

// Recorded reports whether a committed transaction holds the record.
func (a *Audit) Recorded() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.recorded
}

type auditKey struct{}

// WithAudit returns ctx carrying a: the first transaction of the Store run under
// it that writes records a in the audit log (see the top of audit.go).
func WithAudit(ctx context.Context, a *Audit) context.Context {
	return context.WithValue(ctx, auditKey{}, a)
}

// AuditOf returns the Audit ctx carries (WithAudit), or nil.
func AuditOf(ctx context.Context) *Audit {
	a, _ := ctx.Value(auditKey{}).(*Audit)
	return a
}

// auditInTx records the Audit of ctx, if it has one not yet recorded, in tx, if
// tx wrote anything. done must be called with whether tx committed; it releases
// the Audit for the context's other transactions.
func auditInTx(ctx context.Context, tx *sqlx.Tx) (done func(committed bool), err error) {
	a := AuditOf(ctx)
	if a == nil {
		return func(bool) {}, nil
	}
	a.mu.Lock()
	if a.recorded {
		a.mu.Unlock()
		return func(bool) {}, nil
	}
	res, err := tx.ExecContext(ctx, sqlAuditInTx, a.Actor, a.Role, a.Namespace, a.Action, a.Target, a.RequestID)
	if err != nil {
		a.mu.Unlock()
		return nil, fmt.Errorf("record the audit log: %w", err)
	}
	wrote, _ := res.RowsAffected()
	return func(committed bool) {
		a.recorded = committed && wrote == 1
		a.mu.Unlock()
	}, nil
}

// AuditRecordFailed records a's write as refused (outcome AuditFailed, a.Code),
// in a statement of its own: the write's transactions rolled back. It does
// nothing when a committed transaction recorded a already.
func (s *Store) AuditRecordFailed(ctx context.Context, a *Audit) error {
	return s.auditRecord(ctx, a, AuditFailed, a.Code)
}

// AuditRecordDone records a's write as done (AuditOK) in a statement of its own:
// for a write that changed nothing in the catalog (pausing a paused run), so no
// transaction of it recorded a. It does nothing when one did.
func (s *Store) AuditRecordDone(ctx context.Context, a *Audit) error {
	return s.auditRecord(ctx, a, AuditOK, "")
}

func (s *Store) auditRecord(ctx context.Context, a *Audit, outcome, code string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.recorded {
		return nil
	}
	if _, err := s.db.ExecContext(ctx, sqlAuditInsert, a.Actor, a.Role, a.Namespace, a.Action, a.Target, a.RequestID, outcome, code); err != nil {
		return fmt.Errorf("record the audit log: %w", translateError(err))
	}
	a.recorded = true
	return nil
}

// AuditListParams filters and pages AuditList.
type AuditListParams struct {
	// Since and Until bound At (Since included, Until not); zero: unbounded.
	Since, Until time.Time
	// Actor and Action, when set, must match exactly.
	Actor, Action string
	// Before pages: records with a lower Seq only; 0 from the newest.
	Before int64
	// Limit is at most 1000; default 100.
	Limit int
}

// AuditList returns audit records, newest first.
func (s *Store) AuditList(ctx context.Context, p AuditListParams) ([]AuditRecord, error) {
	if p.Limit <= 0 || p.Limit > 1000 {
		p.Limit = 100
	}
	var out []AuditRecord
	if err := s.db.SelectContext(ctx, &out, sqlAuditList, nullTime(p.Since), nullTime(p.Until), p.Actor, p.Action, p.Before, p.Limit); err != nil {
		return nil, fmt.Errorf("list the audit log: %w", translateError(err))
	}
	return out, nil
}

// AuditRange returns up to limit audit records At in [since, until) (zero:
// unbounded) after seq, oldest first: an export reads the log so, page by page.
func (s *Store) AuditRange(ctx context.Context, since, until time.Time, after int64, limit int) ([]AuditRecord, error) {
	var out []AuditRecord
	if err := s.db.SelectContext(ctx, &out, sqlAuditRange, nullTime(since), nullTime(until), after, limit); err != nil {
		return nil, fmt.Errorf("read the audit log: %w", translateError(err))
	}
	return out, nil
}

// AuditExpire deletes up to limit audit records older than keep, oldest first,
// and returns how many (the retention reaper, maintenance.Reaper).
func (s *Store) AuditExpire(ctx context.Context, keep time.Duration, limit int) (int, error) {
	res, err := s.db.ExecContext(ctx, sqlAuditExpire, keep.Seconds(), limit)
	if err != nil {
		return 0, fmt.Errorf("expire the audit log: %w", translateError(err))
	}
	n, _ := res.RowsAffected()
	return int(n), nil
}

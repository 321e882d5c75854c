package catalog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"

	"github.com/cairnrun/cairn/namespace"
)

// Quotas per namespace (docs/flow.md, "Quotas"): running_steps bounds the steps
// of a namespace's runs running at once across every server, runs_per_minute the
// runs its workflows start in any minute. Each is checked in the transaction that
// claims or creates, against the rows themselves, never a counter, so a crash
// leaves nothing behind (the rule of the concurrency slots, flow.go):
//   - running_steps: a step carries its run's namespace (steps.quota_ns, NULL in
//     default: migrations/00095_quotas.sql). The claim admits a step of a
//     namespace with the quota when the namespace's running steps, counted under
//     its advisory lock with the concurrency keys' (cairn_claim_usage), leave it
//     a slot (sqlQuotaAdmitted). The claim in one statement of steps of no such
//     namespace keeps its plan (sqlClaimAlone); one that meets a step of one
//     leases nothing, and the claims of the next second take sqlClaimAloneQuota
//     (lease.go). A finish leases no dependent of such a namespace
//     (sqlClaimDependents). The slot is the running step: the finish, suspend,
//     cancel or sweep that ends its lease frees it. A quota set or lowered binds
//     the ready steps at once; running steps keep running.
//   - runs_per_minute: the statement that creates a run counts the namespace's
//     runs of the last minute under the namespace's lock (cairn_run_quota) and
//     refuses one over the quota with QuotaError.
//
// The default namespace takes no quota (a check of namespaces): its steps and
// runs cost nothing more to claim and to create.

// ErrQuotaExceeded means a run was refused because its namespace created as many
// runs in the last minute as its runs_per_minute quota allows. The error is a
// *QuotaError.
var ErrQuotaExceeded = errors.New("catalog: quota exceeded")

// QuotaError is a creation refused by a namespace's quota. It wraps
// ErrQuotaExceeded.
type QuotaError struct {
	// Namespace is the namespace over its quota, Quota the quota's name
	// ("runs_per_minute"), Limit its value.
	Namespace string `json:"namespace"`
	Quota     string `json:"quota"`
	Limit     int    `json:"limit"`
	// RetryAfter is when a run may be created again, at the earliest.
	RetryAfter time.Duration `json:"-"`
}

func (e *QuotaError) Error() string {
	return fmt.Sprintf("namespace %s is over its %s quota (%d): retry in %s", e.Namespace, e.Quota, e.Limit, e.RetryAfter)
}

func (e *QuotaError) Unwrap() error { return ErrQuotaExceeded }

// sqlstateQuota: cairn_run_quota refused a run; DETAIL is the quota as JSON.
const sqlstateQuota pq.ErrorCode = "CA429"

// quotaError is the QuotaError of CA429 err raised by cairn_run_quota.
func quotaError(err *pq.Error) error {
	var d struct {
		QuotaError
		RetryAfter float64 `json:"retry_after"`
	}
	if json.Unmarshal([]byte(err.Detail), &d) != nil {
		return fmt.Errorf("%w: %w", ErrQuotaExceeded, err)
	}
	q := d.QuotaError
	q.RetryAfter = time.Duration(d.RetryAfter * float64(time.Second))
	return &q
}

// Quota names.
const (
	QuotaRunningSteps  = "running_steps"
	QuotaRunsPerMinute = "runs_per_minute"
)

// MaxQuota is the largest value of a quota.
const MaxQuota = 1_000_000

// NamespaceQuotas are the quotas of a namespace, and their use now.
type NamespaceQuotas struct {
	Namespace string `db:"name"`
	// RunningSteps and RunsPerMinute are the quotas; nil: none.
	RunningSteps  *int      `db:"running_steps"`
	RunsPerMinute *int      `db:"runs_per_minute"`
	UpdatedAt     time.Time `db:"updated_at"`
	UpdatedBy     string    `db:"updated_by"`
	// Running is the namespace's steps running now; RunsLastMinute the runs
	// created in the last minute (both 0 in default, which has no quota).
	Running        int `db:"running"`
	RunsLastMinute int `db:"runs_last_minute"`
}

// QuotaChange is a change to one quota: none unless Change; Limit 0 clears it.
type QuotaChange struct {
	Change bool
	Limit  int
}

// QuotaSetParams are the quotas QuotaSet changes.
type QuotaSetParams struct {
	RunningSteps  QuotaChange
	RunsPerMinute QuotaChange
}

const (
	// sqlQuotaGet reads a namespace's quotas and counts their use, each by its
	// index (steps_quota_running_idx, runs_namespace_created_idx).
	sqlQuotaGet = `
SELECT n.name, n.running_steps, n.runs_per_minute, n.updated_at, n.updated_by,
       (SELECT count(*) FROM steps r
        WHERE (r.status = 'running') IS TRUE AND r.quota_ns IS NOT NULL AND r.quota_ns = n.name) AS running,
       (SELECT count(*) FROM runs r
        WHERE strpos(r.workflow, '/') > 0 AND cairn_namespace(r.workflow) = n.name
          AND r.created_at > clock_timestamp() - interval '1 minute') AS runs_last_minute
FROM namespaces n WHERE n.name = $1`

	// sqlQuotaSet changes the quotas given ($2, $4: whether to change each; $3,
	// $5: the value, 0 for none) of namespace $1.
	sqlQuotaSet = `
UPDATE namespaces SET running_steps = CASE WHEN $2 THEN nullif($3::integer, 0) ELSE running_steps END,
    runs_per_minute = CASE WHEN $4 THEN nullif($5::integer, 0) ELSE runs_per_minute END,
    updated_at = now(), updated_by = $6
WHERE name = $1`
)

// QuotaGet returns the quotas of namespace ns and their use; ErrNotFound when no
// such namespace exists.
func (s *Store) QuotaGet(ctx context.Context, ns string) (*NamespaceQuotas, error) {
	var q NamespaceQuotas
	if err := s.db.GetContext(ctx, &q, sqlQuotaGet, ns); err != nil {
		return nil, fmt.Errorf("get quotas of namespace %s: %w", ns, translateError(err))
	}
	return &q, nil
}

// QuotaSet changes the quotas of namespace ns (p: those with Change; a Limit of 0
// clears one) on behalf of actor and returns them as they are then, in one
// transaction (with the audit record of the API's write, audit.go). A lower or new
// running_steps holds back the next claims: running steps keep running. Errors:
// ErrNotFound for no such namespace; ErrInvalidInput for no change, a limit out of
// 0..MaxQuota, or a quota on the default namespace (which takes none).
func (s *Store) QuotaSet(ctx context.Context, ns string, p QuotaSetParams, actor string) (*NamespaceQuotas, error) {
	switch {
	case !p.RunningSteps.Change && !p.RunsPerMinute.Change:
		return nil, fmt.Errorf("set quotas of namespace %s: %w: give running_steps, runs_per_minute, or both", ns, ErrInvalidInput)
	case p.RunningSteps.Limit < 0 || p.RunningSteps.Limit > MaxQuota:
		return nil, fmt.Errorf("set quotas of namespace %s: %w: running_steps %d is not within 1..%d", ns, ErrInvalidInput,
			p.RunningSteps.Limit, MaxQuota)
	case p.RunsPerMinute.Limit < 0 || p.RunsPerMinute.Limit > MaxQuota:
		return nil, fmt.Errorf("set quotas of namespace %s: %w: runs_per_minute %d is not within 1..%d", ns, ErrInvalidInput,
			p.RunsPerMinute.Limit, MaxQuota)
	case ns == namespace.Default && (p.RunningSteps.Limit > 0 || p.RunsPerMinute.Limit > 0):
		return nil, fmt.Errorf("set quotas of namespace %s: %w: the default namespace takes no quota (bound its workflows with concurrency limits)",
			ns, ErrInvalidInput)
	}
	var out *NamespaceQuotas
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		res, err := tx.ExecContext(ctx, sqlQuotaSet, ns, p.RunningSteps.Change, p.RunningSteps.Limit,
			p.RunsPerMinute.Change, p.RunsPerMinute.Limit, actor)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return ErrNotFound
		}
		out = &NamespaceQuotas{}
		return tx.GetContext(ctx, out, sqlQuotaGet, ns)
	})
	if err != nil {
		return nil, fmt.Errorf("set quotas of namespace %s: %w", ns, err)
	}
	return out, nil
}

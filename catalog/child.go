package catalog

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"
)

// Child runs (docs/functions.md, "Child runs"): a workflow step starts a run of
// another workflow and suspends until it ends. catalog/sql links the two:
// cairn_child_suspend (maps_children.sql), and the triggers that resolve the
// parent's step when the child ends and make children follow their parent's
// cancel, pause and resume (triggers.sql).

const (
	sqlChildSuspend = `SELECT cairn_child_suspend($1, $2, $3, $4)
WHERE cairn_runs_share(ARRAY[$1::uuid])`

	// sqlRunAncestry is how many ancestors the run $1 has (0 for a run without a
	// parent), through parent_id, and the farthest one (its tree's root, or $1
	// itself), followed up to $2 + 1 levels (a cycle cannot exist: children are
	// created after their parent, but the bound costs nothing).
	sqlRunAncestry = `
WITH RECURSIVE up(id, parent_id, depth) AS (
    SELECT id, parent_id, 0 FROM runs WHERE id = $1
    UNION ALL
    SELECT r.id, r.parent_id, up.depth + 1 FROM runs r JOIN up ON r.id = up.parent_id WHERE up.depth <= $2
)
SELECT depth, id AS root FROM up ORDER BY depth DESC LIMIT 1`

	// sqlTreeGrow counts one more child run in the tree of root $1 (run_trees),
	// and returns how many it has now; no row when the tree has no count yet.
	sqlTreeGrow = `UPDATE run_trees SET runs = runs + 1 WHERE root_id = $1 RETURNING runs`
	// sqlTreeStart gives the tree of root $1 its count: its child runs so far (a
	// tree that grew before run_trees existed), the new one included. A count
	// made meanwhile by another transaction grows instead.
	sqlTreeStart = `
INSERT INTO run_trees AS t (root_id, runs)
SELECT $1, count(*) + 1 FROM (
    WITH RECURSIVE down(id) AS (
        SELECT id FROM runs WHERE parent_id = $1 AND parent_step IS NOT NULL
        UNION ALL
        SELECT r.id FROM runs r JOIN down ON r.parent_id = down.id WHERE r.parent_step IS NOT NULL
    )
    SELECT id FROM down
) d
ON CONFLICT (root_id) DO UPDATE SET runs = t.runs + 1
RETURNING runs`

	// sqlChildCount is how many child runs the run $1's steps started.
	sqlChildCount = `SELECT count(*) FROM runs WHERE parent_id = $1 AND parent_step IS NOT NULL`

	// sqlChildLatest is the newest child run the step $2 of run $1 started. It is
	// not locked here: a retry of it takes its locks in the lock order of
	// catalog/sql/run_control.sql (its parent's advisory lock, its own, its steps,
	// its row), and the suspend that follows locks its row.
	sqlChildLatest = `
SELECT id, status FROM runs WHERE parent_id = $1 AND parent_step = $2 ORDER BY id DESC LIMIT 1`

	sqlChildRetry = `SELECT cairn_run_retry($1, 0, $2)`

	// sqlChildWorkflowShare locks the child's workflow's row, FOR KEY SHARE, as a
	// run's creation does: ChildStart takes it first, then the parent's shared lock
	// (sqlRunShare), in the order of catalog/sql/run_control.sql (a workflow's row,
	// then the runs' advisory locks, then rows: the child's row refers to its
	// parent's).
	sqlChildWorkflowShare = `SELECT 1 FROM workflows WHERE name = $1 FOR KEY SHARE`
)

// ErrChildLimit means a child run would go over a limit of ChildStartParams (its
// depth, its parent's number of children, or its tree's number of runs). Nothing
// was written.
var ErrChildLimit = errors.New("catalog: child run limit")

// ErrChildNotFound means the child's workflow, version or alias does not exist.
// It wraps ErrNotFound.
var ErrChildNotFound = fmt.Errorf("%w: child workflow", ErrNotFound)

// ChildStartParams describe the child run a workflow step starts (ChildStart).
type ChildStartParams struct {
	// Workflow is the child's workflow.
	Workflow string
	// Version to run; 0 means the one Alias names ("" for latest).
	Version int
	Alias   string
	// Input of the child run (JSON or a $blob reference); nil for null.
	Input json.RawMessage
	// MaxDepth bounds how many ancestors the child may have (its parent, the
	// parent's parent, …); 0 means no bound.
	MaxDepth int
	// MaxChildren bounds how many child runs the steps of one run may start in
	// all; 0 means no bound.
	MaxChildren int
	// MaxTreeRuns bounds how many child runs one tree of runs may hold in all:
	// every descendant of its root (the run without a parent), at any depth,
	// counted when created; 0 means no bound.
	MaxTreeRuns int
}

// ChildStartResult is the run a workflow step waits for.
type ChildStartResult struct {
	Run uuid.UUID
	// Retried is true when the step had a failed or canceled child already (the
	// parent run was retried): that child was retried (cairn_run_retry) rather than
	// a new one created.
	Retried bool
	// Reused is true when the step's child had not failed (it runs still, or it
	// succeeded): the step waits for it again.
	Reused bool
}

// ChildStart starts the child run of the running workflow step l and suspends the
// step until the child ends, in one transaction fenced by the lease (the child
// exists if and only if the step waits for it, whatever crashes). A step that
// started a child before (its run was retried) takes that child up again: a failed
// or canceled child is retried, keeping its succeeded steps; one that has not
// ended is waited for; one that succeeded gives its output at once. Errors:
// ErrLeaseLost (nothing written), ErrChildLimit (over MaxDepth, MaxChildren or
// MaxTreeRuns),
// ErrChildNotFound (no such workflow, version or alias).
func (s *Store) ChildStart(ctx context.Context, l Lease, p *ChildStartParams) (*ChildStartResult, error) {
	var out ChildStartResult
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		out = ChildStartResult{}
		if _, err := tx.ExecContext(ctx, sqlChildWorkflowShare, p.Workflow); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, sqlRunShare, l.RunID); err != nil {
			return err
		}
		var prev struct {
			ID     uuid.UUID `db:"id"`
			Status RunStatus `db:"status"`
		}
		switch err := tx.GetContext(ctx, &prev, sqlChildLatest, l.RunID, l.Key); {
		case err == nil:
			out.Run = prev.ID
			out.Reused = true
			if prev.Status == RunFailed || prev.Status == RunCanceled {
				retried, err := childRetry(ctx, tx, prev.ID, l.RunID)
				if err != nil {
					return err
				}
				out.Retried, out.Reused = retried, !retried
			}
		case errors.Is(translateError(err), ErrNotFound):
			if err := childLimits(ctx, tx, l.RunID, p); err != nil {
				return err
			}
			run, _, err := runCreateTx(ctx, tx, &RunCreateParams{Workflow: p.Workflow, Version: p.Version, Alias: p.Alias,
				Input: p.Input, Parent: l.RunID}, 0, true)
			if err != nil {
				if errors.Is(translateError(err), ErrNotFound) {
					return ErrChildNotFound
				}
				return err
			}
			out.Run = run.ID
		default:
			return err
		}
		var ok bool
		if err := tx.GetContext(ctx, &ok, sqlChildSuspend, l.RunID, l.Key, l.Token, out.Run); err != nil {
			return err
		}
		if !ok {
			return ErrLeaseLost
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("start child run of %s/%s: %w", l.RunID, l.Key, err)
	}
	return &out, nil
}

// childRetry retries the failed or canceled child run of parent; false, with
// nothing written, when the child was retried by someone else since it was read
// (the step then waits for it as it is).
func childRetry(ctx context.Context, tx *sqlx.Tx, child, parent uuid.UUID) (bool, error) {
	if _, err := tx.ExecContext(ctx, "SAVEPOINT child_retry"); err != nil {
		return false, err
	}
	if _, err := tx.ExecContext(ctx, sqlChildRetry, child, "parent:"+parent.String()); err != nil {
		if !errors.Is(translateError(err), ErrRunState) {
			return false, err
		}
		_, err = tx.ExecContext(ctx, "ROLLBACK TO SAVEPOINT child_retry")
		return false, err
	}
	_, err := tx.ExecContext(ctx, "RELEASE SAVEPOINT child_retry")
	return true, err
}

// childLimits checks p's depth, fan-out and tree bounds for a new child of run
// parent, and counts the child in its tree (run_trees; undone with the
// transaction when the child is not created).
func childLimits(ctx context.Context, tx *sqlx.Tx, parent uuid.UUID, p *ChildStartParams) error {
	var up struct {
		Depth int       `db:"depth"`
		Root  uuid.UUID `db:"root"`
	}
	if err := tx.GetContext(ctx, &up, sqlRunAncestry, parent, max(p.MaxDepth, maxTreeDepth)); err != nil {
		return err
	}
	if p.MaxDepth > 0 && up.Depth+1 > p.MaxDepth {
		return fmt.Errorf("%w: a child run here would be %d levels deep, over the limit of %d (CAIRN_MAX_CHILD_DEPTH)",
			ErrChildLimit, up.Depth+1, p.MaxDepth)
	}
	if p.MaxChildren > 0 {
		var n int
		if err := tx.GetContext(ctx, &n, sqlChildCount, parent); err != nil {
			return err
		}
		if n >= p.MaxChildren {
			return fmt.Errorf("%w: run %s has started %d child runs, the limit (CAIRN_MAX_CHILD_RUNS)",
				ErrChildLimit, parent, n)
		}
	}
	if p.MaxTreeRuns > 0 {
		// Counted on the root's row of run_trees, which serializes the children
		// of one tree as they are created (not as they run): the count is exact.
		var n int
		err := tx.GetContext(ctx, &n, sqlTreeGrow, up.Root)
		if errors.Is(err, sql.ErrNoRows) {
			err = tx.GetContext(ctx, &n, sqlTreeStart, up.Root)
		}
		if err != nil {
			return err
		}
		if n > p.MaxTreeRuns {
			return fmt.Errorf("%w: the runs below run %s have started %d child runs in all, the limit (CAIRN_MAX_TREE_RUNS)",
				ErrChildLimit, up.Root, n-1)
		}
	}
	return nil
}

// maxTreeDepth bounds how far sqlRunAncestry follows parents to find a tree's root
// when MaxDepth sets no bound (runs nest that deep only when MaxDepth allows it).
const maxTreeDepth = 1000

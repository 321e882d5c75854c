package catalog

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"
)

const (
	// sqlRunRetry: cairn_run_retry decides and writes a retry under the run's row
	// lock (catalog/sql/run_control.sql).
	sqlRunRetry = `SELECT cairn_run_retry($1, $2, $3)`

	// sqlRunAliasVersion resolves an alias of a run's workflow (cairn_alias_version,
	// NULL when there is no such alias).
	sqlRunAliasVersion = `SELECT r.workflow, cairn_alias_version(r.workflow, $2) AS version FROM runs r WHERE r.id = $1`

	// sqlRunRerun: cairn_run_rerun makes the new run (or, dry, only its plan).
	sqlRunRerun = `SELECT reused, fresh FROM cairn_run_rerun($1, $2, $3, $4, $5, $6, $7)`

	// sqlRerunPlan reads back the plan a rerun was made with: the steps its
	// step.reused event lists, and the others, in the version's order.
	sqlRerunPlan = `
WITH r AS (
    SELECT coalesce((SELECT array_agg(x) FROM events e, jsonb_array_elements_text(e.data->'steps') AS x
                     WHERE e.run_id = runs.id AND e.type = 'step.reused'), '{}') AS reused,
           workflow, version
    FROM runs WHERE id = $1
)
SELECT coalesce(array_agg(l.key ORDER BY l.ord) FILTER (WHERE l.key = ANY (r.reused)), '{}') AS reused,
       coalesce(array_agg(l.key ORDER BY l.ord) FILTER (WHERE NOT l.key = ANY (r.reused)), '{}') AS fresh
FROM r, cairn_version_layout(r.workflow, r.version) l`
)

// RunRetryParams describe a retry of a run in place.
type RunRetryParams struct {
	RunID uuid.UUID
	// Version, when not 0, moves the run onto that version of its workflow; Alias,
	// when not "", onto the version that alias of its workflow names (at the retry).
	Version int
	Alias   string
	// Actor names who asked, recorded in the run.retried event.
	Actor string
	// IdempotencyKey, when set, makes the retry idempotent (scope "retry:<run
	// ID>"): the same key with the same RequestHash returns the run without
	// retrying it again; with another hash, ErrIdempotencyMismatch.
	IdempotencyKey string
	RequestHash    string
}

// RunRetry runs a failed or canceled run again in place and returns it: its
// failed, canceled and skipped steps become ready or waiting with a fresh attempt
// budget (their attempts and checkpoints stay), its succeeded steps and their
// outputs are kept and never run again, and one run.retried event names the actor.
// With Version the run first moves onto that version, if every kept step exists
// there with the same key and needs. retried is false when an earlier request with
// the same idempotency key did the retry.
//
// Errors: ErrNotFound (no such run, or no such version), ErrRunState (the run is
// not failed or canceled: a concurrent retry of it won), ErrIncompatibleVersion;
// Reason says which.
func (s *Store) RunRetry(ctx context.Context, p *RunRetryParams) (run *Run, retried bool, err error) {
	err = s.inTx(ctx, func(tx *sqlx.Tx) error {
		if p.IdempotencyKey != "" {
			first, err := claimIdempotencyKey(ctx, tx, "retry:"+p.RunID.String(), p.IdempotencyKey, p.RequestHash, p.RunID.String(),
				s.cfg.IdempotencyTTL)
			if err != nil {
				return err
			}
			if first != "" {
				retried = false
				run = &Run{}
				return tx.GetContext(ctx, run, sqlRunGet, p.RunID)
			}
		}
		version, err := aliasVersion(ctx, tx, p.RunID, p.Version, p.Alias)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, sqlRunRetry, p.RunID, version, p.Actor); err != nil {
			return err
		}
		retried = true
		run = &Run{}
		return tx.GetContext(ctx, run, sqlRunGet, p.RunID)
	})
	if err != nil {
		return nil, false, fmt.Errorf("retry run %s: %w", p.RunID, err)
	}
	return run, retried, nil
}

// claimIdempotencyKey records key in scope for resource, or returns the resource
// an earlier request recorded under it ("" when this request is the first). The
// insert waits for a concurrent holder of the key to commit. ErrIdempotencyMismatch
// when the earlier request had another hash. A key older than ttl is taken over
// as if it were new.
func claimIdempotencyKey(ctx context.Context, tx *sqlx.Tx, scope, key, hash, resource string, ttl time.Duration) (string, error) {
	res, err := tx.ExecContext(ctx, sqlIdempotencyInsert, scope, key, hash, resource, ttl.Seconds())
	if err != nil {
		return "", err
	}
	if n, _ := res.RowsAffected(); n > 0 {
		return "", nil
	}
	var firstHash, first string
	if err := tx.QueryRowxContext(ctx, sqlIdempotencyGet, scope, key).Scan(&firstHash, &first); err != nil {
		return "", err
	}
	if firstHash != hash {
		return "", ErrIdempotencyMismatch
	}
	return first, nil
}

// RunRerunParams describe a rerun of a finished run from one of its steps.
type RunRerunParams struct {
	// Source is the run to rerun; it must have ended.
	Source uuid.UUID
	// FromStep is the first step to run again: it and its transitive dependents
	// run fresh.
	FromStep string
	// Input is the new run's input; empty means the source's.
	Input json.RawMessage
	// Version, when not 0, runs the new run on that version of the workflow; Alias,
	// when not "", on the version that alias names; else the source's.
	Version int
	Alias   string
	// Actor names who asked, recorded in the new run's run.created event.
	Actor string
	// DryRun returns the plan and writes nothing.
	DryRun bool
	// IdempotencyKey, when set, makes the rerun idempotent (scope "rerun:<source
	// ID>"), as RunCreateParams.IdempotencyKey.
	IdempotencyKey string
	RequestHash    string
}

// RerunPlan says which steps of a rerun reuse the source's outputs and which run,
// each in the version's order.
type RerunPlan struct {
	Reused []string
	Run    []string
}

// RunRerun makes a new run of a finished run's workflow (rerun_of the source) that
// carries over, by reference, the outputs of the source's succeeded steps that are
// not downstream of FromStep; FromStep and everything downstream of it, and the
// steps that did not succeed, run fresh. It returns the new run (nil on a dry run)
// and the plan; created is false when an earlier request with the same idempotency
// key made the run.
//
// Errors: ErrNotFound (no such run or version), ErrRunState (the source has not
// ended), ErrIncompatibleVersion (a step to reuse has other needs in Version),
// ErrInvalidInput (FromStep is not a step of the version); Reason says which.
func (s *Store) RunRerun(ctx context.Context, p *RunRerunParams) (run *Run, plan *RerunPlan, created bool, err error) {
	id, err := uuid.NewV7()
	if err != nil {
		return nil, nil, false, fmt.Errorf("new run id: %w", err)
	}
	err = s.inTx(ctx, func(tx *sqlx.Tx) error {
		run, plan, created = nil, &RerunPlan{}, false
		if p.IdempotencyKey != "" && !p.DryRun {
			first, err := claimIdempotencyKey(ctx, tx, "rerun:"+p.Source.String(), p.IdempotencyKey, p.RequestHash, id.String(),
				s.cfg.IdempotencyTTL)
			if err != nil {
				return err
			}
			if first != "" {
				firstID, err := uuid.Parse(first)
				if err != nil {
					return fmt.Errorf("idempotency record: %w", err)
				}
				run = &Run{}
				if err := tx.GetContext(ctx, run, sqlRunGet, firstID); err != nil {
					return err
				}
				return scanPlan(tx.QueryRowxContext(ctx, sqlRerunPlan, firstID), plan)
			}
		}
		version, err := aliasVersion(ctx, tx, p.Source, p.Version, p.Alias)
		if err != nil {
			return err
		}
		if err := scanPlan(tx.QueryRowxContext(ctx, sqlRunRerun, id, p.Source, p.FromStep, nullJSON(p.Input),
			version, p.Actor, p.DryRun), plan); err != nil {
			return err
		}
		if p.DryRun {
			return nil
		}
		created = true
		run = &Run{}
		if err := tx.GetContext(ctx, run, sqlRunGet, id); err != nil {
			return err
		}
		// The new run's steps get their concurrency keys as a run's do when it is
		// created; they are not visible to a claim before this transaction commits.
		_, flow, hflow, err := flowKeys(ctx, tx, id, run.Workflow, run.Version, "", json.RawMessage(run.Input), run.Labels, nil)
		if err != nil {
			return err
		}
		if hflow != nil {
			if _, err = tx.ExecContext(ctx, sqlRunHandlerFlow, id, string(hflow)); err != nil {
				return err
			}
		}
		if flow == nil {
			return nil
		}
		if _, err = tx.ExecContext(ctx, sqlFlowApply, id, string(flow)); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, sqlLimitKeys, string(flow))
		return err
	})
	if err != nil {
		return nil, nil, false, fmt.Errorf("rerun run %s from %s: %w", p.Source, p.FromStep, err)
	}
	return run, plan, created, nil
}

// aliasVersion returns version, or when alias is not "" the version that alias of
// the run's workflow names now: ErrNotFound when the run or the alias does not
// exist.
func aliasVersion(ctx context.Context, tx *sqlx.Tx, run uuid.UUID, version int, alias string) (int, error) {
	if alias == "" {
		return version, nil
	}
	var got struct {
		Workflow string `db:"workflow"`
		Version  *int   `db:"version"`
	}
	if err := tx.GetContext(ctx, &got, sqlRunAliasVersion, run, alias); err != nil {
		return 0, translateError(err)
	}
	if got.Version == nil {
		return 0, fmt.Errorf("%w: workflow %q has no alias %q", ErrNotFound, got.Workflow, alias)
	}
	return *got.Version, nil
}

func scanPlan(row *sqlx.Row, plan *RerunPlan) error {
	var reused, fresh pq.StringArray
	if err := row.Scan(&reused, &fresh); err != nil {
		return err
	}
	plan.Reused, plan.Run = []string(reused), []string(fresh)
	return nil
}

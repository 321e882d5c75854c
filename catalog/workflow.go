package catalog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"
)

const (
	sqlBundleInsert = `
INSERT INTO bundles (digest, size, blob_key) VALUES ($1, $2, $3)
ON CONFLICT (digest) DO NOTHING`

	sqlBundleGet = `
SELECT digest, size, blob_key, created_at FROM bundles WHERE digest = $1`

	// Bumping latest_version takes the workflow's row lock, so concurrent uploads of
	// one workflow get consecutive numbers, none lost and none shared. The column is
	// the highest number given out; the version runs start on is the alias latest
	// (cairn_alias_version, catalog/sql/aliases.sql).
	sqlWorkflowBumpVersion = `
INSERT INTO workflows (name, latest_version, description) VALUES ($1, 1, $2)
ON CONFLICT (name) DO UPDATE
SET latest_version = workflows.latest_version + 1,
    description = EXCLUDED.description,
    updated_at = now()
RETURNING latest_version`

	sqlVersionInsert = `
INSERT INTO workflow_versions (workflow, version, bundle_digest, definition, fingerprint,
                               step_keys, step_needs, step_max_attempts, step_on_exhausted,
                               step_after, step_when, step_compensate, on_failure_keys, on_failure_max_attempts)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)`

	versionColumns = `
v.workflow, v.version, v.bundle_digest, v.definition, v.fingerprint, v.created_at, b.size AS bundle_size`

	sqlVersionByDigest = `
SELECT ` + versionColumns + `
FROM workflow_versions v JOIN bundles b ON b.digest = v.bundle_digest
WHERE v.bundle_digest = $1 AND v.workflow = $2`

	sqlVersionGet = `
SELECT ` + versionColumns + `
FROM workflow_versions v JOIN bundles b ON b.digest = v.bundle_digest
WHERE v.workflow = $1 AND v.version = $2`

	sqlVersionByAlias = `
SELECT ` + versionColumns + `
FROM workflow_versions v JOIN bundles b ON b.digest = v.bundle_digest
WHERE v.workflow = $1 AND v.version = cairn_alias_version($1, $2)`

	sqlVersionList = `
SELECT ` + versionColumns + `
FROM workflow_versions v JOIN bundles b ON b.digest = v.bundle_digest
WHERE v.workflow = $1 AND ($2::integer = 0 OR v.version < $2)
ORDER BY v.version DESC
LIMIT $3`

	// latest_version is the version the alias latest names (0: none), aliases all
	// of them as a JSON object.
	workflowColumns = `w.name, w.description, coalesce(cairn_alias_version(w.name, 'latest'), 0) AS latest_version,
(SELECT coalesce(jsonb_object_agg(a.alias, a.version), '{}') FROM workflow_aliases a WHERE a.workflow = w.name) AS aliases,
w.created_at, w.updated_at, w.paused, w.paused_by, w.paused_at`

	sqlWorkflowPause  = `SELECT cairn_workflow_pause($1, $2, $3)`
	sqlWorkflowResume = `SELECT cairn_workflow_resume($1, $2, $3)`

	sqlWorkflowGet = `SELECT ` + workflowColumns + ` FROM workflows w WHERE w.name = $1`

	sqlWorkflowList = `
SELECT ` + workflowColumns + ` FROM workflows w
WHERE w.name > $1 AND ($3::text IS NULL OR cairn_namespace(w.name) = $3::text)
ORDER BY w.name
LIMIT $2`
)

// Bundle is a stored bundle archive.
type Bundle struct {
	Digest    string    `db:"digest"`
	Size      int64     `db:"size"`
	BlobKey   string    `db:"blob_key"`
	CreatedAt time.Time `db:"created_at"`
}

// Workflow is a named workflow and its aliases.
type Workflow struct {
	Name        string `db:"name"`
	Description string `db:"description"`
	// LatestVersion is the version the alias latest names; 0 when it names none
	// (every version was deployed without promoting).
	LatestVersion int `db:"latest_version"`
	// Aliases maps each alias of the workflow to the version it names.
	Aliases   AliasVersions `db:"aliases"`
	CreatedAt time.Time     `db:"created_at"`
	UpdatedAt time.Time     `db:"updated_at"`
	// Paused is true while the workflow is paused (WorkflowPause): its new runs are
	// created paused. PausedBy and PausedAt say who paused it and when.
	Paused   bool       `db:"paused"`
	PausedBy *string    `db:"paused_by"`
	PausedAt *time.Time `db:"paused_at"`
}

// Version is an immutable version of a workflow: its bundle and normalized
// definition.
type Version struct {
	Workflow     string    `db:"workflow"`
	Version      int       `db:"version"`
	BundleDigest string    `db:"bundle_digest"`
	Definition   JSON      `db:"definition"`
	Fingerprint  string    `db:"fingerprint"`
	CreatedAt    time.Time `db:"created_at"`
	BundleSize   int64     `db:"bundle_size"`
}

// VersionRegisterParams describe an uploaded bundle to register.
type VersionRegisterParams struct {
	Workflow    string
	Description string
	Digest      string
	Size        int64
	BlobKey     string
	Definition  json.RawMessage
	Fingerprint string
	// Steps are what a run of the version starts with.
	Steps []NewStep
	// OnFailure are the steps a failed run of the version runs once, after its
	// compensations (Key and MaxAttempts are used).
	OnFailure []NewStep
	// NoPromote leaves the alias latest where it is. By default, latest is moved
	// to the version (the new one, or the existing one of a digest registered
	// before) in the same transaction.
	NoPromote bool
	// Actor is who deploys (the token's name), recorded with the move of latest.
	Actor string
}

// VersionRegister records the bundle and the next version of its workflow in one
// transaction, and (unless p.NoPromote) moves the alias latest to it. A digest
// registered before returns its existing version and created=false (latest is moved
// back to it all the same); concurrent registrations of one workflow get
// consecutive numbers.
func (s *Store) VersionRegister(ctx context.Context, p *VersionRegisterParams) (v *Version, created bool, err error) {
	// A concurrent upload of the same digest makes the insert below conflict; the
	// second try then finds the version the other one registered.
	for try := 0; try < 2; try++ {
		v, created, err = s.versionRegisterOnce(ctx, p)
		if !errors.Is(err, ErrConflict) {
			break
		}
	}
	if err != nil {
		return nil, false, fmt.Errorf("register version of %s: %w", p.Workflow, err)
	}
	return v, created, nil
}

func (s *Store) versionRegisterOnce(ctx context.Context, p *VersionRegisterParams) (*Version, bool, error) {
	var out Version
	created := false
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		if _, err := tx.ExecContext(ctx, sqlBundleInsert, p.Digest, p.Size, p.BlobKey); err != nil {
			return err
		}
		err := tx.GetContext(ctx, &out, sqlVersionByDigest, p.Digest, p.Workflow)
		if err == nil {
			return promote(ctx, tx, p, &out)
		}
		if err = translateError(err); !errors.Is(err, ErrNotFound) {
			return err
		}
		var next int
		if err := tx.GetContext(ctx, &next, sqlWorkflowBumpVersion, p.Workflow, p.Description); err != nil {
			return err
		}
		a := stepArrays(p.Steps)
		onFailureKeys, onFailureMaxes := make([]string, len(p.OnFailure)), make([]int64, len(p.OnFailure))
		for i, st := range p.OnFailure {
			onFailureKeys[i], onFailureMaxes[i] = st.Key, int64(st.MaxAttempts)
		}
		if _, err := tx.ExecContext(ctx, sqlVersionInsert, p.Workflow, next, p.Digest, JSON(p.Definition), p.Fingerprint,
			pq.Array(a.keys), pq.Array(a.needs), pq.Array(a.maxes), pq.Array(a.exhausted),
			pq.Array(a.afters), pq.Array(a.whens), pq.Array(a.comps), pq.Array(onFailureKeys), pq.Array(onFailureMaxes)); err != nil {
			return err
		}
		created = true
		if err := tx.GetContext(ctx, &out, sqlVersionGet, p.Workflow, next); err != nil {
			return err
		}
		return promote(ctx, tx, p, &out)
	})
	if err != nil {
		return nil, false, err
	}
	return &out, created, nil
}

// promote moves latest to the registered version v, unless p says not to.
func promote(ctx context.Context, tx *sqlx.Tx, p *VersionRegisterParams, v *Version) error {
	if p.NoPromote {
		return nil
	}
	_, err := aliasSet(ctx, tx, &AliasSetParams{Workflow: v.Workflow, Alias: AliasLatest, Version: v.Version, Kind: AliasDeploy, Actor: p.Actor})
	return err
}

// BundleGet returns the bundle with digest; ErrNotFound if none.
func (s *Store) BundleGet(ctx context.Context, digest string) (*Bundle, error) {
	var b Bundle
	if err := s.db.GetContext(ctx, &b, sqlBundleGet, digest); err != nil {
		return nil, fmt.Errorf("get bundle %s: %w", digest, translateError(err))
	}
	return &b, nil
}

// VersionGet returns a version of a workflow; version 0 means the one the alias
// latest names. ErrNotFound if the workflow or version does not exist.
func (s *Store) VersionGet(ctx context.Context, workflow string, version int) (*Version, error) {
	var v Version
	var err error
	if version == 0 {
		err = s.db.GetContext(ctx, &v, sqlVersionByAlias, workflow, AliasLatest)
	} else {
		err = s.db.GetContext(ctx, &v, sqlVersionGet, workflow, version)
	}
	if err != nil {
		return nil, fmt.Errorf("get version %d of %s: %w", version, workflow, translateError(err))
	}
	return &v, nil
}

// VersionListParams select a page of versions, newest first.
type VersionListParams struct {
	Workflow string
	// Before, when > 0, lists versions below it (the keyset cursor).
	Before int
	// Limit is the page size (1..1000).
	Limit int
}

// VersionList returns a page of a workflow's versions, newest first.
func (s *Store) VersionList(ctx context.Context, p *VersionListParams) ([]Version, error) {
	var out []Version
	if err := s.db.SelectContext(ctx, &out, sqlVersionList, p.Workflow, p.Before, p.Limit); err != nil {
		return nil, fmt.Errorf("list versions of %s: %w", p.Workflow, translateError(err))
	}
	return out, nil
}

// WorkflowGet returns a workflow; ErrNotFound if none.
func (s *Store) WorkflowGet(ctx context.Context, name string) (*Workflow, error) {
	var w Workflow
	if err := s.db.GetContext(ctx, &w, sqlWorkflowGet, name); err != nil {
		return nil, fmt.Errorf("get workflow %s: %w", name, translateError(err))
	}
	return &w, nil
}

// WorkflowListParams select a page of workflows by name.
type WorkflowListParams struct {
	// After lists names greater than it (the keyset cursor); "" starts at the top.
	After string
	// Limit is the page size (1..1000).
	Limit int
	// Namespace, when not empty, keeps its workflows only (package namespace).
	Namespace string
}

// WorkflowList returns a page of workflows ordered by name.
func (s *Store) WorkflowList(ctx context.Context, p *WorkflowListParams) ([]Workflow, error) {
	var out []Workflow
	if err := s.db.SelectContext(ctx, &out, sqlWorkflowList, p.After, p.Limit, nullString(p.Namespace)); err != nil {
		return nil, fmt.Errorf("list workflows: %w", translateError(err))
	}
	return out, nil
}

// VersionByDigest returns the version of workflow registered for a bundle digest;
// ErrNotFound if the digest was never registered for it (a bundle deployed in two
// namespaces is a version of two workflows).
func (s *Store) VersionByDigest(ctx context.Context, digest, workflow string) (*Version, error) {
	var v Version
	if err := s.db.GetContext(ctx, &v, sqlVersionByDigest, digest, workflow); err != nil {
		return nil, fmt.Errorf("get version of bundle %s: %w", digest, translateError(err))
	}
	return &v, nil
}

// WorkflowPause pauses a workflow at an operator's request (actor, with an
// optional note): every pending or running run of it is paused (PauseWorkflow, a
// run.paused event each) and its new runs are created paused until WorkflowResume.
// Pausing a paused workflow keeps who paused it first and when, and pauses the runs
// that are not paused. It returns how many runs it paused; ErrNotFound if no such
// workflow.
func (s *Store) WorkflowPause(ctx context.Context, name, actor, note string) (runs int, err error) {
	err = s.inTx(ctx, func(tx *sqlx.Tx) error {
		return tx.GetContext(ctx, &runs, sqlWorkflowPause, name, actor, note)
	})
	if err != nil {
		return 0, fmt.Errorf("pause workflow %s: %w", name, err)
	}
	return runs, nil
}

// WorkflowResume resumes a workflow: it is no longer paused, and the runs its pause
// held (PauseWorkflow) are released (a run.resumed event each); runs paused one by
// one (PauseRun) or parked by a step (PauseExhausted) stay paused. Resuming a
// workflow that is not paused changes nothing. It returns how many runs it
// released; ErrNotFound if no such workflow.
func (s *Store) WorkflowResume(ctx context.Context, name, actor, note string) (runs int, err error) {
	err = s.inTx(ctx, func(tx *sqlx.Tx) error {
		return tx.GetContext(ctx, &runs, sqlWorkflowResume, name, actor, note)
	})
	if err != nil {
		return 0, fmt.Errorf("resume workflow %s: %w", name, err)
	}
	return runs, nil
}

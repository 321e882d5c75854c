package catalog

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"
)

// Namespaces (package namespace, migration 00089): a namespace is a row of
// namespaces; its objects are keyed "namespace/name" (default's by their bare
// names), so that the namespace of a run is cairn_namespace(runs.workflow).

const (
	namespaceColumns = `name, created_at, created_by, running_steps, runs_per_minute, updated_at, updated_by`

	sqlNamespaceCreate = `INSERT INTO namespaces (name, created_by, updated_by) VALUES ($1, $2, $2)
RETURNING ` + namespaceColumns
	sqlNamespaceGet  = `SELECT ` + namespaceColumns + ` FROM namespaces WHERE name = $1`
	sqlNamespaceList = `SELECT ` + namespaceColumns + ` FROM namespaces WHERE name > $1 ORDER BY name LIMIT $2`

	sqlRunNamespace      = `SELECT cairn_namespace(workflow) FROM runs WHERE id = $1`
	sqlScheduleNamespace = `SELECT cairn_namespace(workflow) FROM schedules WHERE id = $1`
	sqlBundleInNamespace = `SELECT EXISTS (SELECT 1 FROM workflow_versions WHERE bundle_digest = $1 AND cairn_namespace(workflow) = $2)`
)

// Namespace is a namespace and its quotas.
type Namespace struct {
	Name      string    `db:"name"`
	CreatedAt time.Time `db:"created_at"`
	CreatedBy string    `db:"created_by"`
	// RunningSteps and RunsPerMinute are its quotas; nil: none.
	RunningSteps  *int      `db:"running_steps"`
	RunsPerMinute *int      `db:"runs_per_minute"`
	UpdatedAt     time.Time `db:"updated_at"`
	UpdatedBy     string    `db:"updated_by"`
}

// NamespaceCreate creates namespace name (checked by the caller: namespace.Check).
// ErrConflict if it exists.
func (s *Store) NamespaceCreate(ctx context.Context, name, actor string) (*Namespace, error) {
	var out Namespace
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		return tx.GetContext(ctx, &out, sqlNamespaceCreate, name, actor)
	})
	if err != nil {
		return nil, fmt.Errorf("create namespace %s: %w", name, translateError(err))
	}
	return &out, nil
}

// NamespaceGet returns namespace name; ErrNotFound if there is none.
func (s *Store) NamespaceGet(ctx context.Context, name string) (*Namespace, error) {
	var out Namespace
	if err := s.db.GetContext(ctx, &out, sqlNamespaceGet, name); err != nil {
		return nil, fmt.Errorf("get namespace %s: %w", name, translateError(err))
	}
	return &out, nil
}

// NamespaceList returns at most limit namespaces named after after, by name.
func (s *Store) NamespaceList(ctx context.Context, after string, limit int) ([]Namespace, error) {
	var out []Namespace
	if err := s.db.SelectContext(ctx, &out, sqlNamespaceList, after, limit); err != nil {
		return nil, fmt.Errorf("list namespaces: %w", translateError(err))
	}
	return out, nil
}

// RunNamespace returns the namespace of run id; ErrNotFound if there is no such run.
func (s *Store) RunNamespace(ctx context.Context, id uuid.UUID) (string, error) {
	var ns string
	if err := s.db.GetContext(ctx, &ns, sqlRunNamespace, id); err != nil {
		return "", fmt.Errorf("get run %s: %w", id, translateError(err))
	}
	return ns, nil
}

// ScheduleNamespace returns the namespace of schedule id; ErrNotFound if there is
// no such schedule.
func (s *Store) ScheduleNamespace(ctx context.Context, id int64) (string, error) {
	var ns string
	if err := s.db.GetContext(ctx, &ns, sqlScheduleNamespace, id); err != nil {
		return "", fmt.Errorf("get schedule %d: %w", id, translateError(err))
	}
	return ns, nil
}

// BundleInNamespace reports whether a version of a workflow of namespace ns was
// deployed from the bundle digest.
func (s *Store) BundleInNamespace(ctx context.Context, digest, ns string) (bool, error) {
	var ok bool
	if err := s.db.GetContext(ctx, &ok, sqlBundleInNamespace, digest, ns); err != nil {
		return false, fmt.Errorf("get bundle %s: %w", digest, translateError(err))
	}
	return ok, nil
}

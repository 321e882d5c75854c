package catalog

import (
	"context"
	"database/sql/driver"
	"encoding/json"
	"fmt"
	"regexp"
	"time"

	"github.com/jmoiron/sqlx"
)

// AliasLatest is the alias deploy moves (unless told not to) and a run without a
// version starts on.
const AliasLatest = "latest"

// AliasPattern is what an alias name looks like: lower case, starting with a letter
// (so never all digits: a version number and an alias cannot be confused). The
// schema checks it too.
const AliasPattern = `^[a-z][a-z0-9-]{0,62}$`

var aliasRE = regexp.MustCompile(AliasPattern)

// ValidAlias reports whether name is a valid alias name (AliasPattern).
func ValidAlias(name string) bool { return aliasRE.MatchString(name) }

// ErrNothingToRollBack means an alias has no earlier version to go back to: the
// version it names is the first of its history, or every earlier one was rolled
// back already. It wraps ErrConflict; Reason says which version the alias names.
var ErrNothingToRollBack = fmt.Errorf("%w: nothing to roll back to", ErrConflict)

const (
	aliasColumns = `workflow, alias, version, updated_at, updated_by`

	sqlAliasGet = `SELECT ` + aliasColumns + ` FROM workflow_aliases WHERE workflow = $1 AND alias = $2`

	sqlAliasList = `
SELECT ` + aliasColumns + ` FROM workflow_aliases
WHERE workflow = $1 AND alias > $2
ORDER BY alias
LIMIT $3`

	sqlAliasHistory = `
SELECT id, alias, version, previous_version, kind, actor, created_at
FROM alias_changes
WHERE workflow = $1 AND alias = $2
ORDER BY id DESC
LIMIT $3`

	// sqlAliasResolve reads the version an alias names (NULL: none) and whether the
	// workflow exists, so that "no such workflow" and "no such alias" differ.
	sqlAliasResolve = `
SELECT cairn_alias_version(w.name, $2) FROM workflows w WHERE w.name = $1`

	sqlAliasSet      = `SELECT cairn_alias_set($1, $2, $3, $4, $5)`
	sqlAliasRollback = `SELECT cairn_alias_rollback($1, $2, $3)`
)

// AliasChangeKind says what moved an alias (AliasChange.Kind).
type AliasChangeKind string

// Alias change kinds.
const (
	// AliasDeploy: a deploy moved latest onto the version it registered (or found).
	AliasDeploy AliasChangeKind = "deploy"
	// AliasPromote: an operator pointed the alias at a version.
	AliasPromote AliasChangeKind = "promote"
	// AliasRollback: an operator moved the alias back to the version it named
	// before its current one.
	AliasRollback AliasChangeKind = "rollback"
)

// Alias is a named pointer of a workflow to one of its versions.
type Alias struct {
	Workflow  string    `db:"workflow"`
	Alias     string    `db:"alias"`
	Version   int       `db:"version"`
	UpdatedAt time.Time `db:"updated_at"`
	// UpdatedBy is the actor of the last change ("migration" for a latest the
	// aliases migration made from the workflow's newest version).
	UpdatedBy string `db:"updated_by"`
}

// AliasChange is an entry of an alias's history: every change is recorded with its
// actor.
type AliasChange struct {
	ID              int64           `db:"id"`
	Alias           string          `db:"alias"`
	Version         int             `db:"version"`
	PreviousVersion *int            `db:"previous_version"`
	Kind            AliasChangeKind `db:"kind"`
	Actor           string          `db:"actor"`
	CreatedAt       time.Time       `db:"created_at"`
}

// AliasVersions maps a workflow's alias names to their versions (a jsonb object
// column).
type AliasVersions map[string]int

// Scan implements sql.Scanner.
func (a *AliasVersions) Scan(src any) error {
	return scanObject(a, src)
}

// Value implements driver.Valuer: the JSON object, as text (see JSON.Value).
func (a AliasVersions) Value() (driver.Value, error) {
	b, err := json.Marshal(map[string]int(a))
	return string(b), err
}

// AliasSetParams point an alias at a version.
type AliasSetParams struct {
	Workflow string
	Alias    string
	Version  int
	// Kind is AliasPromote, or AliasDeploy; default AliasPromote.
	Kind AliasChangeKind
	// Actor is who asked (the token's name); recorded with the change.
	Actor string
}

// AliasSet points an alias at a version, creating the alias if need be, and records
// the change with its actor. changed is false when the alias named that version
// already (nothing is recorded then). Concurrent changes of one workflow's aliases
// are serialized: none is lost, and each records the version before it.
//
// Errors: ErrNotFound for an unknown workflow; ErrInvalidInput for a version the
// workflow does not have or an alias name that breaks AliasPattern (Reason says
// which).
func (s *Store) AliasSet(ctx context.Context, p *AliasSetParams) (changed bool, err error) {
	err = s.inTx(ctx, func(tx *sqlx.Tx) error {
		var e error
		changed, e = aliasSet(ctx, tx, p)
		return e
	})
	if err != nil {
		return false, fmt.Errorf("set alias %s of %s to version %d: %w", p.Alias, p.Workflow, p.Version, err)
	}
	return changed, nil
}

func aliasSet(ctx context.Context, tx *sqlx.Tx, p *AliasSetParams) (bool, error) {
	kind := p.Kind
	if kind == "" {
		kind = AliasPromote
	}
	if !ValidAlias(p.Alias) {
		return false, fmt.Errorf("%w: alias %q: want %s", ErrInvalidInput, p.Alias, AliasPattern)
	}
	var changed bool
	err := tx.GetContext(ctx, &changed, sqlAliasSet, p.Workflow, p.Alias, p.Version, string(kind), p.Actor)
	return changed, err
}

// AliasRollback moves an alias back to the version it named before its current
// one, records the change with actor, and returns the version it names now.
// Repeated rollbacks walk further back through the alias's history (a version
// rolled away from is not gone back to), not between the last two versions.
//
// Errors: ErrNotFound for an unknown workflow or alias; ErrNothingToRollBack when
// there is no earlier version (Reason says why).
func (s *Store) AliasRollback(ctx context.Context, workflow, alias, actor string) (version int, err error) {
	err = s.inTx(ctx, func(tx *sqlx.Tx) error {
		return tx.GetContext(ctx, &version, sqlAliasRollback, workflow, alias, actor)
	})
	if err != nil {
		return 0, fmt.Errorf("roll back alias %s of %s: %w", alias, workflow, err)
	}
	return version, nil
}

// AliasGet returns an alias; ErrNotFound if the workflow has no such alias.
func (s *Store) AliasGet(ctx context.Context, workflow, alias string) (*Alias, error) {
	var a Alias
	if err := s.db.GetContext(ctx, &a, sqlAliasGet, workflow, alias); err != nil {
		return nil, fmt.Errorf("get alias %s of %s: %w", alias, workflow, translateError(err))
	}
	return &a, nil
}

// AliasResolve returns the version alias names in workflow. ErrNotFound if the
// workflow does not exist or has no such alias (wrapped with a message saying
// which). Run creation resolves aliases in its own statement
// (RunCreateParams.Alias); this is for callers that need the number first.
func (s *Store) AliasResolve(ctx context.Context, workflow, alias string) (int, error) {
	var v *int
	if err := s.db.GetContext(ctx, &v, sqlAliasResolve, workflow, alias); err != nil {
		return 0, fmt.Errorf("resolve alias %s of %s: %w", alias, workflow, translateError(err))
	}
	if v == nil {
		return 0, fmt.Errorf("resolve alias %s of %s: %w: workflow has no such alias", alias, workflow, ErrNotFound)
	}
	return *v, nil
}

// AliasListParams select a page of a workflow's aliases by name.
type AliasListParams struct {
	Workflow string
	// After lists names greater than it (the keyset cursor); "" starts at the top.
	After string
	// Limit is the page size.
	Limit int
}

// AliasList returns a page of a workflow's aliases ordered by name.
func (s *Store) AliasList(ctx context.Context, p *AliasListParams) ([]Alias, error) {
	var out []Alias
	if err := s.db.SelectContext(ctx, &out, sqlAliasList, p.Workflow, p.After, p.Limit); err != nil {
		return nil, fmt.Errorf("list aliases of %s: %w", p.Workflow, translateError(err))
	}
	return out, nil
}

// AliasHistory returns up to limit changes of an alias, newest first.
func (s *Store) AliasHistory(ctx context.Context, workflow, alias string, limit int) ([]AliasChange, error) {
	var out []AliasChange
	if err := s.db.SelectContext(ctx, &out, sqlAliasHistory, workflow, alias, limit); err != nil {
		return nil, fmt.Errorf("history of alias %s of %s: %w", alias, workflow, translateError(err))
	}
	return out, nil
}

// Package scenario runs the benchmark's scenarios against a private PostgreSQL, a
// versitygw and the cairn binary, each returning a report.Result.
package scenario

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cairnrun/cairn/bench/internal/cairn"
	"github.com/cairnrun/cairn/bench/internal/pgserver"
	"github.com/cairnrun/cairn/bench/internal/proc"
	"github.com/cairnrun/cairn/bench/internal/report"
	"github.com/cairnrun/cairn/bench/internal/s3server"
)

// Scale sizes the scenarios; every field has a flag in cmd/bench.
type Scale struct {
	ThroughputRuns int // runs of the 10-step chain in flight
	// ThroughputConcurrency, when positive, adds a round with one dispatcher at
	// this CAIRN_CONCURRENCY.
	ThroughputConcurrency int
	LatencyRuns           int // chains run one at a time
	FanoutWidth           int // parallel steps between root and join
	APIRequests           int // requests per measurement, serial
	APIClients            int // concurrent clients
	LargeMiB              int // output of the large-output step
	RecoveryRuns          int // one-step sleep runs in flight at the kill
	WakeRuns              int // runs of one durable sleep woken at once
	EventsSent            int // events per measurement of the events scenario
	EventWaits            int // runs waiting on distinct keys in the events scenario
	MapItems              int // items of the map scenario's one map
	StartupRuns           int // non-terminal runs in the database at start-up
	ListRuns              int // runs in the catalog the list scenario pages through
	GrowthRuns            int // finished runs the growth scenario fills the catalog with
	ListRequests          int // listings per filter (a first page and the following ones)
	RiverJobs             int // jobs River burns down
	PgbenchSeconds        int // per pgbench run
	ExecRuns              int // exec: chains of no-op exec steps per round, one at a time
	ExecItems             int // exec: items of the map of no-op exec steps
	ExecRounds            int // exec: alternated rounds of every variant
	FsyncTest             bool
}

// Env is what every scenario shares.
type Env struct {
	Work     string // scratch folder: logs, caches, data
	PG       *pgserver.Server
	S3       *s3server.Server
	Bucket   string
	CairnBin string
	// DB is a pool on the catalog database (CatalogDB).
	DB *pgxpool.Pool
	// API is a `cairn serve --no-dispatcher`, alive for the whole benchmark: runs are
	// created through it.
	API      *cairn.Server
	Client   *cairn.Client
	Machine  proc.Machine
	Versions map[string]string
	// PGSettings are the server settings, recorded in every result.
	PGSettings map[string]string
	Scale      Scale
	Log        io.Writer
	// Profiles collects what profile.json reports, by scenario and phase.
	Profiles []Profile

	serverSeq atomic.Int64
	// catalog is the database Cairn's servers and DB are on: CatalogDB unless a
	// scenario switched to a copy (UseCatalog).
	catalog string
}

// CatalogDB is the name of Cairn's database, and CatalogRole the role Cairn connects
// as: the benchmark's own queries run as the superuser, so pg_stat_statements tells
// them apart.
const (
	CatalogDB   = "cairn"
	CatalogRole = "cairn"
)

// Catalog returns the name of the database Cairn's servers and DB are on.
func (e *Env) Catalog() string { return cmp.Or(e.catalog, CatalogDB) }

// Connect opens DB on the current catalog and starts the API server and its client.
func (e *Env) Connect(ctx context.Context) error {
	var err error
	if e.DB, err = pgxpool.New(ctx, e.PG.URL(e.Catalog())); err != nil {
		return err
	}
	cfg := e.ServerConfig("api")
	cfg.NoDispatcher = true
	if e.API, err = cairn.StartServer(ctx, cfg); err != nil {
		return err
	}
	e.Client = cairn.NewClient(e.API.URL)
	return nil
}

// Disconnect stops the API server and closes DB: every connection of the
// benchmark's to the catalog, once no dispatcher runs.
func (e *Env) Disconnect() {
	if e.Client != nil {
		e.Client.Close()
	}
	if e.API != nil {
		e.API.Stop()
	}
	if e.DB != nil {
		e.DB.Close()
	}
	e.Client, e.API, e.DB = nil, nil, nil
}

// CopyCatalog makes database to a copy of the current catalog (CREATE DATABASE …
// TEMPLATE, which needs the catalog without connections: the API server is
// restarted). No dispatcher may be running.
func (e *Env) CopyCatalog(ctx context.Context, to string) error {
	e.Disconnect()
	err := e.superuser(ctx, `CREATE DATABASE `+pgx.Identifier{to}.Sanitize()+
		` TEMPLATE `+pgx.Identifier{e.Catalog()}.Sanitize()+` OWNER `+CatalogRole)
	if cerr := e.Connect(ctx); err == nil {
		err = cerr
	}
	return err
}

// UseCatalog moves DB and the API server to database db (CatalogDB, or a copy
// CopyCatalog made); the servers started after it connect to db too. No
// dispatcher may be running.
func (e *Env) UseCatalog(ctx context.Context, db string) error {
	if db == e.Catalog() {
		return nil
	}
	e.Disconnect()
	e.catalog = db
	return e.Connect(ctx)
}

// DropCatalog drops database db, which must not be the current catalog.
func (e *Env) DropCatalog(ctx context.Context, db string) error {
	if db == e.Catalog() {
		return fmt.Errorf("drop catalog %s: it is in use", db)
	}
	return e.superuser(ctx, `DROP DATABASE IF EXISTS `+pgx.Identifier{db}.Sanitize()+` WITH (FORCE)`)
}

// superuser runs q as the superuser on the postgres database.
func (e *Env) superuser(ctx context.Context, q string) error {
	conn, err := pgx.Connect(ctx, e.PG.URL("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, q); err != nil {
		return fmt.Errorf("%s: %w", q, err)
	}
	return nil
}

// Logf prints a progress line.
func (e *Env) Logf(format string, args ...any) {
	fmt.Fprintf(e.Log, "bench: "+format+"\n", args...)
}

// NewResult starts a result with the common settings.
func (e *Env) NewResult(scenario string) *report.Result {
	r := report.New(scenario, e.Machine, e.Versions)
	r.Settings["postgres"] = e.PGSettings
	return r
}

// ServerConfig returns the configuration of a `cairn serve` on the catalog; name
// tells its files apart.
func (e *Env) ServerConfig(name string) cairn.ServerConfig {
	return cairn.ServerConfig{
		Bin:         e.CairnBin,
		DatabaseURL: e.PG.URLAs(CatalogRole, e.Catalog()),
		BlobURL:     e.S3.BlobURL(e.Bucket),
		Env:         e.S3.Env(),
		Dir:         filepath.Join(e.Work, "cairn"),
		Name:        name + "-" + strconv.FormatInt(e.serverSeq.Add(1), 10),
	}
}

// StartDispatchers starts n `cairn serve` processes with dispatchers.
func (e *Env) StartDispatchers(ctx context.Context, n int, tweak func(*cairn.ServerConfig)) ([]*cairn.Server, error) {
	var out []*cairn.Server
	for i := 0; i < n; i++ {
		cfg := e.ServerConfig("dispatcher")
		if tweak != nil {
			tweak(&cfg)
		}
		s, err := cairn.StartServer(ctx, cfg)
		if err != nil {
			StopAll(out)
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// StopAll stops servers in parallel.
func StopAll(servers []*cairn.Server) {
	var wg sync.WaitGroup
	for _, s := range servers {
		wg.Go(s.Stop)
	}
	wg.Wait()
}

// DeployFresh deploys a bundle and empties the run tables (ResetCatalog): how each
// scenario starts.
func (e *Env) DeployFresh(ctx context.Context, files map[string]cairn.File) error {
	if _, err := e.Client.Deploy(ctx, files); err != nil {
		return err
	}
	return e.ResetCatalog(ctx)
}

// measuredTables are the tables a measurement writes, which ResetCatalog empties.
var measuredTables = []string{"runs", "steps", "attempts", "step_edges", "events", "idempotency_keys"}

// ResetCatalog empties the run tables (attempts named: no foreign key leads to
// them from steps since migration 00031; their live logs cascade) and writes a
// checkpoint, so that each measurement starts from the same state. No dispatcher
// may be running.
func (e *Env) ResetCatalog(ctx context.Context) error {
	// A dispatcher left idle between rounds (exec) still polls: its
	// statements and the TRUNCATE's locks may deadlock, which a second try ends.
	var err error
	for try := 0; try < 5; try++ {
		if _, err = e.DB.Exec(ctx, `TRUNCATE `+strings.Join(measuredTables, ", ")+` CASCADE`); err == nil {
			break
		}
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "40P01" {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("reset catalog: %w", err)
	}
	if _, err := e.DB.Exec(ctx, `CHECKPOINT`); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return nil
}

// CreateRuns starts n runs of workflow through the API with clients concurrent
// requests and returns their ids in creation order per client.
func (e *Env) CreateRuns(ctx context.Context, workflow string, n, clients int) ([]string, error) {
	ids := make([]string, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, clients)
	for c := 0; c < clients; c++ {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n || ctx.Err() != nil {
					return
				}
				r, err := e.Client.StartRun(ctx, workflow)
				if err != nil {
					errs[c] = err
					return
				}
				ids[i] = r.ID
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return ids, nil
}

// WaitRunsDone polls the catalog until no run is pending or running, or timeout.
func (e *Env) WaitRunsDone(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var left int
		if err := e.DB.QueryRow(ctx, `SELECT count(*) FROM runs WHERE status IN ('pending', 'running')`).Scan(&left); err != nil {
			return err
		}
		if left == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d runs still unfinished after %s", left, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// RunsNotSucceeded counts runs that ended otherwise than succeeded.
func (e *Env) RunsNotSucceeded(ctx context.Context) (int, error) {
	var n int
	err := e.DB.QueryRow(ctx, `SELECT count(*) FROM runs WHERE status <> 'succeeded'`).Scan(&n)
	return n, err
}

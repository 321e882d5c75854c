package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/pflag"

	"github.com/cairnrun/cairn/bundle"
	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/client"
)

// retentionFlag is --retention: the server's retention of finished runs, for the
// workflows whose cairn.yaml sets none: "succeeded=7d,failed=30d,canceled=7d"
// (a status left out is kept forever), or one period for all three ("14d").
// Empty: runs are kept forever.
type retentionFlag struct {
	d   catalog.RetentionDefaults
	raw string
}

func (f *retentionFlag) String() string { return f.raw }
func (f *retentionFlag) Type() string   { return "retention" }

func (f *retentionFlag) Set(s string) error {
	var d catalog.RetentionDefaults
	d.Archive = f.d.Archive
	s = strings.TrimSpace(s)
	if s == "" {
		f.d, f.raw = d, s
		return nil
	}
	period := func(v string) (p bundle.RetentionPeriod, err error) {
		p, err = bundle.ParseRetentionPeriod(strings.TrimSpace(v))
		if err != nil {
			return p, err
		}
		if !p.Forever && (p.D < bundle.MinRetention || p.D > bundle.MaxRetention) {
			return p, fmt.Errorf("retention %s: must be at least %s and at most ten years, or forever", p, bundle.MinRetention)
		}
		if p.Forever {
			p.D = 0
		}
		return p, nil
	}
	if !strings.Contains(s, "=") {
		p, err := period(s)
		if err != nil {
			return err
		}
		d.Succeeded, d.Failed, d.Canceled = p.D, p.D, p.D
		f.d, f.raw = d, s
		return nil
	}
	for _, part := range strings.Split(s, ",") {
		status, v, _ := strings.Cut(part, "=")
		p, err := period(v)
		if err != nil {
			return err
		}
		switch strings.TrimSpace(status) {
		case "succeeded":
			d.Succeeded = p.D
		case "failed":
			d.Failed = p.D
		case "canceled":
			d.Canceled = p.D
		default:
			return fmt.Errorf("retention: unknown status %q: use succeeded, failed and canceled", status)
		}
	}
	f.d, f.raw = d, s
	return nil
}

// registerRetention adds --retention, --archive-runs, --idempotency-ttl and
// --audit-retention.
func (f *runtimeFlags) registerRetention(fs *pflag.FlagSet) {
	fs.Var(&f.retention, "retention", "how long finished runs are kept when their workflow's cairn.yaml says nothing: succeeded=7d,failed=30d,canceled=7d (a status left out: forever), or one period for all (14d); empty: forever")
	fs.BoolVar(&f.archiveRuns, "archive-runs", false, "archive runs (run, steps, attempts, events as JSON Lines) to the blob store before retention deletes them, when their workflow's cairn.yaml says nothing")
	fs.DurationVar(&f.idempotencyTTL, "idempotency-ttl", catalog.DefaultIdempotencyTTL, "how long an Idempotency-Key of POST /v1/workflows/{name}/runs holds (past it, the key starts a new run), and how long received events (POST /v1/events) are kept")
	fs.Func("audit-retention", "how long audit log records are kept (90d, 1y…; at least a day); empty: forever. Export what you must keep longer first (cairn audit export)", func(v string) error {
		p, err := bundle.ParseRetentionPeriod(strings.TrimSpace(v))
		switch {
		case err != nil:
			return err
		case p.Forever:
			f.auditRetention = 0
		case p.D < 24*time.Hour:
			return fmt.Errorf("audit retention %s: keep at least a day", p)
		default:
			f.auditRetention = p.D
		}
		return nil
	})
	bindEnv(fs, map[string]string{
		"retention":       "CAIRN_RETENTION",
		"archive-runs":    "CAIRN_ARCHIVE_RUNS",
		"idempotency-ttl": "CAIRN_IDEMPOTENCY_TTL",
		"audit-retention": "CAIRN_AUDIT_RETENTION",
	})
}

// retentionDefaults is what --retention and --archive-runs say.
func (f *runtimeFlags) retentionDefaults() catalog.RetentionDefaults {
	d := f.retention.d
	d.Archive = f.archiveRuns
	return d
}

// showArchivedRun prints a run read from its archive (GET /v1/archived-runs/{id})
// as run get prints a run, or, as JSON, the API's answer (run, steps, attempts,
// events).
func (c *cli) showArchivedRun(ctx context.Context, cl *client.Client, id uuid.UUID, asJSON bool) error {
	resp, err := cl.GetArchivedRunWithResponse(ctx, id)
	if err != nil {
		return fmt.Errorf("get archived run %s: %w", id, err)
	}
	if resp.JSON200 == nil {
		return unexpected("get archived run", resp.StatusCode())
	}
	if asJSON {
		return writeJSON(c.stdout, json.RawMessage(resp.Body))
	}
	fmt.Fprintf(c.stdout, "archived %s (%s)\n", formatTime(resp.JSON200.ArchivedAt), resp.JSON200.BlobKey)
	return c.writeRun(&resp.JSON200.Run, deref(resp.JSON200.Steps))
}

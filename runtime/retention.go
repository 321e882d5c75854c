package runtime

import (
	"bytes"
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/cairnrun/cairn/blobstore"
	"github.com/cairnrun/cairn/catalog"
)

// Defaults of the reaper (Config.ReapInterval, Config.ReapBatch).
const (
	DefaultReapInterval = time.Minute
	DefaultReapBatch    = 100
)

// reapLoop deletes the finished runs past their retention and the expired
// idempotency keys, in every dispatcher: a pass every ReapInterval (jittered)
// takes batches of ReapBatch runs, each deleted in its own short transaction
// that skips the runs another holds (catalog.RunsDelete), until a batch comes
// back short. The runs to archive are written to the blob store first; one whose
// archive cannot be written is kept for a later pass.
func (d *Dispatcher) reapLoop(ctx context.Context) {
	for d.idle(ctx, d.cfg.ReapInterval) {
		d.Reap(ctx)
	}
}

// Reap runs one pass of the reaper now: it deletes the runs past their
// retention (archiving those configured so) and the expired idempotency keys, and
// returns how many runs it deleted. The dispatcher's loop calls it every
// ReapInterval; tests and tools may call it on a dispatcher not started.
func (d *Dispatcher) Reap(ctx context.Context) int {
	n := d.reapRuns(ctx)
	d.expireKeys(ctx)
	return n
}

// reapRuns is one pass over the expired runs; it returns how many it deleted.
func (d *Dispatcher) reapRuns(ctx context.Context) int {
	total := 0
	for ctx.Err() == nil {
		expired, err := d.store.RunsExpired(ctx, d.cfg.Retention, d.cfg.ReapBatch)
		if err != nil {
			d.noteDBError()
			if ctx.Err() == nil {
				d.logger.Warn("list expired runs failed", "error", err)
			}
			return total
		}
		if len(expired) == 0 {
			return total
		}
		ids := make([]uuid.UUID, 0, len(expired))
		archives := map[uuid.UUID]string{}
		for _, e := range expired {
			if e.Archive {
				key, err := d.archiveRun(ctx, e.ID)
				if err != nil {
					if ctx.Err() == nil {
						d.logger.Warn("archive run failed; it is kept for a later pass", "run_id", e.ID, "error", err)
					}
					continue
				}
				archives[e.ID] = key
			}
			ids = append(ids, e.ID)
		}
		deleted, err := d.store.RunsDelete(ctx, d.cfg.Retention, ids, archives)
		if err != nil {
			d.noteDBError()
			if ctx.Err() == nil {
				d.logger.Warn("delete expired runs failed", "error", err)
			}
			return total
		}
		archived := 0
		for _, id := range deleted {
			if _, ok := archives[id]; ok {
				archived++
			}
		}
		d.metrics.runsReaped.Add(float64(len(deleted)))
		d.metrics.runsArchived.Add(float64(archived))
		total += len(deleted)
		if len(deleted) > 0 {
			d.logger.Debug("deleted runs past their retention", "count", len(deleted), "archived", archived)
		}
		// A short batch, or one whose runs others hold or could not be
		// archived: the next pass takes the rest.
		if len(expired) < d.cfg.ReapBatch || len(deleted) == 0 {
			return total
		}
	}
	return total
}

// archiveRun writes run id's archive (catalog.Archive as JSON Lines) to the blob
// store and returns its key.
func (d *Dispatcher) archiveRun(ctx context.Context, id uuid.UUID) (string, error) {
	a, err := d.store.RunArchive(ctx, id)
	if err != nil {
		return "", err
	}
	var buf bytes.Buffer
	if _, err := a.WriteTo(&buf); err != nil {
		return "", err
	}
	obj, err := d.blobs.Put(ctx, blobstore.KindArchives, &buf, blobstore.PutOptions{
		ContentType: "application/x-ndjson", Size: int64(buf.Len())})
	if err != nil {
		return "", err
	}
	return obj.Key, nil
}

// expireKeys deletes the expired idempotency keys, in batches.
func (d *Dispatcher) expireKeys(ctx context.Context) {
	for ctx.Err() == nil {
		n, err := d.store.IdempotencyKeysExpire(ctx, d.cfg.ReapBatch*10)
		if err != nil {
			d.noteDBError()
			if ctx.Err() == nil {
				d.logger.Warn("expire idempotency keys failed", "error", err)
			}
			return
		}
		d.metrics.keysExpired.Add(float64(n))
		if n < d.cfg.ReapBatch*10 {
			return
		}
	}
}

// ReadArchive reads the archive of a run deleted by retention: catalog
// ErrNotFound when it was not archived.
func ReadArchive(ctx context.Context, store *catalog.Store, blobs Blobs, id uuid.UUID) (*catalog.Archive, error) {
	rec, err := store.ArchivedRunGet(ctx, id)
	if err != nil {
		return nil, err
	}
	rc, _, err := blobs.Get(ctx, rec.BlobKey, blobstore.GetOptions{})
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return catalog.ReadArchive(rc)
}

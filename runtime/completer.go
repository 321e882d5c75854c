package runtime

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/cairnrun/cairn/catalog"
)

// maxCompletionBatch bounds the attempts finished in one transaction.
const maxCompletionBatch = 256

// completion is an attempt's outcome waiting to be committed.
type completion struct {
	p    *catalog.StepFinishParams
	done chan error
}

// completeLoop commits outcomes in batches: a group commit. When idle it commits an
// outcome at once; under load, what accumulated during one commit goes into the next,
// so the batch grows with the load and the latency stays one commit.
func (d *Dispatcher) completeLoop(ctx context.Context) {
	batch := make([]*completion, 0, maxCompletionBatch)
	for {
		batch = batch[:0]
		select {
		case <-ctx.Done():
			return
		case c := <-d.completions:
			batch = append(batch, c)
		}
	drain:
		for len(batch) < maxCompletionBatch {
			select {
			case c := <-d.completions:
				batch = append(batch, c)
			default:
				break drain
			}
		}
		// One lock order for every batch: fewer deadlocks between dispatchers.
		slices.SortFunc(batch, func(a, b *completion) int {
			if c := cmp.Compare(a.p.RunID.String(), b.p.RunID.String()); c != 0 {
				return c
			}
			return cmp.Compare(a.p.Key, b.p.Key)
		})
		params := make([]*catalog.StepFinishParams, len(batch))
		for i, c := range batch {
			params[i] = c.p
		}
		// Not ctx: outcomes are written after the loops are told to end, until Stop
		// gives up on them.
		cctx, cancel := context.WithTimeout(d.abandonCtx, 10*time.Second)
		results, err := d.store.StepFinishBatch(cctx, params)
		cancel()
		for i, c := range batch {
			if err != nil {
				c.done <- err
			} else {
				c.done <- results[i]
			}
		}
	}
}

// finish commits one outcome through the batcher and returns its result, or
// errAbandoned once Stop gave up on writing outcomes.
func (d *Dispatcher) finish(p *catalog.StepFinishParams) error {
	c := &completion{p: p, done: make(chan error, 1)}
	select {
	case d.completions <- c:
	case <-d.abandonCtx.Done():
		return errAbandoned
	}
	select {
	case err := <-c.done:
		return err
	case <-d.abandonCtx.Done():
		return errAbandoned
	}
}

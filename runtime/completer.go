package runtime

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"time"

	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/functions"
)

// maxCompletionBatch bounds the attempts finished in one transaction.
const maxCompletionBatch = 256

// completion is an attempt's outcome waiting to be committed.
type completion struct {
	p    *catalog.StepFinishParams
	done chan finished
}

// finished is the answer to a completion: the write's error, and whether its
// batch leased steps and had room left (the claim loop then has nothing new).
type finished struct {
	err      error
	followed bool
	// mapWorked: the finish leased next instances of the step's map (a map
	// instance's): the map loop has nothing to do for it now.
	mapWorked bool
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
		cctx, cancel := context.WithTimeout(d.life.abandonCtx, 10*time.Second)
		start := time.Now()
		next, room := d.claimNext(batch)
		results, claimed, err := d.store.StepFinishClaim(cctx, params, next)
		cancel()
		d.startClaimed(claimed, room, start)
		if len(batch) > 1 && errors.Is(err, catalog.ErrInvalidInput) {
			d.finishEach(batch)
			continue
		}
		followed := len(claimed) > 0 && len(claimed) < room
		worked := mapsLeased(claimed)
		for i, c := range batch {
			if err != nil {
				c.done <- finished{err: err}
				continue
			}
			f := finished{err: results[i], followed: followed && results[i] == nil}
			if parent, ok := catalog.MapParentOf(c.p.Key); ok && results[i] == nil {
				f.mapWorked = worked[catalog.MapRef{RunID: c.p.RunID, Key: parent}]
			}
			c.done <- f
		}
	}
}

// mapsLeased returns the maps of which claimed has instances.
func mapsLeased(claimed []catalog.Claimed) map[catalog.MapRef]bool {
	var out map[catalog.MapRef]bool
	for _, c := range claimed {
		if parent, ok := catalog.MapParentOf(c.Key); ok {
			if out == nil {
				out = map[catalog.MapRef]bool{}
			}
			out[catalog.MapRef{RunID: c.RunID, Key: parent}] = true
		}
	}
	return out
}

// finishEach commits the outcomes of a batch the catalog refused for a value of
// one of them (catalog.ErrInvalidInput: an output with \u0000), each in a
// transaction of its own: only the attempts whose values are refused are told so
// (and fail their steps, report), the others are written.
func (d *Dispatcher) finishEach(batch []*completion) {
	for _, c := range batch {
		ctx, cancel := context.WithTimeout(d.life.abandonCtx, 10*time.Second)
		results, err := d.store.StepFinishBatch(ctx, []*catalog.StepFinishParams{c.p})
		cancel()
		if err == nil {
			err = results[0]
		}
		c.done <- finished{err: err}
	}
}

// finish commits one outcome through the batcher and returns its result, or
// errAbandoned once Stop gave up on writing outcomes. followed says the finish
// also leased steps and had room left: every step it made ready that this
// dispatcher may claim is leased.
func (d *Dispatcher) finish(p *catalog.StepFinishParams) (followed, mapWorked bool, err error) {
	c := &completion{p: p, done: make(chan finished, 1)}
	select {
	case d.completions <- c:
	case <-d.life.abandonCtx.Done():
		return false, false, errAbandoned
	}
	select {
	case f := <-c.done:
		return f.followed, f.mapWorked, f.err
	case <-d.life.abandonCtx.Done():
		return false, false, errAbandoned
	}
}

// claimNext says whether the finish of batch should also lease the dependents
// its successes make ready, and the next instances of the maps whose instances
// succeeded (catalog.StepFinishClaim), and takes the free slots
// they may use (room; the caller gives back what they do not use, startClaimed):
// when the dispatcher claims, has a free slot, and its last claim left no step
// waiting. Nil otherwise: the claim loop claims them, woken when the finishing
// attempts give their slots back.
func (d *Dispatcher) claimNext(batch []*completion) (*catalog.ClaimNext, int) {
	if !d.drained.Load() || !d.claiming() {
		return nil, 0
	}
	succeeded := false
	for _, c := range batch {
		if c.p.Outcome == catalog.OutcomeSucceeded {
			succeeded = true
			break
		}
	}
	if !succeeded {
		// Nothing can be made ready: the slots stay with the claim loop.
		return nil, 0
	}
	room := d.takeSlots()
	if room == 0 {
		return nil, 0
	}
	return &catalog.ClaimNext{Owner: d.cfg.ID, Tags: d.cfg.Tags, Limit: room, TTL: d.cfg.LeaseTTL, Page: d.mapPageCached}, room
}

// startClaimed starts the attempts of the steps a finish leased (claimNext), and
// gives back the slots they do not use. Once the dispatcher stops claiming, it
// hands them back instead: shutdown no longer waits for new attempts.
func (d *Dispatcher) startClaimed(claimed []catalog.Claimed, room int, claimStart time.Time) {
	d.release(room - len(claimed))
	if len(claimed) == 0 {
		return
	}
	if !d.claiming() {
		d.handBack(claimed)
		d.release(len(claimed))
		return
	}
	d.metrics.claimed.Add(float64(len(claimed)))
	for i := range claimed {
		d.startAttempt(claimed[i], claimStart)
	}
}

// handBack returns steps leased while the dispatcher stopped, as a shutdown
// returns those still running (OutcomeHandback: not counted, claimable at once).
func (d *Dispatcher) handBack(claimed []catalog.Claimed) {
	slices.SortFunc(claimed, func(a, b catalog.Claimed) int { // the completions' lock order
		if c := cmp.Compare(a.RunID.String(), b.RunID.String()); c != 0 {
			return c
		}
		return cmp.Compare(a.Key, b.Key)
	})
	params := make([]*catalog.StepFinishParams, len(claimed))
	for i, c := range claimed {
		e, _ := json.Marshal(&functions.Error{Message: "handed back at dispatcher shutdown", Retryable: true, Code: "shutdown"})
		params[i] = &catalog.StepFinishParams{RunID: c.RunID, Key: c.Key, LeaseToken: c.LeaseToken,
			Outcome: catalog.OutcomeHandback, Error: e, Retryable: true}
	}
	ctx, cancel := context.WithTimeout(d.life.abandonCtx, 10*time.Second)
	defer cancel()
	if _, err := d.store.StepFinishBatch(ctx, params); err != nil {
		d.logger.Warn("hand back steps leased at shutdown; they are swept when their leases expire", "error", err, "steps", len(claimed))
	}
}

package runtime

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/cairnrun/cairn/blobstore"
	"github.com/cairnrun/cairn/bundle"
	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/expr"
	"github.com/cairnrun/cairn/functions"
)

// Maps (docs/functions.md, "Maps"). The dispatcher that claims a map step evaluates
// map.over and suspends the step with its items (catalog.MapStart): a list inline,
// or the $blob holding them, read as a stream a page at a time, never whole. Every
// dispatcher's map loop then creates instances in pages as earlier ones finish
// (catalog.MapWork), and resolves the map step, with the list of the instances'
// outputs in item order (a blob when large), once they have all ended. Instances
// are ordinary steps, claimed and run like any other with item and index in their
// envelope.

// CodeMapFailed is the error code of a map step with more failed instances than
// it tolerates.
const CodeMapFailed = "map_failed"

// startMap evaluates a claimed map step's items and suspends it until its
// instances have run.
func (d *Dispatcher) startMap(ctx context.Context, a *attempt, step *bundle.StepDefinition) {
	c := a.claim
	fail := func(format string, args ...any) {
		d.report(a, outcome{status: catalog.OutcomeFailed,
			err: &functions.Error{Message: "map.over: " + fmt.Sprintf(format, args...), Code: expr.Code}}, step)
	}
	run, err := d.store.RunGet(ctx, c.RunID)
	if err != nil {
		d.report(a, infraOutcome(a, "read the run's labels", err), step)
		return
	}
	prg, err := expr.StepEnv.Compile(step.Map.Over)
	if err != nil {
		fail("%v", err)
		return
	}
	vars, err := stepVars(c, step)
	if err != nil {
		fail("%v", err)
		return
	}
	vars[expr.Labels] = map[string]string(run.Labels)
	over, err := prg.Eval(ctx, vars)
	if err != nil {
		fail("%v", err)
		return
	}
	m := step.Map
	p := &catalog.MapStartParams{MaxParallel: m.MaxParallel, TolerateCount: m.TolerateCount,
		ToleratePercent: m.ToleratePercent, IsPercent: m.TolerateIsPercent}
	if ref, ok := blobstore.ParseRef(over); ok {
		key, err := ref.Key()
		if err != nil {
			fail("a bad $blob reference: %v", err)
			return
		}
		format, err := d.blobFormat(ctx, key)
		if err != nil {
			d.report(a, infraOutcome(a, "read the map's items", err), step)
			return
		}
		p.BlobKey, p.BlobFormat = key, format
	} else if t := bytes.TrimSpace(over); len(t) > 0 && t[0] == '[' {
		p.Items = over
	} else {
		fail("gave %s, not a list or a $blob of JSON (an array, or JSON Lines)", shortJSON(over))
		return
	}
	a.reporting.Store(true)
	if d.suspendWritten(a, "start the map", "map.over", nil, func() error { return d.store.MapStart(d.life.abandonCtx, a.lease(), p) }) != nil {
		return
	}
	d.metrics.attempts.WithLabelValues("suspended").Inc()
	d.mapNudge()
}

func shortJSON(v json.RawMessage) string {
	s := string(v)
	if len(s) > 64 {
		s = s[:61] + "..."
	}
	return s
}

// blobFormat tells a JSON array (its first byte that is not white space is "[")
// from JSON Lines.
func (d *Dispatcher) blobFormat(ctx context.Context, key string) (string, error) {
	rc, _, err := d.blobs.Get(ctx, key, blobstore.GetOptions{Length: 4096})
	if err != nil {
		return "", err
	}
	defer rc.Close()
	head, err := io.ReadAll(rc)
	if err != nil {
		return "", err
	}
	if t := bytes.TrimSpace(head); len(t) > 0 && t[0] == '[' {
		return "array", nil
	}
	return "lines", nil
}

// mapNudge makes the map loop look at every open map now.
func (d *Dispatcher) mapNudge() {
	d.mapMu.Lock()
	d.mapAll = true
	d.mapMu.Unlock()
	d.mapWake()
}

// mapNudgeInstance makes the map loop work the map of the instance key (its
// step's key, then "[index]": cairn_map_expand) now, without listing the
// open maps first: an instance that ended left room in its own map only.
func (d *Dispatcher) mapNudgeInstance(runID uuid.UUID, key string) {
	parent, ok := catalog.MapParentOf(key)
	if !ok {
		d.mapNudge()
		return
	}
	d.mapMu.Lock()
	if d.mapDue == nil {
		d.mapDue = map[catalog.MapRef]struct{}{}
	}
	d.mapDue[catalog.MapRef{RunID: runID, Key: parent}] = struct{}{}
	d.mapMu.Unlock()
	d.mapWake()
}

func (d *Dispatcher) mapWake() {
	select {
	case d.hints.maps <- struct{}{}:
	default:
	}
}

// mapTake returns the maps the nudges since the last call named, or all true
// when one asked for every open map.
func (d *Dispatcher) mapTake() (refs []catalog.MapRef, all bool) {
	d.mapMu.Lock()
	defer d.mapMu.Unlock()
	for ref := range d.mapDue {
		refs = append(refs, ref)
	}
	clear(d.mapDue)
	all, d.mapAll = d.mapAll, false
	return refs, all
}

// mapLoop is every dispatcher's map expander: every PollInterval, and when a map
// starts, it works each open map (catalog.MapWork) until it has nothing more to
// do for now; when an instance of this dispatcher ends, it works that
// instance's map the same way (mapNudgeInstance), and the others only if they
// were not listed within the poll interval.
func (d *Dispatcher) mapLoop(ctx context.Context) {
	worker := catalog.MapWorker{Page: d.mapPage, Finish: d.mapFinish, Refused: mapRefused}
	var listed time.Time // when every open map was last listed
	for {
		timer := time.NewTimer(d.cfg.PollInterval)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-d.hints.maps:
			timer.Stop()
		case <-timer.C:
		}
		maps, every := d.mapTake()
		// Instances ending one after the other wake the loop before its timer:
		// every open map is still listed once a poll interval.
		if every || time.Since(listed) >= d.cfg.PollInterval {
			open, err := d.store.MapsOpen(ctx, 100)
			if err != nil {
				d.noteDBError()
				if ctx.Err() == nil {
					d.logger.Warn("list open maps failed", "error", err)
				}
				continue
			}
			listed = time.Now()
			for _, ref := range open {
				if !slices.Contains(maps, ref) {
					maps = append(maps, ref)
				}
			}
		}
		for _, ref := range maps {
			d.mapWork(ctx, ref, worker)
		}
	}
}

// mapWork works one map until it creates no more instances for now.
func (d *Dispatcher) mapWork(ctx context.Context, ref catalog.MapRef, worker catalog.MapWorker) {
	for ctx.Err() == nil {
		created, resolved, err := d.store.MapWork(ctx, ref, worker)
		if err != nil {
			if ctx.Err() == nil {
				d.logger.Warn("map work failed", "run_id", ref.RunID, "step", ref.Key, "error", err)
			}
			return
		}
		if created > 0 {
			d.metrics.mapInstances.Add(float64(created))
			d.nudge()
		}
		if resolved {
			d.nudge()
		}
		// Fewer than a page: the map had no more room (or items) than that, so
		// another look now would create nothing (one transaction per
		// instance saved while a map runs at its max_parallel).
		if created < catalog.MapPageSize {
			return
		}
	}
}

// mapPage reads up to n items of a blob map from its cursor: from the items
// cache (mapItemsCache) when an earlier read read ahead to there, else from the
// blob, read from that offset as a stream, as far as the n items and a read-ahead
// (mapReadAhead items, at most mapReadAheadBytes), which the cache keeps. A map
// at max_parallel creates an instance or two each time one ends: its items come
// from memory, not from a request to the blob store each.
func (d *Dispatcher) mapPage(ctx context.Context, st *catalog.MapState, n int) (json.RawMessage, int64, bool, error) {
	return d.mapItems.page(st, n, func(offset int64) (io.ReadCloser, error) {
		rc, _, err := d.blobs.Get(ctx, st.BlobKey, blobstore.GetOptions{Offset: offset})
		return rc, err
	})
}

// page is mapPage with open reading st's blob from an offset.
func (c *mapItemsCache) page(st *catalog.MapState, n int, open func(offset int64) (io.ReadCloser, error)) (json.RawMessage, int64, bool, error) {
	if items, next, end, ok := c.take(st.BlobKey, st.NextOffset, n); ok {
		return items, next, end, nil
	}
	rc, err := open(st.NextOffset)
	if err != nil {
		return nil, 0, false, err
	}
	defer rc.Close()
	r := &readErr{r: rc}
	list, ends, end, err := readItemList(r, st.BlobFormat, st.NextOffset, n, max(n, mapReadAhead), mapReadAheadBytes)
	if err != nil && r.err == nil {
		// The blob was read: bytes that are not items stay so, no try will
		// change them (a read that failed is tried again).
		err = fmt.Errorf("%w: %w", catalog.ErrInvalidInput, err)
	}
	if err != nil {
		return nil, 0, false, err
	}
	k := min(n, len(list))
	next := st.NextOffset
	if k > 0 {
		next = ends[k-1]
	}
	if k < len(list) {
		c.put(st.BlobKey, next, list[k:], ends[k:], end)
	}
	return itemArray(list[:k]), next, end && k == len(list), nil
}

// mapPageCached is mapPage from the items cache only: ok false when it has not
// read ahead to st's cursor (a finish that creates instances never waits for
// the blob store; the map loop reads it).
func (d *Dispatcher) mapPageCached(_ context.Context, st *catalog.MapState, n int) (json.RawMessage, int64, bool, error) {
	if items, next, end, ok := d.mapItems.take(st.BlobKey, st.NextOffset, n); ok {
		return items, next, end, nil
	}
	return nil, 0, false, errNotCached
}

// errNotCached: mapPageCached has not the items asked for.
var errNotCached = errors.New("map items not read ahead")

const (
	// mapReadAhead and mapReadAheadBytes bound what mapPage reads past the items
	// asked for, kept for the next pages (mapItemsCache).
	mapReadAhead      = 1000
	mapReadAheadBytes = 256 << 10
	// mapItemsCached is how many maps' read-ahead the cache keeps.
	mapItemsCached = 16
)

// mapItemsCache keeps items of blob maps read ahead of their cursors, by blob
// key: a blob never changes, so an item read once is the same at its offset
// for every dispatcher. Safe for concurrent use.
type mapItemsCache struct {
	mu      sync.Mutex
	entries map[string]*mapItemsAhead
}

// mapItemsAhead are a blob's items from offset start on: each item and the
// offset just after it; end says the last one ends the blob.
type mapItemsAhead struct {
	start int64
	items []json.RawMessage
	ends  []int64
	end   bool
}

func (c *mapItemsCache) put(key string, start int64, items []json.RawMessage, ends []int64, end bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil {
		c.entries = map[string]*mapItemsAhead{}
	}
	if _, ok := c.entries[key]; !ok && len(c.entries) >= mapItemsCached {
		for k := range c.entries { // any one: maps go on where they left off
			delete(c.entries, k)
			break
		}
	}
	c.entries[key] = &mapItemsAhead{start: start, items: items, ends: ends, end: end}
}

// take returns up to n items of key's blob from offset on, as mapPage does,
// and moves the entry past them; ok false when the cache has none from there.
func (c *mapItemsCache) take(key string, offset int64, n int) (json.RawMessage, int64, bool, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entries[key]
	if e == nil || len(e.items) == 0 || e.start != offset || n <= 0 {
		return nil, 0, false, false
	}
	k := min(n, len(e.items))
	items, next := itemArray(e.items[:k]), e.ends[k-1]
	e.items, e.ends, e.start = e.items[k:], e.ends[k:], next
	end := e.end && len(e.items) == 0
	if len(e.items) == 0 {
		delete(c.entries, key)
	}
	return items, next, end, true
}

// itemArray is the JSON array of items.
func itemArray(items []json.RawMessage) json.RawMessage {
	var out bytes.Buffer
	out.WriteByte('[')
	for i, v := range items {
		if i > 0 {
			out.WriteByte(',')
		}
		out.Write(v)
	}
	out.WriteByte(']')
	return out.Bytes()
}

// readErr keeps the error of a read other than io.EOF.
type readErr struct {
	r   io.Reader
	err error
}

func (r *readErr) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err != nil && err != io.EOF {
		r.err = err
	}
	return n, err
}

// mapRefused is the end of a map whose next items could not be made into
// instances (catalog.MapWorker.Refused): failed, code invalid_output, naming why.
func mapRefused(st *catalog.MapState, err error) catalog.Resolution {
	out := refusedOutcome(fmt.Sprintf("map.over (items from #%d)", st.NextIndex), err)
	b, _ := json.Marshal(out.err)
	return catalog.Resolution{Outcome: catalog.OutcomeFailed, Error: b, Reason: CodeInvalidOutput}
}

// readItemList reads JSON values from r, which starts at byte offset base of a
// blob in format "array" (a JSON array: base 0 is before its "[", any other base
// just after an item) or "lines" (JSON Lines, or any values separated by white
// space): need of them (fewer where the blob ends), then more while there are at
// most ahead in all and the extra ones hold fewer than aheadBytes. ends are the
// offsets just after each item: the cursors to resume from; end says the blob
// ended after the last one.
func readItemList(r io.Reader, format string, base int64, need, ahead, aheadBytes int) ([]json.RawMessage, []int64, bool, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	var src io.Reader = br
	var skipped, shift int64
	if format == "array" && base > 0 {
		// A resume point just after an item: skip the white space and the comma
		// that follow it, and read on as if a new array began there.
		for {
			b, err := br.ReadByte()
			if err != nil {
				return nil, nil, false, fmt.Errorf("items: the JSON array ends without \"]\" (byte %d): %w", base+skipped, err)
			}
			if b == ' ' || b == '\t' || b == '\n' || b == '\r' || b == ',' {
				skipped++
				continue
			}
			_ = br.UnreadByte()
			break
		}
		src, shift = io.MultiReader(strings.NewReader("["), br), 1
	}
	dec := json.NewDecoder(src)
	offset := func() int64 { return base + skipped + dec.InputOffset() - shift }
	if format == "array" {
		if tok, err := dec.Token(); err != nil || tok != json.Delim('[') {
			return nil, nil, false, fmt.Errorf("items: the blob is not a JSON array at byte %d", base)
		}
	}
	var items []json.RawMessage
	var ends []int64
	extra := 0 // bytes of the items past need
	for len(items) < ahead && (len(items) < need || extra < aheadBytes) && dec.More() {
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			if len(items) >= need {
				return items, ends, false, nil // a bad item past those asked for: its own page says so
			}
			return nil, nil, false, fmt.Errorf("items: the item at byte %d: %w", offset(), err)
		}
		if len(items) >= need {
			extra += len(v)
		}
		items = append(items, v)
		ends = append(ends, offset())
	}
	end := !dec.More()
	if end && format == "array" {
		if tok, err := dec.Token(); err != nil || tok != json.Delim(']') {
			if len(items) > need {
				// Past those asked for: the page that reaches the end says so.
				return items[:need], ends[:need], false, nil
			}
			return nil, nil, false, fmt.Errorf("items: the JSON array ends without \"]\" (byte %d)", offset())
		}
	}
	return items, ends, end, nil
}

// mapFinish resolves a map whose instances have all ended: the list of their
// outputs in item order (null for a failed one), inline up to InlineLimit, else
// a blob; failed (code map_failed, the first failures listed) past
// tolerate_failures, else succeeded with the tolerated failures listed.
func (d *Dispatcher) mapFinish(ctx context.Context, st *catalog.MapState, items iter.Seq2[*catalog.MapItem, error], failures []catalog.MapItem) (catalog.Resolution, error) {
	total := st.NextIndex
	type failure struct {
		Index int64           `json:"index"`
		Error json.RawMessage `json:"error"`
	}
	listed := make([]failure, 0, len(failures))
	for _, f := range failures {
		e := json.RawMessage(f.LastError)
		if len(e) == 0 {
			e = json.RawMessage(fmt.Sprintf(`{"message":"item %s"}`, f.Status))
		}
		listed = append(listed, failure{Index: f.Index, Error: e})
	}
	summary := func(msg string) json.RawMessage {
		b, _ := json.Marshal(map[string]any{"message": msg, "code": CodeMapFailed, "failed": st.Failed,
			"items": total, "failures": listed})
		return b
	}
	if st.FailingFast() || !st.Tolerated(st.Failed, total) {
		msg := fmt.Sprintf("%d of %d items failed, over tolerate_failures", st.Failed, total)
		if !st.Expanded {
			msg = fmt.Sprintf("%d items failed, over tolerate_failures: the map stopped after %d items", st.Failed, total)
		}
		return catalog.Resolution{Outcome: catalog.OutcomeFailed, Error: summary(msg), Reason: CodeMapFailed}, nil
	}
	w := newPayloadWriter(ctx, d.blobs, d.cfg.Limits.InlineLimit, d.store)
	w.contentType = "application/json"
	bw := bufio.NewWriterSize(w, 64<<10)
	_ = bw.WriteByte('[')
	first := true
	for it, err := range items {
		if err != nil {
			w.abort(err)
			return catalog.Resolution{}, err
		}
		if !first {
			_ = bw.WriteByte(',')
		}
		first = false
		if it.Status == catalog.StepSucceeded && len(it.Output) > 0 {
			_, _ = bw.Write(it.Output)
		} else {
			_, _ = bw.WriteString("null")
		}
	}
	_ = bw.WriteByte(']')
	if err := bw.Flush(); err != nil {
		w.abort(err)
		return catalog.Resolution{}, err
	}
	out, err := w.finish()
	if err != nil {
		return catalog.Resolution{}, err
	}
	res := catalog.Resolution{Outcome: catalog.OutcomeSucceeded, Output: out, Reason: "map_done"}
	if st.Failed > 0 {
		res.Error = summary(fmt.Sprintf("%d of %d items failed (tolerated)", st.Failed, total))
	}
	return res, nil
}

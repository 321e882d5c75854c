package maintenance_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/cairnrun/cairn/blobstore"
	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/catalog/catalogtest"
	"github.com/cairnrun/cairn/maintenance"
	"github.com/cairnrun/cairn/runtime"
)

// putAged stores content as a payload and dates the object's file age ago.
func putAged(t *testing.T, tb *testBundle, content string, age time.Duration) blobstore.Object {
	t.Helper()
	obj, err := tb.blobs.Put(t.Context(), blobstore.KindPayloads, strings.NewReader(content), blobstore.PutOptions{})
	require.NoError(t, err)
	fs := tb.blobs.(*blobstore.FileStore)
	at := time.Now().Add(-age)
	require.NoError(t, os.Chtimes(filepath.Join(fs.Root(), filepath.FromSlash(obj.Key)), at, at))
	return obj
}

// finishedRunWithOutput creates a run of workflow and finishes its one step
// with output.
func finishedRunWithOutput(t *testing.T, ctx context.Context, s *catalog.Store, workflow string, output json.RawMessage) {
	t.Helper()
	r, _, err := s.RunCreate(ctx, &catalog.RunCreateParams{Workflow: workflow, Input: json.RawMessage(`{}`)})
	require.NoError(t, err)
	claimed, err := s.StepClaim(ctx, "test", 1, time.Minute)
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	require.Equal(t, r.ID, claimed[0].RunID)
	require.NoError(t, s.StepFinish(ctx, &catalog.StepFinishParams{RunID: r.ID, Key: claimed[0].Key,
		LeaseToken: claimed[0].LeaseToken, Outcome: catalog.OutcomeSucceeded, Output: output}))
}

func exists(t *testing.T, tb *testBundle, key string) bool {
	t.Helper()
	_, err := tb.blobs.(blobstore.Store).Stat(t.Context(), key)
	if err == nil {
		return true
	}
	require.ErrorIs(t, err, blobstore.ErrNotFound)
	return false
}

// TestCollector: a pass deletes the old objects no row names, and keeps the
// referenced ones, the young ones and old ones whose key was claimed lately; a
// dry run deletes nothing and reports the same counts; a second pass within
// the interval is skipped.
func TestCollector(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	catalogtest.Version(t, tb.store, "gc", catalog.NewStep{Key: "s", MaxAttempts: 1})
	used := putAged(t, tb, "used by a run", 48*time.Hour)
	garbage := putAged(t, tb, "nobody's", 48*time.Hour)
	young := putAged(t, tb, "nobody's yet", time.Hour)
	claimed := putAged(t, tb, "about to be named", 48*time.Hour)
	finishedRunWithOutput(t, ctx, tb.store, "gc", blobstore.ObjectRef(used).JSON())
	require.NoError(t, tb.store.BlobClaim(ctx, claimed.Key))

	newCollector := func(dry bool, reg prometheus.Registerer) *maintenance.Collector {
		c, err := maintenance.NewCollector(tb.store, tb.blobs.(maintenance.CollectorBlobs),
			&maintenance.CollectorConfig{Grace: 24 * time.Hour, DryRun: dry, Registerer: reg})
		require.NoError(t, err)
		return c
	}

	rep, err := newCollector(true, nil).Collect(ctx, true)
	require.NoError(t, err)
	require.True(t, rep.DryRun)
	require.Equal(t, 4, rep.ScannedObjects)
	require.Equal(t, 1, rep.DeletedObjects)
	require.Equal(t, garbage.Size, rep.DeletedBytes)
	require.True(t, exists(t, tb, garbage.Key), "a dry run deletes nothing")

	reg := prometheus.NewRegistry()
	c := newCollector(false, reg)
	rep, err = c.Collect(ctx, true)
	require.NoError(t, err)
	require.False(t, rep.Skipped)
	require.Equal(t, 1, rep.DeletedObjects)
	require.Equal(t, map[string]maintenance.KindCount{blobstore.KindPayloads: {Objects: 1, Bytes: garbage.Size}}, rep.ByKind)
	require.False(t, exists(t, tb, garbage.Key))
	for _, o := range []blobstore.Object{used, young, claimed} {
		require.True(t, exists(t, tb, o.Key), "%s is kept", o.Key)
	}
	require.Equal(t, float64(garbage.Size), labeledCounter(t, reg, "cairn_blob_gc_reclaimed_bytes_total", "payloads"))
	require.Equal(t, 4.0, counter(t, reg, "cairn_blob_gc_scanned_objects_total"))

	rep, err = c.Collect(ctx, false)
	require.NoError(t, err)
	require.True(t, rep.Skipped, "the next pass waits for the interval")
	rep, err = c.Collect(ctx, true)
	require.NoError(t, err)
	require.False(t, rep.Skipped, "a forced pass does not")
}

// TestCollectorCleansTemp: a pass removes the temporary files of crashed Puts
// older than the grace, and keeps younger ones (uploads in progress).
func TestCollectorCleansTemp(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	fs := tb.blobs.(*blobstore.FileStore)
	old, young := filepath.Join(fs.Root(), ".tmp", "put-old"), filepath.Join(fs.Root(), ".tmp", "put-young")
	require.NoError(t, os.WriteFile(old, []byte("crashed upload"), 0o600))
	require.NoError(t, os.WriteFile(young, []byte("in progress"), 0o600))
	at := time.Now().Add(-48 * time.Hour)
	require.NoError(t, os.Chtimes(old, at, at))
	c, err := maintenance.NewCollector(tb.store, fs, nil)
	require.NoError(t, err)
	rep, err := c.Collect(ctx, true)
	require.NoError(t, err)
	require.Equal(t, blobstore.TempReport{Objects: 1, Bytes: int64(len("crashed upload"))}, rep.Temp)
	require.NoFileExists(t, old)
	require.FileExists(t, young)
}

// labeledCounter reads the counter of a registered vector with one label value.
func labeledCounter(t *testing.T, reg *prometheus.Registry, name, value string) float64 {
	t.Helper()
	v, ok, err := findCounter(reg, name, value)
	require.NoError(t, err)
	if !ok {
		t.Fatalf("no metric %s{%s}", name, value)
	}
	return v
}

// findCounter is labeledCounter for a condition of EventuallyWithT (off the
// test's goroutine): whether the counter exists yet (a labeled counter appears at
// its first increment), and its value.
func findCounter(reg *prometheus.Registry, name, value string) (float64, bool, error) {
	mfs, err := reg.Gather()
	if err != nil {
		return 0, false, err
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if m.GetLabel()[0].GetValue() == value {
				return m.GetCounter().GetValue(), true, nil
			}
		}
	}
	return 0, false, nil
}

// heldLister holds the listing of payloads until release is closed: its pass
// is then between its mark and its sweeps.
type heldLister struct {
	maintenance.CollectorBlobs
	listing, release chan struct{}
}

func (h *heldLister) List(ctx context.Context, kind string) iter.Seq2[blobstore.Listed, error] {
	if kind == blobstore.KindPayloads {
		close(h.listing)
		<-h.release
	}
	return h.CollectorBlobs.List(ctx, kind)
}

// TestCollectorKeepsClaimsSinceMark: an old object the mark did not see, which a
// writer found stored after the mark began (its claim, then its Put) and named
// in a row, is kept by the sweep even once the claim is older than the grace:
// the sweep keeps the claims made since the mark began less the grace, and
// does not read the run tables again.
func TestCollectorKeepsClaimsSinceMark(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	catalogtest.Version(t, s, "plain", catalog.NewStep{Key: "s", MaxAttempts: 1})
	const grace = time.Second
	old := putAged(t, tb, "found again by a writer", time.Hour)
	garbage := putAged(t, tb, "nobody's", time.Hour)
	h := &heldLister{CollectorBlobs: tb.blobs.(maintenance.CollectorBlobs), listing: make(chan struct{}), release: make(chan struct{})}
	c, err := maintenance.NewCollector(s, h, &maintenance.CollectorConfig{Grace: grace})
	require.NoError(t, err)
	var rep maintenance.GCReport
	done := make(chan error, 1)
	go func() {
		var err error
		rep, err = c.Collect(ctx, true)
		done <- err
	}()
	<-h.listing // marked: no row names either object
	obj, err := tb.blobs.Put(ctx, blobstore.KindPayloads, strings.NewReader("found again by a writer"),
		blobstore.PutOptions{Claim: s.BlobClaim})
	require.NoError(t, err)
	require.Equal(t, old.Key, obj.Key)
	finishedRunWithOutput(t, ctx, s, "plain", blobstore.ObjectRef(obj).JSON())
	time.Sleep(grace + 500*time.Millisecond) // the claim is older than the grace now
	close(h.release)
	require.NoError(t, <-done)
	require.True(t, exists(t, tb, old.Key), "the object a row named since the mark was deleted")
	require.False(t, exists(t, tb, garbage.Key))
	require.Equal(t, 1, rep.DeletedObjects)
}

// TestCollectorRace is the race the collector must win: writers store outputs (some
// identical across runs, some unique) and finish steps with them while the reaper
// deletes runs (some archived) and the collector loops with a short grace; reruns
// copy outputs from runs the reaper is about to delete (references written without
// a claim). No blob that a surviving row or an archive names is ever deleted,
// including content shared by a run that was reaped and one that was not.
func TestCollectorRace(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	catalogtest.Version(t, s, "plain", catalog.NewStep{Key: "s", MaxAttempts: 1})
	// Reruns from b reuse a's output: the new run's row names it, copied in SQL.
	catalogtest.Version(t, s, "pair", catalog.NewStep{Key: "a", MaxAttempts: 1},
		catalog.NewStep{Key: "b", Needs: []string{"a"}, MaxAttempts: 1})
	var sum [32]byte
	_, _ = rand.Read(sum[:])
	digest := "sha256:" + hex.EncodeToString(sum[:])
	_, _, err := s.VersionRegister(ctx, &catalog.VersionRegisterParams{
		Workflow: "archived", Digest: digest, Size: 1, BlobKey: "bundles/sha256/" + digest[7:],
		Definition: json.RawMessage(`{"steps":[{"key":"s","needs":[]}],"retention":{"archive":true}}`), Fingerprint: digest,
		Steps: []catalog.NewStep{{Key: "s", MaxAttempts: 1}},
	})
	require.NoError(t, err)

	// The reaper, not started (its passes are called below), whose runs are kept
	// one second.
	reaper := maintenance.NewReaper(s, tb.blobs, &maintenance.ReaperConfig{
		Retention: catalog.RetentionDefaults{Succeeded: time.Second}})
	// The grace bounds the time from a writer's claim to its row's commit; two
	// seconds is plenty for these writers however loaded the machine.
	const grace = 2 * time.Second
	collector, err := maintenance.NewCollector(s, tb.blobs.(maintenance.CollectorBlobs), &maintenance.CollectorConfig{Grace: grace, Batch: 4})
	require.NoError(t, err)

	// Many shared contents, each reused now and then: often after the runs that
	// named it were reaped and it became garbage, which is the race.
	shared := make([]string, 10)
	for i := range shared {
		shared[i] = fmt.Sprintf("shared output %d %s", i, strings.Repeat("x", 100))
	}
	var writes, reruns, reaped, deleted atomic.Int64
	done := make(chan struct{})
	var g errgroup.Group
	for w := range 4 {
		g.Go(func() error {
			// Writer 0's runs are archived, so what they name is kept for good: it
			// stores unique content only. The others share content.
			workflow := "plain"
			switch w {
			case 0:
				workflow = "archived"
			case 3:
				workflow = "pair"
			}
			for i := 0; ; i++ {
				select {
				case <-done:
					return nil
				default:
				}
				content := shared[mrand.IntN(len(shared))]
				if w == 0 || i%2 == 1 {
					content = fmt.Sprintf("unique output %d-%d", w, i)
				}
				obj, err := tb.blobs.Put(ctx, blobstore.KindPayloads, bytes.NewReader([]byte(content)),
					blobstore.PutOptions{Claim: s.BlobClaim})
				if err != nil {
					return err
				}
				// The window between the Put that found the object and the commit of
				// the row that names it, where the collector must not delete it.
				time.Sleep(time.Duration(mrand.IntN(300)) * time.Millisecond)
				if _, _, err := s.RunCreate(ctx, &catalog.RunCreateParams{Workflow: workflow, Input: json.RawMessage(`{}`)}); err != nil {
					return err
				}
				claimed, err := s.StepClaim(ctx, fmt.Sprintf("writer-%d", w), 1, time.Minute)
				if err != nil {
					return err
				}
				for _, c := range claimed {
					// Any writer's step: each gets an output that was claimed.
					if err := s.StepFinish(ctx, &catalog.StepFinishParams{RunID: c.RunID, Key: c.Key, LeaseToken: c.LeaseToken,
						Outcome: catalog.OutcomeSucceeded, Output: blobstore.ObjectRef(obj).JSON()}); err != nil {
						return err
					}
					// The object must exist as long as the row naming it does.
					if _, err := tb.blobs.(blobstore.Store).Stat(ctx, obj.Key); errors.Is(err, blobstore.ErrNotFound) {
						if _, err := s.RunGet(ctx, c.RunID); err == nil {
							return fmt.Errorf("run %s names %s, which was deleted", c.RunID, obj.Key)
						}
					} else if err != nil {
						return err
					}
				}
				writes.Add(1)
			}
		})
	}
	g.Go(func() error {
		for {
			select {
			case <-done:
				return nil
			default:
			}
			var source uuid.UUID
			if err := s.DB().GetContext(ctx, &source, `
SELECT id FROM runs WHERE workflow = 'pair' AND status = 'succeeded' ORDER BY random() LIMIT 1`); errors.Is(err, sql.ErrNoRows) {
				time.Sleep(10 * time.Millisecond)
				continue
			} else if err != nil {
				return err
			}
			run, _, _, err := s.RunRerun(ctx, &catalog.RunRerunParams{Source: source, FromStep: "b"})
			if errors.Is(err, catalog.ErrNotFound) {
				continue // reaped meanwhile
			}
			if err != nil {
				return fmt.Errorf("rerun %s: %w", source, err)
			}
			steps, err := s.StepList(ctx, run.ID)
			if err != nil {
				return err
			}
			for _, st := range steps {
				ref, ok := blobstore.ParseRef(json.RawMessage(st.Output))
				if st.Key != "a" || !ok {
					continue
				}
				key, err := ref.Key()
				if err != nil {
					return err
				}
				if _, err := tb.blobs.(blobstore.Store).Stat(ctx, key); errors.Is(err, blobstore.ErrNotFound) {
					if _, err := s.RunGet(ctx, run.ID); err == nil {
						return fmt.Errorf("rerun %s reuses %s, which was deleted", run.ID, key)
					}
				} else if err != nil {
					return err
				}
				reruns.Add(1)
			}
		}
	})
	var loops sync.WaitGroup
	loops.Add(2)
	go func() {
		defer loops.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			reaped.Add(int64(reaper.Reap(ctx)))
		}
	}()
	go func() {
		defer loops.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			rep, err := collector.Collect(ctx, true)
			if err != nil {
				t.Errorf("collect: %v", err)
				return
			}
			deleted.Add(int64(rep.DeletedObjects))
		}
	}()
	// Wait until the loops have done their work on each other's results: runs
	// reaped, blobs they named collected, and writers reusing shared content all
	// along. On a loaded machine this takes minutes (at a load average of 20, over
	// five); the loops are stopped before a failure says how far they got.
	enough := func() bool {
		return reaped.Load() >= 50 && deleted.Load() >= 30 && writes.Load() >= 200 && reruns.Load() >= 20
	}
	for deadline := time.Now().Add(10 * time.Minute); !enough() && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	close(done)
	require.NoError(t, g.Wait())
	loops.Wait()
	require.Truef(t, enough(), "after 10 minutes: %d runs reaped (want 50), %d objects collected (30), %d writes (200), %d reruns (20)",
		reaped.Load(), deleted.Load(), writes.Load(), reruns.Load())
	// One more pass with every writer done: still nothing referenced goes.
	_, err = collector.Collect(ctx, true)
	require.NoError(t, err)

	var missing []string
	checked := 0
	require.NoError(t, s.BlobRefs(ctx, 0, func(key string) {
		if strings.HasPrefix(key, "bundles/") {
			return // stand-in bundles without objects
		}
		checked++
		if !exists(t, tb, key) {
			missing = append(missing, key)
		}
	}))
	require.Empty(t, missing, "objects named by rows or archives were deleted")
	require.Positive(t, checked)
	t.Logf("writes %d, reruns %d, runs reaped %d, objects collected %d, references checked %d",
		writes.Load(), reruns.Load(), reaped.Load(), deleted.Load(), checked)
}

// TestGCLoop: a started collector deletes an old unreferenced blob on its own,
// and counts it.
func TestGCLoop(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	garbage := putAged(t, tb, "left behind", 48*time.Hour)
	reg := prometheus.NewRegistry()
	c, err := maintenance.NewCollector(tb.store, tb.blobs.(maintenance.CollectorBlobs),
		&maintenance.CollectorConfig{Interval: 20 * time.Millisecond, Registerer: reg})
	require.NoError(t, err)
	start(t, c)
	// Waiting for a pass of the loop to delete it.
	require.Eventually(t, func() bool {
		_, err := tb.blobs.(blobstore.Store).Stat(ctx, garbage.Key)
		return errors.Is(err, blobstore.ErrNotFound)
	}, 30*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool {
		return labeledCounter(t, reg, "cairn_blob_gc_reclaimed_objects_total", "payloads") == 1
	}, 30*time.Second, 10*time.Millisecond)
}

// TestCollectorRaceDispatcher is the race through a started dispatcher, as a
// server runs it: its steps store outputs over a tiny inline limit (some
// identical across runs), the reaper deletes runs a second after they end, and
// the collector loops with a short grace. Every output a surviving run names
// stays readable.
func TestCollectorRaceDispatcher(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	reg := prometheus.NewRegistry()
	tb.env.Start(t, runtime.Config{Registerer: reg, Limits: runtime.Limits{InlineLimit: 8}})
	start(t, maintenance.NewReaper(tb.store, tb.blobs, &maintenance.ReaperConfig{Interval: 50 * time.Millisecond,
		Retention: catalog.RetentionDefaults{Succeeded: time.Second}, Registerer: reg}))
	c, err := maintenance.NewCollector(tb.store, tb.blobs.(maintenance.CollectorBlobs),
		&maintenance.CollectorConfig{Interval: 50 * time.Millisecond, Grace: 2 * time.Second, Registerer: reg})
	require.NoError(t, err)
	start(t, c)
	v := tb.env.Deploy(t, map[string]string{"cairn.yaml": "name: echo\nsteps:\n  - {key: a, builtin: echo}\n"})

	var runs []uuid.UUID
	stop := make(chan struct{})
	starter := make(chan struct{})
	go func() {
		defer close(starter)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			input := fmt.Sprintf(`{"shared": %d}`, i%5)
			if i%2 == 1 {
				input = fmt.Sprintf(`{"unique": %d}`, i)
			}
			runs = append(runs, tb.env.StartRun(t, v, input))
		}
	}()
	// Waiting for the reaper to delete runs and the collector to reclaim the
	// unique outputs they named.
	require.Eventually(t, func() bool {
		return counter(t, reg, "cairn_runs_reaped_total") >= 50 &&
			labeledCounter(t, reg, "cairn_blob_gc_reclaimed_objects_total", "payloads") >= 10
	}, 2*time.Minute, 50*time.Millisecond)
	close(stop)
	<-starter

	// Once the newest run has ended, the runs are checked newest first: those
	// that ended last, before the reaper (a second after their end) deletes
	// them. Oldest first, a slow machine reached them only after they were
	// reaped, and checked none.
	last := runs[len(runs)-1]
	require.Eventually(t, func() bool {
		r, err := tb.store.RunGet(ctx, last)
		return errors.Is(err, catalog.ErrNotFound) || (err == nil && r.Status.Terminal())
	}, time.Minute, 10*time.Millisecond)
	checked := 0
	for _, id := range slices.Backward(runs) {
		steps, err := tb.store.StepList(ctx, id)
		if errors.Is(err, catalog.ErrNotFound) || (err == nil && len(steps) == 0) {
			continue // reaped
		}
		require.NoError(t, err)
		ref, ok := blobstore.ParseRef(json.RawMessage(steps[0].Output))
		if !ok {
			continue // not finished yet
		}
		key, err := ref.Key()
		require.NoError(t, err)
		_, err = tb.blobs.(blobstore.Store).Stat(ctx, key)
		if errors.Is(err, blobstore.ErrNotFound) {
			_, rerr := tb.store.RunGet(ctx, id)
			require.Error(t, rerr, "run %s names %s, which was deleted", id, key)
			continue
		}
		require.NoError(t, err)
		checked++
	}
	require.Positive(t, checked)
}

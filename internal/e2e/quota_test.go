package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	mrand "math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/catalog"
)

// quotaWorkflow is two steps that hold their slot while they run (a builtin
// sleep runs in the attempt: its step is running all along).
const quotaWorkflow = `name: qwork
steps:
  - {key: a, builtin: sleep, with: {duration: 1500ms}}
  - {key: b, needs: [a], builtin: sleep, with: {duration: 500ms}}
`

// quotaLimit is namespace a's running_steps quota in TestQuotaChaos.
const quotaLimit = 5

// quotaSamples is how many samples TestQuotaChaos takes while namespace a has
// work left, at least.
const quotaSamples = 5000

// TestQuotaChaos: a running_steps quota of 5 in namespace a holds under load on
// three `cairn serve` processes, one SIGKILLed at random every 2 to 4 s and
// replaced while a has work: the catalog, sampled at least 5,000 times while a's
// runs are unfinished, never shows more than 5 of its steps running (the steps
// of a killed server keep their slots until their leases are swept, and nothing
// else counts them); namespace b, without a quota, runs at full speed meanwhile
// (its steps per second are logged, not asserted: timing belongs to the bench).
// Every run of both succeeds. CAIRN_CHAOS_RUNS runs in each namespace (default
// 20: about 8 s of a's work at 5 at once, some 25 s of the test's wall time;
// CAIRN_CHAOS_RUNS=300 is about 2 minutes of a's work).
func TestQuotaChaos(t *testing.T) {
	t.Parallel()
	runs := envInt(t, envChaosRuns, 20)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	r := mrand.New(mrand.NewPCG(seed, 0))

	st := newStack(t, stackOptions{})
	db, err := sqlx.Open("postgres", st.dbURL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	store := catalog.New(db, nil)
	ctx := context.Background()
	opts := serverOptions{}
	cs := &chaosStack{t: t, st: st}
	for range 3 {
		cs.live = append(cs.live, st.start(opts))
	}

	// The workflow in namespaces a and b: its definition, deployed in default,
	// registered again under each namespace's key (catalog.VersionRegister, as a
	// deploy does; its builtin steps need no bundle).
	cs.live[0].api().deploy(map[string]string{"cairn.yaml": quotaWorkflow})
	v, err := store.VersionGet(ctx, "qwork", 1)
	require.NoError(t, err)
	for _, ns := range []string{"a", "b"} {
		_, err := db.Exec(`INSERT INTO namespaces (name, created_by, updated_by) VALUES ($1, 'test', 'test')`, ns)
		require.NoError(t, err)
		var sum [32]byte
		_, _ = rand.Read(sum[:])
		digest := "sha256:" + hex.EncodeToString(sum[:])
		_, _, err = store.VersionRegister(ctx, &catalog.VersionRegisterParams{Workflow: ns + "/qwork", Digest: digest, Size: 1,
			BlobKey: "bundles/sha256/" + digest[7:], Definition: []byte(v.Definition), Fingerprint: digest,
			Steps: []catalog.NewStep{{Key: "a", MaxAttempts: 1}, {Key: "b", Needs: []string{"a"}, MaxAttempts: 1}}})
		require.NoError(t, err)
	}
	_, err = store.QuotaSet(ctx, "a", catalog.QuotaSetParams{RunningSteps: catalog.QuotaChange{Change: true, Limit: quotaLimit}}, "test")
	require.NoError(t, err)

	// The sampler: a's running steps and unfinished runs, in one snapshot, as
	// fast as it can.
	var (
		mu                   sync.Mutex
		maxSeen, underLoad   int
		samples              int
		over                 []string
		stopSamp, sampDone   = make(chan struct{}), make(chan struct{})
		running, unfinishedA int
	)
	go func() {
		defer close(sampDone)
		for {
			select {
			case <-stopSamp:
				return
			default:
			}
			ctx, cancel := withTimeout(5 * time.Second)
			err := db.QueryRowxContext(ctx, `
SELECT (SELECT count(*) FROM steps s JOIN runs r ON r.id = s.run_id
        WHERE s.status = $1 AND cairn_namespace(r.workflow) = 'a'),
       (SELECT count(*) FROM runs r WHERE r.workflow = 'a/qwork' AND r.status NOT IN ($2, $3, $4))`,
				catalog.StepRunning, catalog.RunSucceeded, catalog.RunFailed, catalog.RunCanceled).Scan(&running, &unfinishedA)
			cancel()
			if err != nil {
				continue // a query the test's end canceled
			}
			mu.Lock()
			samples++
			if unfinishedA > 0 {
				underLoad++
			}
			maxSeen = max(maxSeen, running)
			if running > quotaLimit {
				over = append(over, fmt.Sprintf("%d running at %s", running, time.Now().Format(time.RFC3339Nano)))
			}
			mu.Unlock()
		}
	}()

	start := time.Now()
	for i := range runs {
		for _, ns := range []string{"a", "b"} {
			_, _, err := store.RunCreate(ctx, &catalog.RunCreateParams{Workflow: ns + "/qwork", Input: []byte(fmt.Sprintf(`{"n":%d}`, i))})
			require.NoError(t, err)
		}
	}
	t.Logf("%d runs started in each of a and b in %s", runs, time.Since(start).Round(time.Millisecond))

	// Kills while a has work left.
	nextKill := time.Now().Add(2 * time.Second)
	var bDone time.Time
	deadline := time.Now().Add(3 * time.Minute)
	for {
		var left map[string]int
		left, err = unfinishedRuns(db)
		require.NoError(t, err)
		if left["b"] == 0 && bDone.IsZero() {
			bDone = time.Now()
		}
		if left["a"] == 0 && left["b"] == 0 {
			break
		}
		require.True(t, time.Now().Before(deadline), "runs still unfinished by the deadline: %v", left)
		if left["a"] > 0 && time.Now().After(nextKill) {
			cs.killOne(r, opts)
			nextKill = time.Now().Add(2*time.Second + time.Duration(r.Int64N(int64(2*time.Second))))
		}
		time.Sleep(100 * time.Millisecond)
	}
	close(stopSamp)
	<-sampDone
	t.Logf("every run ended %s after the first start; %d servers killed", time.Since(start).Round(time.Millisecond), len(cs.killed))

	// Every run succeeded.
	var failed []string
	require.NoError(t, db.Select(&failed, `SELECT id::text || ' ' || status FROM runs WHERE status <> $1`, catalog.RunSucceeded))
	require.Empty(t, failed, "runs that did not succeed")

	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d samples, %d while namespace a had runs unfinished; most of a's steps running at once: %d", samples, underLoad, maxSeen)
	require.Empty(t, over, "more than %d of namespace a's steps running", quotaLimit)
	require.GreaterOrEqual(t, underLoad, quotaSamples, "samples while a had work")
	require.Equal(t, quotaLimit, maxSeen, "namespace a never used its whole quota: no load")

	// Namespace b's pace, for the record.
	var bSteps int
	var bSpan float64
	require.NoError(t, db.QueryRow(`
SELECT count(*), extract(epoch FROM max(s.finished_at) - min(r.created_at))
FROM steps s JOIN runs r ON r.id = s.run_id WHERE r.workflow = 'b/qwork'`).Scan(&bSteps, &bSpan))
	t.Logf("namespace b: %d steps in %.2f s (%.1f steps/s; each step sleeps 1.5 s or 0.5 s), done %s after the first start; a's quota held %d at once",
		bSteps, bSpan, float64(bSteps)/bSpan, bDone.Sub(start).Round(time.Millisecond), quotaLimit)
}

// unfinishedRuns counts the unfinished runs of each namespace of TestQuotaChaos.
func unfinishedRuns(db *sqlx.DB) (map[string]int, error) {
	ctx, cancel := withTimeout(10 * time.Second)
	defer cancel()
	rows, err := db.QueryxContext(ctx, `
SELECT cairn_namespace(workflow), count(*) FROM runs
WHERE status NOT IN ($1, $2, $3) GROUP BY 1`, catalog.RunSucceeded, catalog.RunFailed, catalog.RunCanceled)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var ns string
		var n int
		if err := rows.Scan(&ns, &n); err != nil {
			return nil, err
		}
		out[ns] = n
	}
	return out, rows.Err()
}

package api_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/api"
	"github.com/cairnrun/cairn/blobstore"
	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/functions"
	"github.com/cairnrun/cairn/internal/testenv"
	"github.com/cairnrun/cairn/maintenance"
	"github.com/cairnrun/cairn/namespace"
	"github.com/cairnrun/cairn/runtime"
	"github.com/cairnrun/cairn/ui"
)

// The world of the namespace isolation test (namespace_isolation_test.go): one
// server (API, web UI, a dispatcher and the bulk operation worker, on PostgreSQL
// and S3), two namespaces, and in each the same names: workflows shared and
// waiter (with a hook, two schedules, an event trigger), secrets, a limit,
// received events, tokens, a bulk operation. B also has what only B has (a
// workflow, a secret and a limit named only-<B's marker>, a viewer token, an
// archived run, a quota), and a marker in everything, so that A's answers can be
// searched for anything of B's.

const (
	nsRootToken  = "ns-root-token-0123456789abcdef" // CAIRN_TOKENS admin: every namespace
	nsSigningKey = "ns-signing-key-0123456789abcdef0123"
)

// nsObjects are one namespace's objects, by what the walk fills paths with.
type nsObjects struct {
	ns       string // the namespace's name
	marker   string // in every input, label, output, log, checkpoint and name of its own
	only     string // a name only this namespace has (workflow, secret, limit)
	admin    string // a managed admin token scoped to ns
	operator string // a managed operator token scoped to ns
	adminID  string
	viewerID string // B's viewer token (the one the walk's revokeToken aims at)
	finished string // a succeeded run of shared: output, checkpoint, logs, map items
	waiting  string // a run of waiter: a callback, a signal, an approval and an event wait, all suspended
	archived string // a run of only, archived and deleted
	op       string // a bulk operation
	event    string // a received event
	digest   string // the digest of shared's bundle
	callback string // the callback token of waiting's step hold
	schedule int64  // a schedule of shared
	runs     []string
	tokens   []string // the IDs of its tokens
	scheds   []int64
	hookKey  string // the secret the hook in of shared is signed with
}

type nsWorld struct {
	tb      *testBundle
	srv     *api.Server
	blobs   blobstore.Store
	a, b    nsObjects
	twin    []byte            // a bundle of B's, uploaded by A in the walk
	cursors map[string]string // by operationId: a next_cursor of B's list, from B's token
	secrets []string          // what no answer to A may hold: B's IDs, names, marker, digests, credentials
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// newNSWorld serves the API and the web UI with a dispatcher, makes namespaces A
// and B and their tokens (as the every-namespace admin), and builds both
// namespaces' objects.
func newNSWorld(t *testing.T) *nsWorld {
	t.Helper()
	ctx := context.Background()
	store := catalog.New(testenv.DB(t), nil)
	blobs := testenv.Blobs(t)
	tokens, err := api.ParseTokens("admin:root:" + nsRootToken)
	require.NoError(t, err)
	srv := api.New(store, blobs, &api.Config{Tokens: tokens, TempDir: t.TempDir(), SigningKey: []byte(nsSigningKey),
		SecretKeys: testKeyring(t)})
	h, err := ui.New(srv.Handler(), tokens, store, &ui.Config{Identities: srv})
	require.NoError(t, err)
	srv.Mount(ui.Prefix+"/", h)
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)

	d, err := runtime.New(store, blobs, &runtime.Config{
		PollInterval: 50 * time.Millisecond,
		Handlers:     runtime.HandlerConfig{CacheDir: t.TempDir(), SigningKey: []byte(nsSigningKey), PublicURL: hs.URL},
	})
	require.NoError(t, err)
	require.NoError(t, d.Start(ctx))
	ops := maintenance.NewOperationWorker(store, nil)
	require.NoError(t, ops.Start(ctx))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		require.NoError(t, ops.Stop(ctx))
		require.NoError(t, d.Stop(ctx))
	})

	suffix := randomHex(3)
	w := &nsWorld{tb: &testBundle{store: store, url: hs.URL}, srv: srv, blobs: blobs, cursors: map[string]string{}}
	w.a = nsObjects{ns: "alpha-" + suffix, marker: "am" + randomHex(6)}
	w.b = nsObjects{ns: "beta-" + suffix, marker: "bm" + randomHex(6)}
	for _, o := range []*nsObjects{&w.a, &w.b} {
		o.only = "only-" + o.marker
		a := w.do(t, nsRootToken, "", http.MethodPost, "/v1/namespaces", `{"name":"`+o.ns+`"}`)
		require.Equal(t, http.StatusCreated, a.status, "POST /v1/namespaces: %s", a.body)
		for _, role := range []string{"admin", "operator"} {
			a := w.do(t, nsRootToken, "", http.MethodPost, "/v1/tokens",
				`{"name":"`+o.marker+`-`+role+`","role":"`+role+`","namespace":"`+o.ns+`"}`)
			require.Equal(t, http.StatusCreated, a.status, "POST /v1/tokens: %s", a.body)
			tok := decode[api.CreatedToken](t, a)
			o.tokens = append(o.tokens, tok.ID)
			if role == "admin" {
				o.admin, o.adminID = tok.Value, tok.ID
			} else {
				o.operator = tok.Value
			}
		}
	}
	a := w.do(t, nsRootToken, w.b.ns, http.MethodPost, "/v1/namespaces", `{"name":"`+w.b.ns+`"}`)
	require.Equal(t, http.StatusConflict, a.status, "a namespace made twice: %s", a.body)

	w.build(t, &w.b, true)
	w.build(t, &w.a, false)
	w.collectSecrets(t)
	return w
}

// do sends body (JSON, or none when "") with token, and the namespace header
// when ns is set.
func (w *nsWorld) do(t *testing.T, token, ns, method, path, body string) *answer {
	t.Helper()
	hdr := map[string]string{}
	if ns != "" {
		hdr[namespace.Header] = ns
	}
	var b []byte
	if body != "" {
		b = []byte(body)
	}
	return w.send(t, token, method, path, hdr, b)
}

// send is do with headers of the caller's choosing and raw bytes. An answer
// that does not end within 10 s (an open event stream) has status -1.
func (w *nsWorld) send(t *testing.T, token, method, path string, hdr map[string]string, body []byte) *answer {
	t.Helper()
	return w.tb.sendWithin(t, 10*time.Second, token, method, path, hdr, body)
}

func (w *nsWorld) upload(t *testing.T, token string, tarball []byte) api.UploadResult {
	t.Helper()
	a := w.send(t, token, http.MethodPost, "/v1/bundles", map[string]string{"Content-Type": "application/gzip"}, tarball)
	require.Contains(t, []int{http.StatusOK, http.StatusCreated}, a.status, "upload: %s", a.body)
	return decode[api.UploadResult](t, a)
}

func (w *nsWorld) start(t *testing.T, token, workflow, body string) string {
	t.Helper()
	a := w.do(t, token, "", http.MethodPost, "/v1/workflows/"+workflow+"/runs", body)
	require.Equal(t, http.StatusAccepted, a.status, "start %s: %s", workflow, a.body)
	return decode[struct {
		ID string `json:"id"`
	}](t, a).ID
}

// sharedManifest is the workflow shared of a namespace whose marker is m: an exec
// step that checkpoints, logs and outputs m, a map over two items, a hook, two
// schedules (that never fire during a test) and a trigger on the event paid.
func sharedManifest(m string) string {
	return `name: shared
triggers:
  - {event: paid}
hooks:
  - {name: in, secret: hooksecret, signature: hmac-sha256, idempotency_key: "body.id"}
schedules:
  - {name: yearly, cron: "0 3 1 1 *", input: {m: ` + m + `}}
  - {name: yearly-too, cron: "0 4 1 1 *"}
steps:
  - {key: work, exec: ["./bin/work"]}
  - {key: fan, needs: [work], map: {over: "[1, 2]"}, exec: ["./bin/item"]}
`
}

// waiterManifest waits four ways at once: a callback, a signal, an approval, an event.
const waiterManifest = `name: waiter
steps:
  - {key: hold, exec: ["./bin/hold"]}
  - {key: go, signal: {name: go}}
  - {key: ok, approval: {required: 2}}
  - {key: pay, wait_for_event: {event: paid}}
`

// build makes o's objects with o's admin token (no namespace header: a scoped
// token acts in its namespace). withOnly adds what only B has.
func (w *nsWorld) build(t *testing.T, o *nsObjects, withOnly bool) {
	t.Helper()
	ctx := context.Background()
	m := o.marker
	shared := w.upload(t, o.admin, archive(t,
		entry{name: "cairn.yaml", body: sharedManifest(m)},
		entry{name: "bin/work", mode: 0o755, body: "#!/bin/sh\necho '{\"checkpoint\": {\"m\": \"" + m + "\"}}' >&3\necho 'log " + m + "' >&2\necho '{\"out\": \"" + m + "\"}'\n"},
		entry{name: "bin/item", mode: 0o755, body: "#!/bin/sh\necho 'item " + m + "' >&2\necho '{\"item\": \"" + m + "\"}'\n"}))
	require.True(t, shared.Created)
	o.digest = shared.Digest
	w.upload(t, o.admin, archive(t, entry{name: "cairn.yaml", body: waiterManifest + "# " + m + "\n"},
		entry{name: "bin/hold", mode: 0o755, body: "#!/bin/sh\necho '{\"$suspend\": {\"timeout\": \"1h\"}}'\n"}))
	for _, name := range []string{"shared", "hooksecret"} {
		a := w.do(t, o.admin, "", http.MethodPut, "/v1/secrets/"+name, `{"value":"`+m+`-`+name+`"}`)
		require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	}
	o.hookKey = m + "-hooksecret"
	concurrency := map[bool]string{true: "7", false: "3"}[withOnly]
	a := w.do(t, o.admin, "", http.MethodPut, "/v1/limits/shared", `{"concurrency":`+concurrency+`}`)
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)

	o.finished = w.start(t, o.admin, "shared", `{"input":{"m":"`+m+`"},"labels":{"tag":"`+m+`"}}`)
	o.waiting = w.start(t, o.admin, "waiter", `{"input":{"m":"`+m+`"},"labels":{"tag":"`+m+`"}}`)
	events := []string{m + "-e1", m + "-e2"}
	if withOnly {
		events = append(events, "dup-1") // A sends an event with this id in the walk
	}
	for i, id := range events {
		a := w.do(t, o.admin, "", http.MethodPost, "/v1/events", `{"name":"note","id":"`+id+`","data":{"m":"`+m+`"}}`)
		require.Equal(t, http.StatusAccepted, a.status, "%s", a.body)
		require.False(t, decode[api.EventAnswer](t, a).Duplicate, "event %d of %s is new in its namespace", i, o.ns)
	}
	o.event = m + "-e2"
	// Deliveries of the hook; B's with the delivery id A's delivery in the walk uses too.
	deliveries := []string{m + "-h1"}
	if withOnly {
		deliveries = append(deliveries, "hook-1")
	}
	for _, id := range deliveries {
		body := `{"id":"` + id + `","m":"` + m + `"}`
		a = w.send(t, "", http.MethodPost, "/v1/hooks/shared/in?namespace="+o.ns,
			map[string]string{"Content-Type": "application/json", "X-Cairn-Signature": "sha256=" + sign(o.hookKey, body)}, []byte(body))
		require.Equal(t, http.StatusAccepted, a.status, "a delivery to %s: %s", o.ns, a.body)
	}

	if withOnly {
		a = w.do(t, nsRootToken, "", http.MethodPut, "/v1/namespaces/"+o.ns+"/quotas", `{"running_steps":977}`)
		require.Equal(t, http.StatusOK, a.status, "%s", a.body)
		// A run started with the idempotency key A's start in the walk uses too.
		a = w.send(t, o.admin, http.MethodPost, "/v1/workflows/shared/runs",
			map[string]string{"Content-Type": "application/json", "Idempotency-Key": "idem-1"}, []byte(`{"input":{"m":"`+m+`"}}`))
		require.Equal(t, http.StatusAccepted, a.status, "%s", a.body)
		a = w.do(t, o.admin, "", http.MethodPut, "/v1/secrets/"+o.only, `{"value":"x"}`)
		require.Equal(t, http.StatusOK, a.status, "%s", a.body)
		a = w.do(t, o.admin, "", http.MethodPut, "/v1/limits/"+o.only, `{"concurrency":2}`)
		require.Equal(t, http.StatusOK, a.status, "%s", a.body)
		a = w.do(t, nsRootToken, o.ns, http.MethodPost, "/v1/tokens", `{"name":"`+m+`-viewer","role":"viewer","namespace":"`+o.ns+`"}`)
		require.Equal(t, http.StatusCreated, a.status, "%s", a.body)
		o.viewerID = decode[api.CreatedToken](t, a).ID
		o.tokens = append(o.tokens, o.viewerID)
		w.upload(t, o.admin, archive(t, entry{name: "cairn.yaml", body: "name: " + o.only + "\nretention: {succeeded: 1m, archive: true}\nsteps:\n  - {key: s, builtin: noop}\n"}))
		w.twin = archive(t, entry{name: "cairn.yaml", body: "name: twin\nsteps:\n  - {key: s, builtin: noop}\n"})
		w.upload(t, o.admin, w.twin)
		o.archived = w.start(t, o.admin, o.only, `{"input":{"m":"`+m+`"}}`)
		w.awaitRun(t, o, o.archived, "succeeded")
		_, err := w.tb.store.DB().ExecContext(ctx, `UPDATE runs SET finished_at = now() - interval '2 minutes' WHERE id = $1`, o.archived)
		require.NoError(t, err)
		require.Positive(t, maintenance.NewReaper(w.tb.store, w.blobs, nil).Reap(ctx), "the run of %s is archived", o.only)
		a = w.do(t, o.admin, "", http.MethodGet, "/v1/archived-runs/"+o.archived, "")
		require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	}

	w.awaitRun(t, o, o.finished, "succeeded")
	require.Eventually(t, func() bool {
		for _, r := range itemsOf[struct{ Workflow, Status string }](t, w.do(t, o.admin, "", http.MethodGet, "/v1/runs?limit=100", "")) {
			if r.Workflow != "waiter" && r.Status != "succeeded" {
				return false
			}
		}
		return true
	}, time.Minute, 50*time.Millisecond, "waiting for every run of %s but waiter's to end", o.ns)
	require.Eventually(t, func() bool {
		waiting := 0
		for _, s := range itemsOf[struct{ Status string }](t, w.do(t, o.admin, "", http.MethodGet, "/v1/runs/"+o.waiting+"/steps", "")) {
			if s.Status == "suspended" {
				waiting++
			}
		}
		return waiting == 4
	}, time.Minute, 50*time.Millisecond, "waiting for the four waits of %s's waiter run", o.ns)
	o.callback = functions.CallbackToken([]byte(nsSigningKey), o.waiting, "hold", 1)

	// A bulk operation that skips every run it matches (they have all ended).
	a = w.do(t, o.admin, "", http.MethodPost, "/v1/runs:bulk", `{"action":"cancel","filter":{"status":"succeeded"}}`)
	require.Equal(t, http.StatusAccepted, a.status, "%s", a.body)
	o.op = decode[api.Operation](t, a).ID
	require.Eventually(t, func() bool {
		a := w.do(t, o.admin, "", http.MethodGet, "/v1/operations/"+o.op, "")
		require.Equal(t, http.StatusOK, a.status, "%s", a.body)
		return decode[api.Operation](t, a).Status != "running"
	}, time.Minute, 50*time.Millisecond, "waiting for %s's bulk operation", o.ns)

	for _, r := range itemsOf[struct{ ID string }](t, w.do(t, o.admin, "", http.MethodGet, "/v1/runs?limit=100", "")) {
		o.runs = append(o.runs, r.ID)
	}
	for _, s := range itemsOf[struct{ ID int64 }](t, w.do(t, o.admin, "", http.MethodGet, "/v1/schedules", "")) {
		o.scheds = append(o.scheds, s.ID)
	}
	require.Len(t, o.scheds, 2, "the schedules of %s", o.ns)
	o.schedule = o.scheds[0]
}

// itemsOf decodes the items of a list's answer, which must be a 200.
func itemsOf[T any](t *testing.T, a *answer) []T {
	t.Helper()
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	return decode[struct {
		Items []T `json:"items"`
	}](t, a).Items
}

func (w *nsWorld) awaitRun(t *testing.T, o *nsObjects, id, status string) {
	t.Helper()
	require.Eventually(t, func() bool {
		a := w.do(t, o.admin, "", http.MethodGet, "/v1/runs/"+id, "")
		require.Equal(t, http.StatusOK, a.status, "%s", a.body)
		return decode[struct{ Status string }](t, a).Status == status
	}, time.Minute, 50*time.Millisecond, "waiting for run %s of %s to be %s", id, o.ns, status)
}

// collectSecrets lists what of B's no answer to A may hold, and takes a cursor of
// every list of B's (with B's token) for the walk to replay with A's.
func (w *nsWorld) collectSecrets(t *testing.T) {
	t.Helper()
	b := &w.b
	w.secrets = append(w.secrets, b.marker, b.ns, b.digest, b.callback, b.op, b.archived, b.adminID)
	w.secrets = append(w.secrets, b.runs...)
	w.secrets = append(w.secrets, b.tokens...)
	for _, id := range b.runs {
		u := uuid.MustParse(id)
		hexID := strings.ReplaceAll(u.String(), "-", "")
		w.secrets = append(w.secrets, hexID[len(hexID)-12:]) // the short ID the UI shows
	}
	sort.Strings(w.secrets)
}

// noLeak fails t when a's body or headers hold anything of B's, once the values
// the request itself sent (which an answer may echo) are taken out.
func (w *nsWorld) noLeak(t *testing.T, what string, a *answer, sent ...string) {
	t.Helper()
	text := string(a.body)
	for k, vs := range a.header {
		text += "\n" + k + ": " + strings.Join(vs, ", ")
	}
	sort.Slice(sent, func(i, j int) bool { return len(sent[i]) > len(sent[j]) })
	for _, s := range sent {
		if s != "" {
			text = strings.ReplaceAll(text, s, "<sent>")
			text = strings.ReplaceAll(text, url.PathEscape(s), "<sent>")
		}
	}
	for _, s := range w.secrets {
		if s != "" && strings.Contains(text, s) {
			t.Errorf("%s: the answer (%d) holds %q of namespace B: %.600s", what, a.status, s, text)
		}
	}
}

package api_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/api"
	"github.com/cairnrun/cairn/functions"
	"github.com/cairnrun/cairn/namespace"
)

// nsKind is what a token of namespace A gets from an operation aimed at
// namespace B's objects (docs/security.md, "Namespaces").
type nsKind int

const (
	// nsHidden: the operation names an object of B's (by ID or by a name only B
	// has): A's answer is the answer for an object that does not exist (same
	// status, code and detail), and B's own token reaches it.
	nsHidden nsKind = iota
	// nsList: A's list shows nothing of B's, with B's filters and B's cursor too.
	nsList
	// nsRefused: only an admin of every namespace may call it: 403.
	nsRefused
	// nsOwn: the operation acts in A's namespace on a name B has too; check says
	// what A must get, and the snapshot of B (TestNamespaceIsolation) that nothing
	// of B's changed.
	nsOwn
	// nsPublic: no token and no namespace (health).
	nsPublic
)

// nsCase is the table's entry for one operation: how to aim it at B's objects.
type nsCase struct {
	kind     nsKind
	run      string            // {id} under /v1/runs: "finished" (default) or "waiting"
	key      string            // {key}
	name     string            // {name}: default B's only name
	query    string            // added to the URL (placeholders as in nsWorld.expand)
	body     string            // a JSON body
	twin     bool              // the body is a bundle B deployed (namespace_fixture_test.go)
	header   map[string]string // more request headers
	status   int               // nsHidden: the status of a missing object (default 404)
	variants []string          // nsList: more queries to try, naming B's objects
	check    func(t *testing.T, w *nsWorld, who nsCaller, a *answer)
}

// nsCases has an entry for every operation of the OpenAPI document:
// TestNamespaceIsolation fails for an operation without one, so a new operation
// is covered (or its author says why not) as it is added.
var nsCases = map[string]nsCase{
	"healthz": {kind: nsPublic},
	"readyz":  {kind: nsPublic},

	"getNamespace":    {kind: nsHidden},
	"listNamespaces":  {kind: nsList},
	"createNamespace": {kind: nsRefused, body: `{"name":"{fresh}"}`},
	// Quotas: A's token reads A's only; changing them is for tokens of every
	// namespace (403 whatever the namespace, which nsHidden allows).
	"getNamespaceQuotas": {kind: nsHidden},
	"putNamespaceQuotas": {kind: nsHidden, body: `{"running_steps":5}`},

	"getArchivedRun": {kind: nsHidden},
	"listAudit":      {kind: nsList, variants: []string{"actor={marker}-admin"}},
	"exportAudit":    {kind: nsOwn, body: `{}`, check: checkExportAudit},
	"uploadBundle":   {kind: nsOwn, twin: true, check: checkUploadTwin},
	"getBundle":      {kind: nsHidden},
	// A forged callback token naming B's step is refused as one naming no run;
	// a real one is a credential (its holder completes the step whoever sends
	// it), so the walk never sends B's: it checks that no answer to A holds it.
	"completeCallback": {kind: nsHidden, status: http.StatusUnauthorized, body: `{"paid":true}`},
	"getCapacity":      {kind: nsRefused},

	"listReceivedEvents": {kind: nsList, variants: []string{"name=note"}},
	"sendEvent":          {kind: nsOwn, body: `{"name":"paid","id":"dup-1","data":{}}`, check: checkSendEvent},
	"getReceivedEvent":   {kind: nsHidden},
	"deliverHook":        {kind: nsOwn, check: checkDeliverHook},

	"listLimits": {kind: nsList, variants: []string{"name={only}"}},
	"clearLimit": {kind: nsHidden, status: http.StatusNoContent},
	"putLimit":   {kind: nsOwn, name: "shared", body: `{"concurrency":3}`, check: checkStatus(http.StatusOK)},

	"getOperation":      {kind: nsHidden},
	"listOperationRuns": {kind: nsHidden},
	"bulkRuns":          {kind: nsOwn, body: `{"action":"cancel","filter":{"workflow":"waiter"}}`, check: checkBulk},

	"listRuns": {kind: nsList, variants: []string{"label=tag%3D{marker}", "workflow={only}", "parent={run}",
		"workflow=shared&status=succeeded"}},
	"lookupRuns": {kind: nsList, query: "id={run}", variants: []string{"id={short}", "id={prefix}"}},
	"getRun":     {kind: nsHidden},
	"cancelRun":  {kind: nsHidden, run: "waiting", body: `{"reason":"x"}`},
	"pauseRun":   {kind: nsHidden, run: "waiting", body: `{"reason":"x"}`},
	"resumeRun":  {kind: nsHidden, run: "waiting", body: `{"reason":"x"}`},
	"rerunRun":   {kind: nsHidden, body: `{"from_step":"work"}`},
	"retryRun":   {kind: nsHidden, body: `{}`},
	"listEvents": {kind: nsHidden},
	// An event stream of B's run is a 404, not a stream that stays open.
	"streamEvents":    {kind: nsHidden},
	"sendSignal":      {kind: nsHidden, run: "waiting", name: "go", body: `{"n":1}`},
	"listStepHistory": {kind: nsHidden},
	"listSteps":       {kind: nsHidden},
	"approveStep":     {kind: nsHidden, run: "waiting", key: "ok", body: `{"comment":"x"}`},
	"rejectStep":      {kind: nsHidden, run: "waiting", key: "ok", body: `{"comment":"x"}`},
	"listAttempts":    {kind: nsHidden, key: "work"},
	// Outputs, checkpoints and logs are what presigned blob URLs would read:
	// none is handed out for B's run.
	"getStepCheckpoint": {kind: nsHidden, key: "work"},
	"getStepOutput":     {kind: nsHidden, key: "work"},
	"getAttemptLog":     {kind: nsHidden, key: "work"},
	// Lease credentials are a credential of their own (a dispatcher's); A's
	// token is none, and is refused as for a run that does not exist.
	"putCheckpoint":    {kind: nsHidden, run: "waiting", key: "hold", status: http.StatusUnauthorized, body: `{"i":1}`},
	"listItems":        {kind: nsHidden, key: "fan"},
	"listItemAttempts": {kind: nsHidden, key: "fan"},
	"getItemLog":       {kind: nsHidden, key: "fan"},
	"getItemOutput":    {kind: nsHidden, key: "fan"},

	"listSchedules":    {kind: nsList, variants: []string{"workflow={only}"}, check: checkNoSchedulesOfB},
	"getSchedule":      {kind: nsHidden},
	"backfillSchedule": {kind: nsHidden, body: `{"from":"2020-01-01T00:00:00Z","to":"2021-01-01T00:00:00Z"}`},
	"pauseSchedule":    {kind: nsHidden},
	"resumeSchedule":   {kind: nsHidden},
	"triggerSchedule":  {kind: nsHidden},

	"listSecrets": {kind: nsList},
	"putSecret":   {kind: nsOwn, name: "shared", body: `{"value":"another"}`, check: checkStatus(http.StatusOK)},

	"listTokens":  {kind: nsList, variants: []string{"revoked=true"}},
	"createToken": {kind: nsOwn, body: `{"name":"{fresh}","role":"viewer"}`, check: checkCreateToken},
	"revokeToken": {kind: nsHidden},

	"listWorkflows":  {kind: nsList},
	"getWorkflow":    {kind: nsHidden},
	"listAliases":    {kind: nsHidden},
	"getAlias":       {kind: nsHidden},
	"setAlias":       {kind: nsHidden, body: `{"version":1}`},
	"rollbackAlias":  {kind: nsHidden},
	"pauseWorkflow":  {kind: nsHidden, body: `{"reason":"x"}`},
	"resumeWorkflow": {kind: nsHidden, body: `{"reason":"x"}`},
	"startRun": {kind: nsOwn, name: "shared", body: `{"input":{}}`, header: map[string]string{"Idempotency-Key": "idem-1"},
		check: checkStatus(http.StatusAccepted)},
	"listVersions": {kind: nsHidden},
	"getVersion":   {kind: nsHidden},
}

// nsCaller is who A's requests come from.
type nsCaller struct {
	name   string
	token  string
	header string // the namespace header sent ("" none)
	admin  bool
	first  bool // the first caller of the walk (what A makes, it makes here)
}

// nsOp is an operation of the OpenAPI document.
type nsOp struct {
	id, method, path string
	role             api.Role
	bearer           bool
	query            map[string]bool
	kind             nsCase
}

// nsOperations lists the operations of the server's OpenAPI document, each with
// its table entry; it fails t for an operation without one, and for an entry
// whose operation the document lacks.
func nsOperations(t *testing.T, doc *huma.OpenAPI) []nsOp {
	t.Helper()
	var ops []nsOp
	seen := map[string]bool{}
	for path, item := range doc.Paths {
		for method, op := range map[string]*huma.Operation{http.MethodGet: item.Get, http.MethodPost: item.Post,
			http.MethodPut: item.Put, http.MethodDelete: item.Delete, http.MethodPatch: item.Patch} {
			if op == nil {
				continue
			}
			seen[op.OperationID] = true
			c, ok := nsCases[op.OperationID]
			if !ok {
				t.Errorf("operation %s (%s %s) has no entry in nsCases: say what a token of another namespace gets from it", op.OperationID, method, path)
				continue
			}
			o := nsOp{id: op.OperationID, method: method, path: path, bearer: len(op.Security) > 0, query: map[string]bool{}, kind: c}
			for _, v := range op.Metadata {
				if r, ok := v.(api.Role); ok {
					o.role = r
				}
			}
			for _, p := range op.Parameters {
				if p.In == "query" {
					o.query[p.Name] = true
				}
			}
			ops = append(ops, o)
		}
	}
	for id := range nsCases {
		if !seen[id] {
			t.Errorf("nsCases has %s, which the OpenAPI document does not: remove or rename it", id)
		}
	}
	// Reads first, then writes; canceling B's run last (the control requests of
	// B's token then find every object still in its state).
	sort.Slice(ops, func(i, j int) bool {
		ri, rj := nsOrder(ops[i]), nsOrder(ops[j])
		if ri != rj {
			return ri < rj
		}
		return ops[i].path+ops[i].method < ops[j].path+ops[j].method
	})
	return ops
}

func nsOrder(o nsOp) int {
	switch {
	case o.id == "cancelRun" || o.id == "revokeToken":
		return 2
	case o.method == http.MethodGet:
		return 0
	}
	return 1
}

// target is where a request goes: B's objects, or objects that do not exist.
type target int

const (
	targetB target = iota
	targetMissing
)

// nsMissing are the values of objects that exist nowhere.
var nsMissing = struct{ run, op, token string }{
	run: uuid.Must(uuid.NewV7()).String(), op: uuid.Must(uuid.NewV7()).String(), token: uuid.Must(uuid.NewV7()).String(),
}

// fill returns op's path with its parameters aimed at to, and the values it put
// in (in order, for comparing answers).
func (w *nsWorld) fill(op nsOp, to target) (string, []string) {
	b := &w.b
	c := op.kind
	segs := strings.Split(strings.TrimPrefix(op.path, "/"), "/")
	var vals []string
	pick := func(bv, missing string) string {
		if to == targetMissing {
			return missing
		}
		return bv
	}
	for i, s := range segs {
		if !strings.HasPrefix(s, "{") {
			continue
		}
		prev := ""
		if i > 0 {
			prev = segs[i-1]
		}
		var v string
		switch s {
		case "{id}":
			switch prev {
			case "runs":
				run := b.finished
				if c.run == "waiting" {
					run = b.waiting
				}
				v = pick(run, nsMissing.run)
			case "archived-runs":
				v = pick(b.archived, nsMissing.run)
			case "operations":
				v = pick(b.op, nsMissing.op)
			case "events":
				v = pick(b.event, "no-such-event")
			case "tokens":
				v = pick(b.viewerID, nsMissing.token)
			case "schedules":
				v = pick(strconv.FormatInt(b.schedule, 10), "999999999")
			}
		case "{digest}":
			v = pick(b.digest, "sha256:"+strings.Repeat("0", 64))
		case "{token}":
			// Forged (another key): for B's waiting step, or for a run that does not exist.
			v = functions.CallbackToken([]byte("not-the-servers-key-0123456789"), pick(b.waiting, nsMissing.run), "hold", 1)
		case "{key}":
			v = c.key
			if v == "" {
				v = "work"
			}
		case "{index}":
			v = "0"
		case "{name}":
			v = c.name
			if v == "" {
				v = pick(b.only, "no-such-name")
			}
		case "{alias}":
			v = "latest"
		case "{version}":
			v = "1"
		case "{workflow}":
			v = "shared"
		case "{hook}":
			v = "in"
		case "{namespace}":
			v = pick(b.ns, "no-such-ns")
		}
		segs[i] = url.PathEscape(v)
		vals = append(vals, v)
	}
	return "/" + strings.Join(segs, "/"), vals
}

// expand fills a query's or body's placeholders with B's values, or with
// values of objects that do not exist.
func (w *nsWorld) expand(s string, to target) string {
	marker, only, run := w.b.marker, w.b.only, w.b.finished
	if to == targetMissing {
		marker, only, run = "zz0000000000", "no-such-name", nsMissing.run
	}
	hexID := strings.ReplaceAll(run, "-", "")
	return strings.NewReplacer("{marker}", marker, "{only}", only, "{run}", run,
		"{short}", hexID[len(hexID)-12:], "{prefix}", w.b.finished[:8], "{fresh}", "n"+randomHex(4)).Replace(s)
}

// request sends op aimed at to as who, with the namespace header ns, and query
// q (besides the table's).
func (w *nsWorld) request(t *testing.T, op nsOp, to target, token, ns, q string) (*answer, []string) {
	t.Helper()
	path, vals := w.fill(op, to)
	query := w.expand(op.kind.query, to)
	if q != "" {
		if query != "" {
			query += "&"
		}
		query += w.expand(q, to)
	}
	if query != "" {
		path += "?" + query
		for _, kv := range strings.Split(query, "&") {
			_, v, _ := strings.Cut(kv, "=")
			uv, _ := url.QueryUnescape(v)
			vals = append(vals, v, uv)
		}
	}
	hdr := map[string]string{}
	for k, v := range op.kind.header {
		hdr[k] = v
	}
	if ns != "" {
		hdr[namespace.Header] = ns
	}
	var body []byte
	if op.kind.twin {
		body = w.twin
		hdr["Content-Type"] = "application/gzip"
	} else if op.kind.body != "" {
		body = []byte(w.expand(op.kind.body, to))
		hdr["Content-Type"] = "application/json"
		vals = append(vals, string(body))
	}
	return w.send(t, token, op.method, path, hdr, body), vals
}

// TestNamespaceIsolation walks every operation of the OpenAPI document with
// tokens scoped to namespace A (an admin without the namespace header, an
// operator naming A in it) against the objects of namespace B: nothing of B's is
// read, written or told to exist. An operation naming B's object answers as for
// an object that does not exist; a list shows none of B's, with B's filters or
// B's cursor; the namespace header naming B answers as for a namespace that does
// not exist; what acts by name acts in A; a snapshot of B taken before the walk
// equals one taken after. Then B's token reaches every object the walk was
// refused (so a server that answers 404 to everything fails), A's token reaches
// A's own objects of the same names, and the web UI, logged in with A's token,
// shows none of B's pages, and its search box finds none of B's runs.
func TestNamespaceIsolation(t *testing.T) {
	t.Parallel()
	w := newNSWorld(t)
	ops := nsOperations(t, w.srv.API().OpenAPI())
	w.takeCursors(t, ops)
	before := w.snapshotB(t)

	for _, who := range []nsCaller{
		{name: "admin of A", token: w.a.admin, admin: true, first: true},
		{name: "operator of A", token: w.a.operator, header: w.a.ns},
	} {
		t.Run(who.name, func(t *testing.T) {
			for _, op := range ops {
				t.Run(op.id, func(t *testing.T) { w.walk(t, op, who) })
			}
		})
	}

	after := w.snapshotB(t)
	for path, b := range before {
		assert.JSONEq(t, b, after[path], "B's %s changed during the walk", path)
	}

	t.Run("A's own objects", func(t *testing.T) { w.ownObjects(t) })
	t.Run("web UI", func(t *testing.T) { w.webUI(t) })
	t.Run("B's token reaches B's objects", func(t *testing.T) {
		for _, op := range ops {
			if op.kind.kind != nsHidden || op.id == "completeCallback" || op.id == "putCheckpoint" {
				continue
			}
			a, _ := w.request(t, op, targetB, w.b.admin, "", "")
			if a.status == http.StatusForbidden { // for tokens of every namespace only
				a, _ = w.request(t, op, targetB, nsRootToken, w.b.ns, "")
			}
			assert.True(t, a.status > 0 && a.status < 500 && a.status != 400 && a.status != 401 && a.status != 403 &&
				a.status != 404 && a.status != 422, "%s with B's token: %d %s (the walk's request must be valid and reach B's object)", op.id, a.status, a.body)
		}
	})
}

// walk sends op as who, aimed at B's objects, and checks the answer by the
// operation's kind.
func (w *nsWorld) walk(t *testing.T, op nsOp, who nsCaller) {
	c := op.kind
	if op.bearer && op.id != "deliverHook" {
		// The namespace header naming B, or the default namespace (which exists
		// too), answers as naming no namespace.
		m, _ := w.request(t, op, targetB, who.token, "nope-"+randomHex(3), "")
		for _, ns := range []string{w.b.ns, namespace.Default} {
			a, sent := w.request(t, op, targetB, who.token, ns, "")
			w.noLeak(t, "header naming "+ns, a, append(sent, ns)...)
			assert.Equal(t, m.status, a.status, "the header naming %s answers as naming no namespace: %s", ns, a.body)
			assert.Equal(t, m.problem.Code, a.problem.Code, "the header naming %s answers as naming no namespace: %s", ns, a.body)
			if who.admin || op.role <= api.RoleOperator {
				assert.Equal(t, http.StatusNotFound, a.status, "the header naming %s: %s", ns, a.body)
				assert.Equal(t, "namespace_not_found", a.problem.Code, "the header naming %s: %s", ns, a.body)
			}
		}
	}
	if op.bearer && !who.admin && op.role == api.RoleAdmin {
		a, sent := w.request(t, op, targetB, who.token, who.header, "")
		w.noLeak(t, op.id, a, sent...)
		assert.Equal(t, http.StatusForbidden, a.status, "an admin's operation, by an operator: %s", a.body)
		return
	}
	switch c.kind {
	case nsPublic:
		a, sent := w.request(t, op, targetB, "", "", "")
		w.noLeak(t, op.id, a, sent...)
	case nsRefused:
		a, sent := w.request(t, op, targetB, who.token, who.header, "")
		w.noLeak(t, op.id, a, sent...)
		assert.Equal(t, http.StatusForbidden, a.status, "only an admin of every namespace may: %s", a.body)
	case nsHidden:
		want := c.status
		if want == 0 {
			want = http.StatusNotFound
		}
		token := who.token
		if !op.bearer {
			token = "" // a credential of its own: nothing to do with A's token
		}
		a, sent := w.request(t, op, targetB, token, who.header, "")
		m, missing := w.request(t, op, targetMissing, token, who.header, "")
		w.noLeak(t, op.id, a, sent...)
		require.NotEqual(t, -1, a.status, "the answer did not end: an open stream of B's run")
		// An operation for tokens of every namespace may refuse A's token
		// whatever it names (403), as long as B's object answers the same.
		assert.Contains(t, []int{want, http.StatusForbidden}, m.status, "an object that does not exist: %s", m.body)
		assert.Equal(t, m.status, a.status, "B's object answers as one that does not exist: %s", a.body)
		assert.Equal(t, m.problem.Code, a.problem.Code, "B's object answers as one that does not exist: %s", a.body)
		detail := a.problem.Detail
		for i := range sent {
			if i < len(missing) && len(sent[i]) >= 4 {
				detail = strings.ReplaceAll(detail, sent[i], missing[i])
			}
		}
		assert.Equal(t, m.problem.Detail, detail, "B's object answers as one that does not exist")
	case nsList:
		queries := append([]string{""}, c.variants...)
		for _, q := range queries {
			a, sent := w.request(t, op, targetB, who.token, who.header, q)
			w.noLeak(t, op.id+"?"+q, a, sent...)
			assert.Contains(t, []int{http.StatusOK, http.StatusForbidden}, a.status, "%s?%s: %s", op.id, q, a.body)
			if c.check != nil {
				c.check(t, w, who, a)
			}
			if !strings.Contains(c.query+q, "{") || strings.Contains(c.query+q, "{prefix}") {
				continue
			}
			// A filter naming B's object answers as one naming nothing: no items.
			m, _ := w.request(t, op, targetMissing, who.token, who.header, q)
			assert.Equal(t, m.status, a.status, "%s?%s answers as for objects that do not exist: %s", op.id, q, a.body)
			if a.status == http.StatusOK && m.status == http.StatusOK {
				assert.Equal(t, len(itemsOf[json.RawMessage](t, m)), len(itemsOf[json.RawMessage](t, a)), "%s?%s lists B's objects: %s", op.id, q, a.body)
			}
		}
		if cur := w.cursors[op.id]; cur != "" {
			a, sent := w.request(t, op, targetB, who.token, who.header, "cursor="+url.QueryEscape(cur))
			w.noLeak(t, op.id+" with B's cursor", a, sent...)
			assert.True(t, a.status == http.StatusOK || a.status == http.StatusBadRequest || a.status == http.StatusUnprocessableEntity,
				"B's cursor with A's token: an empty page or a refused cursor, not %d %s", a.status, a.body)
		}
	case nsOwn:
		var a *answer
		var sent []string
		if op.id != "deliverHook" {
			a, sent = w.request(t, op, targetB, who.token, who.header, "")
			w.noLeak(t, op.id, a, sent...)
		}
		c.check(t, w, who, a)
	}
}

// takeCursors takes, with B's token, a cursor of every list of B's that has one
// (limit=1: B has at least two of everything listed).
func (w *nsWorld) takeCursors(t *testing.T, ops []nsOp) {
	t.Helper()
	for _, op := range ops {
		if op.kind.kind != nsList || !op.query["cursor"] {
			continue
		}
		a, _ := w.request(t, op, targetB, w.b.admin, "", "limit=1")
		if a.status == http.StatusForbidden {
			continue // for tokens of every namespace only: the walk checks A gets 403 too
		}
		require.Equal(t, http.StatusOK, a.status, "%s with B's token: %s", op.id, a.body)
		var page struct {
			NextCursor string `json:"next_cursor"`
		}
		require.NoError(t, json.Unmarshal(a.body, &page))
		if op.id != "listNamespaces" { // B's token may see B's namespace only
			assert.NotEmpty(t, page.NextCursor, "%s of B's with limit=1 has a next page", op.id)
		}
		w.cursors[op.id] = page.NextCursor
		w.secrets = append(w.secrets, page.NextCursor)
	}
}

func checkStatus(want int) func(*testing.T, *nsWorld, nsCaller, *answer) {
	return func(t *testing.T, _ *nsWorld, _ nsCaller, a *answer) {
		assert.Equal(t, want, a.status, "%s", a.body)
	}
}

// checkUploadTwin: A uploads the bytes of a bundle B deployed: it is new in A
// (201, created), not "uploaded before" (which would tell B has it).
func checkUploadTwin(t *testing.T, _ *nsWorld, who nsCaller, a *answer) {
	if who.first {
		assert.Equal(t, http.StatusCreated, a.status, "B's bundle is new in A: %s", a.body)
	} else {
		assert.Equal(t, http.StatusOK, a.status, "A's own upload: %s", a.body)
	}
}

// checkSendEvent: an event with the id of one of B's is new in A; the runs it
// starts and resumes are A's (noLeak: none of B's IDs).
func checkSendEvent(t *testing.T, _ *nsWorld, who nsCaller, a *answer) {
	require.Equal(t, http.StatusAccepted, a.status, "%s", a.body)
	ans := decode[api.EventAnswer](t, a)
	assert.Equal(t, !who.first, ans.Duplicate, "an id B used is new in A (and A's own the second time)")
	if who.first {
		assert.Len(t, ans.Started, 1, "A's shared is started by paid: %s", a.body)
	}
}

// checkDeliverHook: a delivery to A (by ?namespace= or the header) is checked
// with A's secret and starts A's workflow, with a delivery id B used too; B's
// secret does not sign for A nor A's for B; without a namespace, the default
// namespace has no such workflow.
func checkDeliverHook(t *testing.T, w *nsWorld, who nsCaller, _ *answer) {
	deliver := func(ns string, byHeader bool, key, body string) *answer {
		hdr := map[string]string{"Content-Type": "application/json", "X-Cairn-Signature": "sha256=" + sign(key, body)}
		path := "/v1/hooks/shared/in"
		if byHeader {
			hdr[namespace.Header] = ns
		} else if ns != "" {
			path += "?namespace=" + ns
		}
		a := w.send(t, "", http.MethodPost, path, hdr, []byte(body))
		w.noLeak(t, "deliverHook", a)
		return a
	}
	body := `{"id":"hook-1"}`
	a := deliver(w.a.ns, !who.first, w.a.hookKey, body)
	require.Equal(t, http.StatusAccepted, a.status, "a delivery to A: %s", a.body)
	assert.Equal(t, !who.first, decode[struct{ Replay bool }](t, a).Replay, "a delivery id B used is new in A: %s", a.body)
	a = deliver(w.a.ns, false, w.b.hookKey, `{"id":"hook-2"}`)
	assert.Equal(t, http.StatusUnauthorized, a.status, "B's secret signs nothing of A's: %s", a.body)
	a = deliver(w.b.ns, false, w.a.hookKey, `{"id":"hook-3"}`)
	assert.Equal(t, http.StatusUnauthorized, a.status, "A's secret signs nothing of B's: %s", a.body)
	a = deliver("", false, w.b.hookKey, `{"id":"hook-4"}`)
	assert.Equal(t, http.StatusNotFound, a.status, "the default namespace has no workflow shared: %s", a.body)
	a = deliver("nope-"+randomHex(3), false, w.b.hookKey, `{"id":"hook-5"}`)
	assert.Equal(t, http.StatusNotFound, a.status, "no such namespace: %s", a.body)
}

// checkBulk: a bulk cancel of waiter's runs matches A's one run, not B's.
func checkBulk(t *testing.T, w *nsWorld, who nsCaller, a *answer) {
	require.Equal(t, http.StatusAccepted, a.status, "%s", a.body)
	op := decode[api.Operation](t, a)
	assert.Equal(t, 1, op.Total, "A's bulk matches A's one waiter run: %s", a.body)
	require.Eventually(t, func() bool {
		a := w.do(t, who.token, who.header, http.MethodGet, "/v1/operations/"+op.ID, "")
		require.Equal(t, http.StatusOK, a.status, "%s", a.body)
		w.noLeak(t, "A's bulk operation", a)
		return decode[api.Operation](t, a).Status != "running"
	}, time.Minute, 50*time.Millisecond, "waiting for A's bulk operation")
	a = w.do(t, who.token, who.header, http.MethodGet, "/v1/operations/"+op.ID+"/runs", "")
	w.noLeak(t, "A's bulk operation's runs", a)
}

// checkCreateToken: A's admin may not make a token of B's namespace; a token it
// makes (where scoped admins manage tokens at all) reaches A's run, not B's.
func checkCreateToken(t *testing.T, w *nsWorld, who nsCaller, a *answer) {
	r := w.do(t, who.token, who.header, http.MethodPost, "/v1/tokens", `{"name":"n`+randomHex(4)+`","role":"admin","namespace":"`+w.b.ns+`"}`)
	w.noLeak(t, "createToken in B", r, w.b.ns)
	assert.Contains(t, []int{http.StatusForbidden, http.StatusNotFound}, r.status, "a token of B's, made by A's admin: %s", r.body)
	if a.status == http.StatusForbidden {
		return // tokens are managed by admins of every namespace only
	}
	require.Equal(t, http.StatusCreated, a.status, "%s", a.body)
	tok := decode[api.CreatedToken](t, a)
	r = w.do(t, tok.Value, "", http.MethodGet, "/v1/runs/"+w.a.finished, "")
	assert.Equal(t, http.StatusOK, r.status, "the new token reaches A's run: %s", r.body)
	r = w.do(t, tok.Value, "", http.MethodGet, "/v1/runs/"+w.b.finished, "")
	assert.Equal(t, http.StatusNotFound, r.status, "the new token does not reach B's: %s", r.body)
	r = w.do(t, who.token, who.header, http.MethodPost, "/v1/tokens", `{"name":"n`+randomHex(4)+`","role":"admin"}`)
	if r.status == http.StatusCreated {
		every := decode[api.CreatedToken](t, r)
		r = w.do(t, every.Value, w.b.ns, http.MethodGet, "/v1/runs/"+w.b.finished, "")
		assert.Equal(t, http.StatusNotFound, r.status, "a token A's admin made reaches nothing of B's: %s", r.body)
	}
}

// checkExportAudit: an export by A's admin is refused, or holds A's records only
// (read back through its presigned URL, and from the blob store).
func checkExportAudit(t *testing.T, w *nsWorld, _ nsCaller, a *answer) {
	if a.status == http.StatusForbidden {
		return
	}
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	exp := decode[api.AuditExport](t, a)
	require.NotEmpty(t, exp.URL, "the export's presigned URL (S3)")
	resp, err := http.Get(exp.URL)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	w.noLeak(t, "the audit export of A's admin", &answer{status: resp.StatusCode, body: body})
}

// checkNoSchedulesOfB: schedule IDs are numbers, which noLeak cannot tell.
func checkNoSchedulesOfB(t *testing.T, w *nsWorld, _ nsCaller, a *answer) {
	if a.status != http.StatusOK {
		return
	}
	for _, s := range itemsOf[struct{ ID int64 }](t, a) {
		assert.NotContains(t, w.b.scheds, s.ID, "A's schedule list shows B's schedule %d", s.ID)
	}
}

// snapshotB reads B's objects as the every-namespace admin naming B.
func (w *nsWorld) snapshotB(t *testing.T) map[string]string {
	t.Helper()
	b := &w.b
	paths := []string{"/v1/runs?limit=100", "/v1/workflows?limit=100", "/v1/secrets?limit=100", "/v1/limits",
		"/v1/schedules?limit=100", "/v1/events?limit=100", "/v1/tokens?limit=100", "/v1/operations/" + b.op,
		"/v1/archived-runs/" + b.archived, "/v1/namespaces/" + b.ns + "/quotas"}
	for _, id := range b.runs {
		if id != b.archived {
			paths = append(paths, "/v1/runs/"+id, "/v1/runs/"+id+"/steps", "/v1/runs/"+id+"/events?limit=100")
		}
	}
	for _, wf := range []string{"shared", "waiter", "twin", b.only} {
		paths = append(paths, "/v1/workflows/"+wf, "/v1/workflows/"+wf+"/aliases", "/v1/workflows/"+wf+"/versions")
	}
	out := map[string]string{}
	for _, p := range paths {
		a := w.do(t, nsRootToken, b.ns, http.MethodGet, p, "")
		require.Equal(t, http.StatusOK, a.status, "B's %s: %s", p, a.body)
		var v any
		require.NoError(t, json.Unmarshal(a.body, &v))
		out[p] = string(must(json.Marshal(dropVolatile(v))))
	}
	return out
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// dropVolatile removes what changes without a write: when a token was last
// used, when a schedule fires next (computed by a server's pass), the runs of a
// namespace's last minute.
func dropVolatile(v any) any {
	switch x := v.(type) {
	case map[string]any:
		delete(x, "last_used_at")
		delete(x, "next_fire_at")
		delete(x, "runs_last_minute") // a quota's use: its minute moves on
		for k, e := range x {
			x[k] = dropVolatile(e)
		}
	case []any:
		for i, e := range x {
			x[i] = dropVolatile(e)
		}
	}
	return v
}

// ownObjects: A's tokens reach A's objects of the names B has too, with A's
// values: the walk's 404s are not a server that refuses everything.
func (w *nsWorld) ownObjects(t *testing.T) {
	a := &w.a
	for _, tok := range []string{a.admin, a.operator} {
		for _, c := range []struct{ path, want string }{
			{"/v1/runs/" + a.finished, a.marker},
			{"/v1/runs/" + a.finished + "/steps/work/output", a.marker},
			{"/v1/runs/" + a.finished + "/steps/work/checkpoint", a.marker},
			{"/v1/runs/" + a.finished + "/steps/work/logs", a.marker},
			{"/v1/runs/" + a.finished + "/steps/fan/items/0/output", a.marker},
			{"/v1/workflows/shared", "shared"},
			{"/v1/workflows/shared/versions/1", a.digest},
			{"/v1/bundles/" + a.digest, ""},
			{"/v1/runs?workflow=shared", a.finished},
			{"/v1/runs:lookup?id=" + a.finished, a.finished},
			{"/v1/events/" + a.event, a.marker},
			{"/v1/schedules/" + strconv.FormatInt(a.schedule, 10), a.marker},
			{"/v1/operations/" + a.op, a.op},
			{"/v1/namespaces/" + a.ns, a.ns},
			{"/v1/namespaces", a.ns},
			{"/v1/namespaces/" + a.ns + "/quotas", a.ns},
		} {
			r := w.do(t, tok, "", http.MethodGet, c.path, "")
			w.noLeak(t, c.path, r)
			if assert.Equal(t, http.StatusOK, r.status, "A's own %s: %s", c.path, r.body) {
				assert.Contains(t, string(r.body), c.want, "A's own %s", c.path)
			}
		}
	}
	r := w.do(t, a.admin, "", http.MethodGet, "/v1/limits", "")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	assert.Contains(t, string(r.body), `"concurrency":3`, "A's limit shared is A's value (B's is 7)")
	assert.NotContains(t, string(r.body), `"concurrency":7`, "A's limits show B's value")
	r = w.do(t, a.admin, "", http.MethodGet, "/v1/secrets", "")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	assert.Contains(t, string(r.body), `"hooksecret"`)
}

// webUI logs in with A's admin token: none of B's pages open (with the
// namespace cookie naming B too), the search box finds none of B's runs, and the
// lists show nothing of B's; B's session opens the same pages.
func (w *nsWorld) webUI(t *testing.T) {
	// login returns the Cookie header of a session of token; A's also names B in
	// the namespace cookie (which a session of every namespace chooses with), as
	// a user could forge it.
	login := func(token, ns string) string {
		t.Helper()
		noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		resp, err := noRedirect.PostForm(w.tb.url+"/ui/login", url.Values{"token": {token}, "next": {"/ui/runs"}})
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusSeeOther, resp.StatusCode)
		for _, c := range resp.Cookies() {
			if c.Name == "cairn_session" {
				return c.Name + "=" + c.Value + "; cairn_ns=" + ns
			}
		}
		t.Fatalf("no session cookie in %v", resp.Header.Values("Set-Cookie"))
		return ""
	}
	get := func(cookie, path string) *answer {
		t.Helper()
		return w.send(t, "", http.MethodGet, path, map[string]string{"Cookie": cookie}, nil)
	}
	b := &w.b
	hexID := strings.ReplaceAll(b.finished, "-", "")
	pages := []string{
		"/ui/runs/" + b.finished, "/ui/runs/" + b.waiting, "/ui/runs/" + b.finished + "/state",
		"/ui/runs/" + b.finished + "/events", "/ui/runs/" + b.finished + "/timeline",
		"/ui/runs/" + b.finished + "/steps/work", "/ui/runs/" + b.finished + "/steps/work/output",
		"/ui/runs/" + b.finished + "/steps/work/checkpoint", "/ui/runs/" + b.finished + "/steps/work/logs",
		"/ui/runs/" + b.finished + "/steps/fan/items", "/ui/runs/" + b.finished + "/steps/fan/items/0",
		"/ui/runs/" + b.finished + "/steps/fan/items/0/output", "/ui/runs/" + b.finished + "/steps/fan/items/0/logs",
		"/ui/workflows/" + b.only, "/ui/operations/" + b.op, "/ui/events/" + b.event,
	}
	ca, cb := login(w.a.admin, b.ns), login(b.admin, b.ns)
	for _, p := range pages {
		a := get(ca, p)
		w.noLeak(t, "UI "+p, a, b.finished, b.waiting, b.only, b.op, b.event)
		assert.Equal(t, http.StatusNotFound, a.status, "A's session opens B's %s", p)
		assert.Equal(t, http.StatusOK, get(cb, p).status, "B's session opens B's %s", p)
	}
	for _, q := range []string{b.finished, hexID[len(hexID)-12:], hexID[:8], "tag=" + b.marker, b.only, "only"} {
		// The page may echo the query (a label query as its key and value).
		a := get(ca, "/ui/search?q="+url.QueryEscape(q))
		w.noLeak(t, "UI search "+q, a, append(strings.Split(q, "="), q)...)
	}
	// A's audit records name the objects of B's that A's requests named (and were
	// refused): what A sent, not what B has.
	walked := []string{b.finished, b.waiting, b.archived, b.op, b.event, b.digest, b.viewerID, b.only}
	for _, c := range []struct {
		path string
		sent []string
	}{
		{"/ui/runs", nil}, {"/ui/workflows", nil}, {"/ui/events", nil}, {"/ui/limits", nil}, {"/ui/schedules", nil},
		{"/ui/approvals", nil}, {"/ui/audit", walked},
		{"/ui/runs?label=tag%3D" + b.marker, []string{b.marker}}, {"/ui/runs?workflow=" + b.only, []string{b.only}},
	} {
		a := get(ca, c.path)
		w.noLeak(t, "UI "+c.path, a, c.sent...)
		assert.Contains(t, []int{http.StatusOK, http.StatusForbidden}, a.status, "A's %s: %.300s", c.path, a.body)
	}
	a := get(ca, "/ui/runs/"+w.a.finished)
	assert.Equal(t, http.StatusOK, a.status, "A's session opens A's run")
	assert.Contains(t, string(a.body), w.a.marker)
}

package api_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"testing"

	"github.com/danielgtaylor/huma/v2"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/api"
)

// auditManifest has what every audited write acts on: a signal step, a schedule.
const auditManifest = "name: audited\nsteps:\n  - {key: a, builtin: noop}\n  - {key: s, needs: [a], signal: {name: go}}\n" +
	"schedules:\n  - {name: h, cron: \"0 * * * *\"}\n"

// auditRow is what the test reads back of a request's audit records.
type auditRow struct {
	Actor   string `db:"actor"`
	Role    string `db:"role"`
	Action  string `db:"action"`
	Target  string `db:"target"`
	Outcome string `db:"outcome"`
	Code    string `db:"code"`
}

// auditedWrite makes a request with request ID rid and checks its status.
type auditCall struct {
	token, method, path string
	body                string
	header              map[string]string
	status              int
}

// TestAuditEveryWrite drives every write of the API (every operation of the
// OpenAPI document that needs a role and is not a GET: a new one fails this test
// until it is driven here) and reads the audit log by request ID: each write has
// exactly one record, with the actor, role, action and target, outcome ok after a
// success and failed with the problem's code after a refusal; reads have none.
func TestAuditEveryWrite(t *testing.T) {
	t.Parallel()
	tb := setupWithSecrets(t, testKeyring(t))
	ctx := context.Background()
	n := 0
	driven := map[string]bool{}
	// do sends c as request "audit-N" and checks the audit log has exactly one
	// record of it (want: its action, or "" for a read: none).
	do := func(c auditCall, action string) *answer {
		t.Helper()
		n++
		rid := fmt.Sprintf("audit-%d", n)
		h := map[string]string{"X-Request-Id": rid}
		for k, v := range c.header {
			h[k] = v
		}
		var body []byte
		if c.body != "" {
			body = []byte(c.body)
		}
		token := c.token
		if token == "" {
			token = operatorToken
		}
		a := tb.sendAs(t, token, c.method, c.path, h, body)
		require.Equal(t, c.status, a.status, "%s %s: %s", c.method, c.path, a.body)
		var rows []auditRow
		require.NoError(t, tb.store.DB().SelectContext(ctx, &rows,
			`SELECT actor, role, action, target, outcome, code FROM audit_log WHERE request_id = $1`, rid))
		if action == "" {
			require.Empty(t, rows, "a read is not audited: %s %s", c.method, c.path)
			return a
		}
		driven[action] = true
		require.Len(t, rows, 1, "%s %s", c.method, c.path)
		r := rows[0]
		require.Equal(t, action, r.Action)
		if token == adminToken {
			require.Equal(t, []string{"root", "admin"}, []string{r.Actor, r.Role})
		} else {
			require.Equal(t, []string{"operator", "operator"}, []string{r.Actor, r.Role})
		}
		if a.status < 300 {
			require.Equal(t, []string{"ok", ""}, []string{r.Outcome, r.Code}, "%s %s", c.method, c.path)
		} else {
			require.Equal(t, []string{"failed", a.problem.Code}, []string{r.Outcome, r.Code}, "%s %s", c.method, c.path)
		}
		return a
	}
	id := func(a *answer) string {
		return decode[struct {
			ID string `json:"id"`
		}](t, a).ID
	}

	gz := map[string]string{"Content-Type": "application/gzip"}
	bundle1 := archive(t, entry{name: "cairn.yaml", body: auditManifest})
	bundle2 := archive(t, entry{name: "cairn.yaml", body: auditManifest + "description: two\n"})
	a := tb.sendAs(t, operatorToken, http.MethodPost, "/v1/bundles", map[string]string{"Content-Type": "application/gzip", "X-Request-Id": "audit-deploy"}, bundle1)
	require.Equal(t, http.StatusCreated, a.status, "%s", a.body)
	var deployRows int
	require.NoError(t, tb.store.DB().GetContext(ctx, &deployRows, `SELECT count(*) FROM audit_log WHERE request_id = 'audit-deploy' AND action = 'uploadBundle' AND outcome = 'ok'`))
	require.Equal(t, 1, deployRows, "the deploy")
	_ = do(auditCall{method: http.MethodPost, path: "/v1/bundles", header: gz, body: string(bundle2), status: http.StatusCreated}, "uploadBundle")
	do(auditCall{method: http.MethodPut, path: "/v1/workflows/audited/aliases/prod", body: `{"version":1}`, status: http.StatusOK}, "setAlias")
	do(auditCall{method: http.MethodPut, path: "/v1/workflows/audited/aliases/prod", body: `{"version":9}`, status: http.StatusUnprocessableEntity}, "setAlias")
	do(auditCall{method: http.MethodPost, path: "/v1/workflows/audited/aliases/latest/rollback", status: http.StatusOK}, "rollbackAlias")

	run := id(do(auditCall{method: http.MethodPost, path: "/v1/workflows/audited/runs", body: `{}`, status: http.StatusAccepted}, "startRun"))
	rp := "/v1/runs/" + run
	do(auditCall{method: http.MethodGet, path: rp, status: http.StatusOK}, "")
	do(auditCall{method: http.MethodPost, path: rp + "/pause", status: http.StatusOK}, "pauseRun")
	do(auditCall{method: http.MethodPost, path: rp + "/resume", status: http.StatusOK}, "resumeRun")
	do(auditCall{method: http.MethodPost, path: rp + "/signals/go", body: `{"ok":true}`, status: http.StatusOK}, "sendSignal")
	do(auditCall{method: http.MethodPost, path: rp + "/cancel", status: http.StatusOK}, "cancelRun")
	do(auditCall{method: http.MethodPost, path: rp + "/cancel", status: http.StatusConflict}, "cancelRun")
	do(auditCall{method: http.MethodPost, path: rp + "/rerun", body: `{"from_step":"a"}`, status: http.StatusAccepted}, "rerunRun")
	do(auditCall{method: http.MethodPost, path: rp + "/retry", status: http.StatusOK}, "retryRun")
	do(auditCall{method: http.MethodPost, path: "/v1/workflows/audited/pause", status: http.StatusOK}, "pauseWorkflow")
	do(auditCall{method: http.MethodPost, path: "/v1/workflows/audited/resume", status: http.StatusOK}, "resumeWorkflow")
	do(auditCall{method: http.MethodPost, path: "/v1/runs:bulk", body: `{"action":"cancel","filter":{"workflow":"audited"}}`, status: http.StatusAccepted}, "bulkRuns")
	do(auditCall{method: http.MethodPost, path: "/v1/events", body: `{"name":"order.created","data":{}}`, status: http.StatusAccepted}, "sendEvent")

	for _, verb := range []string{"approve", "reject"} {
		gate := "/v1/runs/" + tb.approvalRunOf(t, []string{"operator"}, 1) + "/steps/gate/" + verb
		do(auditCall{method: http.MethodPost, path: gate, status: http.StatusOK}, verb+"Step")
		do(auditCall{method: http.MethodPost, path: gate, status: http.StatusConflict}, verb+"Step")
	}

	var sched []int64
	require.NoError(t, tb.store.DB().SelectContext(ctx, &sched, `SELECT id FROM schedules WHERE workflow = 'audited'`))
	require.Len(t, sched, 1)
	sp := fmt.Sprintf("/v1/schedules/%d", sched[0])
	do(auditCall{method: http.MethodPost, path: sp + "/pause", status: http.StatusOK}, "pauseSchedule")
	do(auditCall{method: http.MethodPost, path: sp + "/resume", status: http.StatusOK}, "resumeSchedule")
	do(auditCall{method: http.MethodPost, path: sp + "/trigger", status: http.StatusAccepted}, "triggerSchedule")
	do(auditCall{method: http.MethodPost, path: sp + "/backfill", body: `{"from":"2026-03-01T00:00:00Z","to":"2026-03-01T03:00:00Z"}`, status: http.StatusOK}, "backfillSchedule")

	do(auditCall{token: adminToken, method: http.MethodPut, path: "/v1/secrets/db", body: `{"value":"s3cret-value"}`, status: http.StatusOK}, "putSecret")
	do(auditCall{token: adminToken, method: http.MethodPut, path: "/v1/limits/db", body: `{"concurrency":2}`, status: http.StatusOK}, "putLimit")
	do(auditCall{token: adminToken, method: http.MethodDelete, path: "/v1/limits/db", status: http.StatusNoContent}, "clearLimit")
	_, err := tb.store.DB().Exec(`INSERT INTO namespaces (name, created_by, updated_by) VALUES ('acme', 't', 't')`)
	require.NoError(t, err)
	do(auditCall{token: adminToken, method: http.MethodPut, path: "/v1/namespaces/acme/quotas", body: `{"running_steps":5}`, status: http.StatusOK}, "putNamespaceQuotas")
	do(auditCall{token: adminToken, method: http.MethodPut, path: "/v1/namespaces/default/quotas", body: `{"running_steps":5}`, status: http.StatusUnprocessableEntity}, "putNamespaceQuotas")
	tok := id(do(auditCall{token: adminToken, method: http.MethodPost, path: "/v1/tokens", body: `{"name":"ci","role":"viewer"}`, status: http.StatusCreated}, "createToken"))
	do(auditCall{token: adminToken, method: http.MethodDelete, path: "/v1/tokens/" + tok, status: http.StatusOK}, "revokeToken")
	do(auditCall{token: adminToken, method: http.MethodPost, path: "/v1/namespaces", body: `{"name":"team-a"}`, status: http.StatusCreated}, "createNamespace")
	do(auditCall{token: adminToken, method: http.MethodGet, path: "/v1/tokens", status: http.StatusOK}, "")
	do(auditCall{token: adminToken, method: http.MethodPost, path: "/v1/audit/export", body: `{}`, status: http.StatusOK}, "exportAudit")

	// Every write of the API was driven above.
	var writes []string
	for _, item := range api.New(nil, nil, nil).API().OpenAPI().Paths {
		for _, op := range []*huma.Operation{item.Post, item.Put, item.Delete, item.Patch} {
			if op != nil && len(op.Security) > 0 {
				writes = append(writes, op.OperationID)
			}
		}
	}
	slices.Sort(writes)
	var got []string
	for k := range driven {
		got = append(got, k)
	}
	slices.Sort(got)
	require.Equal(t, writes, got, "every write operation is driven by this test")

	// The target names what was acted on; the list shows the records.
	var target string
	require.NoError(t, tb.store.DB().GetContext(ctx, &target, `SELECT target FROM audit_log WHERE action = 'setAlias' ORDER BY seq LIMIT 1`))
	require.Equal(t, "name=audited alias=prod", target)
	a = tb.sendAs(t, adminToken, http.MethodGet, "/v1/audit?action=cancelRun&limit=1", nil, nil)
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	page := decode[api.List[api.AuditRecord]](t, a)
	require.Len(t, page.Items, 1)
	require.Equal(t, "failed", page.Items[0].Outcome, "newest first")
	require.Equal(t, "run_finished", page.Items[0].Code)
	a = tb.sendAs(t, adminToken, http.MethodGet, "/v1/audit?action=cancelRun&limit=1&cursor="+page.NextCursor, nil, nil)
	page = decode[api.List[api.AuditRecord]](t, a)
	require.Len(t, page.Items, 1)
	require.Equal(t, "ok", page.Items[0].Outcome)
	require.Empty(t, page.NextCursor)
	a = tb.sendAs(t, operatorToken, http.MethodGet, "/v1/audit", nil, nil)
	require.Equal(t, http.StatusForbidden, a.status, "admins only")
}

// TestAuditRolledBack: a write whose transaction rolls back records nothing. A
// transaction that fails with a serialization failure (once, by a trigger made
// for the test) is rolled back and run again: the write and its record commit
// once. A transaction that fails for good (a 500) leaves no record; a write the
// API refuses (409) records its failure.
func TestAuditRolledBack(t *testing.T) {
	t.Parallel()
	tb := setupWithSecrets(t, nil)
	ctx := context.Background()
	_, err := tb.store.DB().ExecContext(ctx, `
CREATE SEQUENCE limits_tries;
CREATE FUNCTION limits_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.name = 'broken' THEN RAISE EXCEPTION 'the disk is on fire'; END IF;
    -- nextval is not rolled back: the first try fails, the second passes.
    IF NEW.name = 'flaky' AND nextval('limits_tries') = 1 THEN
        RAISE EXCEPTION 'could not serialize access' USING ERRCODE = '40001';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER limits_refuse BEFORE INSERT ON limits FOR EACH ROW EXECUTE FUNCTION limits_refuse();`)
	require.NoError(t, err)
	records := func(rid string) []auditRow {
		var rows []auditRow
		require.NoError(t, tb.store.DB().SelectContext(ctx, &rows,
			`SELECT actor, role, action, target, outcome, code FROM audit_log WHERE request_id = $1`, rid))
		return rows
	}

	a := tb.sendAs(t, adminToken, http.MethodPut, "/v1/limits/flaky", map[string]string{"X-Request-Id": "flaky"}, []byte(`{"concurrency":2}`))
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	var tries int64
	require.NoError(t, tb.store.DB().GetContext(ctx, &tries, `SELECT last_value FROM limits_tries`))
	require.Equal(t, int64(2), tries, "the first transaction rolled back and ran again")
	require.Equal(t, []auditRow{{Actor: "root", Role: "admin", Action: "putLimit", Target: "name=flaky", Outcome: "ok"}}, records("flaky"))

	a = tb.sendAs(t, adminToken, http.MethodPut, "/v1/limits/broken", map[string]string{"X-Request-Id": "broken"}, []byte(`{"concurrency":2}`))
	require.Equal(t, http.StatusInternalServerError, a.status, "%s", a.body)
	require.Empty(t, records("broken"), "a write that rolled back records nothing")

	a = tb.sendAs(t, operatorToken, http.MethodPost, "/v1/workflows/nope/pause", map[string]string{"X-Request-Id": "refused"}, nil)
	require.Equal(t, http.StatusNotFound, a.status, "%s", a.body)
	require.Equal(t, []auditRow{{Actor: "operator", Role: "operator", Action: "pauseWorkflow", Target: "name=nope", Outcome: "failed", Code: "not_found"}}, records("refused"))

	// A refused write whose path holds text the catalog cannot store (the fuzz
	// test's invalid UTF-8 and NUL) is recorded all the same, its target made
	// storable.
	a = tb.sendAs(t, operatorToken, http.MethodPost, "/v1/runs/%C0%AF%00x/cancel", map[string]string{"X-Request-Id": "bad-text"}, nil)
	require.Less(t, a.status, 500, "%s", a.body)
	rows := records("bad-text")
	require.Len(t, rows, 1)
	require.Equal(t, "id=\uFFFD\uFFFDx", rows[0].Target, "a run of bad bytes, then the NUL")

	// Nothing else was recorded.
	n := 0
	require.NoError(t, tb.store.DB().GetContext(ctx, &n, `SELECT count(*) FROM audit_log`))
	require.Equal(t, 3, n)
}

package api_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

type scheduleAnswer struct {
	ID         int64   `json:"id"`
	Workflow   string  `json:"workflow"`
	Name       string  `json:"name"`
	Version    int     `json:"version"`
	Timezone   string  `json:"timezone"`
	Overlap    string  `json:"overlap"`
	Catchup    string  `json:"catchup"`
	Active     bool    `json:"active"`
	Paused     bool    `json:"paused"`
	NextFireAt *string `json:"next_fire_at"`
	LastRunID  *string `json:"last_run_id"`
	UpdatedBy  string  `json:"updated_by"`
}

// TestSchedules: a deploy's schedules are listed; pause, resume, trigger and
// backfill act on them; bad manifests and bad requests are 4xx naming the field.
func TestSchedules(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	gz := map[string]string{"Content-Type": "application/gzip"}

	bad := archive(t, entry{name: "cairn.yaml", body: "name: clock\nsteps: [{key: a, builtin: noop}]\n" +
		"schedules: [{name: h, cron: \"0 * * * *\", timezone: Nowhere/Land}]\n"})
	a := tb.send(t, http.MethodPost, "/v1/bundles", gz, bad)
	require.Equal(t, http.StatusBadRequest, a.status, "%s", a.body)
	require.Contains(t, string(a.body), "schedules[0].timezone")

	good := archive(t, entry{name: "cairn.yaml", body: "name: clock\nsteps: [{key: a, builtin: noop}]\n" +
		"schedules:\n  - {name: h, cron: \"0 * * * *\", timezone: Europe/Paris, input: {k: v}, catchup: 2h}\n"})
	a = tb.send(t, http.MethodPost, "/v1/bundles", gz, good)
	require.Equal(t, http.StatusCreated, a.status, "%s", a.body)

	a = tb.send(t, http.MethodGet, "/v1/schedules?workflow=clock", nil, nil)
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	list := decode[struct{ Items []scheduleAnswer }](t, a)
	require.Len(t, list.Items, 1)
	sc := list.Items[0]
	require.Equal(t, scheduleAnswer{ID: sc.ID, Workflow: "clock", Name: "h", Version: 1, Timezone: "Europe/Paris",
		Overlap: "skip", Catchup: "2h0m0s", Active: true, UpdatedBy: "operator"}, sc)
	a = tb.send(t, http.MethodGet, "/v1/schedules?workflow=other", nil, nil)
	require.Empty(t, decode[struct{ Items []scheduleAnswer }](t, a).Items)

	base := fmt.Sprintf("/v1/schedules/%d", sc.ID)
	a = tb.send(t, http.MethodPost, base+"/pause", nil, nil)
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	require.True(t, decode[scheduleAnswer](t, a).Paused)
	a = tb.send(t, http.MethodPost, base+"/resume", nil, nil)
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	require.False(t, decode[scheduleAnswer](t, a).Paused)

	a = tb.send(t, http.MethodPost, base+"/trigger", nil, nil)
	require.Equal(t, http.StatusAccepted, a.status, "%s", a.body)
	run := decode[struct {
		ID     string            `json:"id"`
		Labels map[string]string `json:"labels"`
		Input  map[string]string `json:"input"`
	}](t, a)
	require.Equal(t, map[string]string{"schedule": "h"}, run.Labels)
	require.Equal(t, map[string]string{"k": "v"}, run.Input)
	a = tb.send(t, http.MethodGet, base, nil, nil)
	require.Equal(t, run.ID, *decode[scheduleAnswer](t, a).LastRunID)

	// One day of an hourly schedule in Paris: 24 runs; a repeat creates none.
	day := []byte(`{"from":"2026-03-01T00:00:00+01:00","to":"2026-03-02T00:00:00+01:00"}`)
	a = tb.send(t, http.MethodPost, base+"/backfill", nil, day)
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	require.JSONEq(t, `{"fires":24,"created":24,"skipped":0}`, string(a.body))
	a = tb.send(t, http.MethodPost, base+"/backfill", nil, day)
	require.JSONEq(t, `{"fires":24,"created":0,"skipped":24}`, string(a.body))
	// The spring-forward day has 23 hours.
	a = tb.send(t, http.MethodPost, base+"/backfill", nil,
		[]byte(`{"from":"2026-03-29T00:00:00+01:00","to":"2026-03-30T00:00:00+02:00"}`))
	require.JSONEq(t, `{"fires":23,"created":23,"skipped":0}`, string(a.body))

	a = tb.send(t, http.MethodPost, base+"/backfill", nil, []byte(`{"from":"2020-01-01T00:00:00Z","to":"2026-01-01T00:00:00Z"}`))
	require.Equal(t, http.StatusUnprocessableEntity, a.status, "%s", a.body)
	require.Contains(t, string(a.body), `"location":"body.to"`)
	a = tb.send(t, http.MethodPost, base+"/backfill", nil, []byte(`{"from":"2026-01-02T00:00:00Z","to":"2026-01-01T00:00:00Z"}`))
	require.Equal(t, http.StatusUnprocessableEntity, a.status, "%s", a.body)
	require.Contains(t, string(a.body), `"location":"body.to"`)

	for _, path := range []string{"/v1/schedules/999999", "/v1/schedules/999999/trigger", "/v1/schedules/999999/pause"} {
		method := http.MethodPost
		if path == "/v1/schedules/999999" {
			method = http.MethodGet
		}
		a = tb.send(t, method, path, nil, nil)
		require.Equal(t, http.StatusNotFound, a.status, "%s %s", path, a.body)
	}

	a = tb.send(t, http.MethodPost, "/v1/schedules/abc/pause", nil, nil)
	require.Equal(t, http.StatusUnprocessableEntity, a.status, "%s", a.body)
	require.Contains(t, string(a.body), `"location":"path.id"`)
	a = tb.sendAs(t, "nobody", http.MethodGet, "/v1/schedules", nil, nil)
	require.Equal(t, http.StatusUnauthorized, a.status, "%s", a.body)

	var events []string
	require.NoError(t, tb.store.DB().SelectContext(t.Context(), &events,
		`SELECT type || ':' || actor FROM schedule_events WHERE schedule_id = $1 ORDER BY id`, sc.ID))
	require.Equal(t, []string{"schedule.paused:operator", "schedule.resumed:operator", "schedule.triggered:operator",
		"schedule.backfilled:operator", "schedule.backfilled:operator", "schedule.backfilled:operator"}, events)

	// A version without the schedule makes it inactive; triggering it is a 409.
	a = tb.send(t, http.MethodPost, "/v1/bundles", gz, archive(t, entry{name: "cairn.yaml", body: "name: clock\nsteps: [{key: b, builtin: noop}]\n"}))
	require.Equal(t, http.StatusCreated, a.status, "%s", a.body)
	a = tb.send(t, http.MethodGet, base, nil, nil)
	require.False(t, decode[scheduleAnswer](t, a).Active)
	a = tb.send(t, http.MethodPost, base+"/trigger", nil, nil)
	require.Equal(t, http.StatusConflict, a.status, "%s", a.body)
}

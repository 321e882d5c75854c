package api_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// helloBundle is a bundle of workflow "hello" with n steps (each n a new digest).
func helloBundle(t *testing.T, n int) []byte {
	t.Helper()
	m := "name: hello\nsteps:\n"
	for i := range n {
		m += fmt.Sprintf("  - {key: s%d, builtin: noop}\n", i)
	}
	return archive(t, entry{name: "cairn.yaml", body: m})
}

type aliasAnswer struct {
	Alias     string `json:"alias"`
	Version   int    `json:"version"`
	UpdatedBy string `json:"updated_by"`
	History   []struct {
		Version         int    `json:"version"`
		PreviousVersion *int   `json:"previous_version"`
		Kind            string `json:"kind"`
		Actor           string `json:"actor"`
	} `json:"history"`
}

func decode[T any](t *testing.T, a *answer) T {
	t.Helper()
	var v T
	require.NoError(t, json.Unmarshal(a.body, &v), "%s", a.body)
	return v
}

// TestAliases: deploy moves latest unless ?promote=false, PUT promotes, rollback
// walks back, runs start on an alias; every bad request is a 4xx naming what is
// wrong.
func TestAliases(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	gz := map[string]string{"Content-Type": "application/gzip"}

	a := tb.send(t, http.MethodPost, "/v1/bundles", gz, helloBundle(t, 1))
	require.Equal(t, http.StatusCreated, a.status, "%s", a.body)
	a = tb.send(t, http.MethodPost, "/v1/bundles", gz, helloBundle(t, 2))
	require.Equal(t, http.StatusCreated, a.status, "%s", a.body)
	require.Equal(t, true, decode[map[string]any](t, a)["promoted"])
	a = tb.send(t, http.MethodPost, "/v1/bundles?promote=false", gz, helloBundle(t, 3))
	require.Equal(t, http.StatusCreated, a.status, "%s", a.body)
	up := decode[map[string]any](t, a)
	require.Equal(t, 3.0, up["version"])
	require.Equal(t, false, up["promoted"])

	type workflow struct {
		LatestVersion int            `json:"latest_version"`
		Aliases       map[string]int `json:"aliases"`
	}
	a = tb.send(t, http.MethodGet, "/v1/workflows/hello", nil, nil)
	require.Equal(t, http.StatusOK, a.status)
	require.Equal(t, workflow{LatestVersion: 2, Aliases: map[string]int{"latest": 2}}, decode[workflow](t, a))

	// Promote stable to 3, then to 1.
	for _, v := range []int{3, 1} {
		a = tb.send(t, http.MethodPut, "/v1/workflows/hello/aliases/stable", nil, fmt.Appendf(nil, `{"version":%d}`, v))
		require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	}
	stable := decode[aliasAnswer](t, a)
	require.Equal(t, 1, stable.Version)
	require.Equal(t, "operator", stable.UpdatedBy, "the token's name")
	require.Len(t, stable.History, 2)
	require.Equal(t, "promote", stable.History[0].Kind)
	require.Equal(t, 3, *stable.History[0].PreviousVersion)
	require.Nil(t, stable.History[1].PreviousVersion)

	a = tb.send(t, http.MethodGet, "/v1/workflows/hello/aliases", nil, nil)
	require.Equal(t, http.StatusOK, a.status)
	list := decode[struct{ Items []aliasAnswer }](t, a)
	require.Len(t, list.Items, 2)
	require.Equal(t, "latest", list.Items[0].Alias)
	require.Equal(t, "stable", list.Items[1].Alias)
	require.Empty(t, list.Items[0].History, "a list shows no history")

	// Runs: on an alias, on latest by default, on a version.
	start := func(body string) *answer {
		t.Helper()
		return tb.send(t, http.MethodPost, "/v1/workflows/hello/runs", nil, []byte(body))
	}
	for body, want := range map[string]int{`{"alias":"stable"}`: 1, `{}`: 2, `{"alias":"latest"}`: 2, `{"version":3}`: 3} {
		a = start(body)
		require.Equal(t, http.StatusAccepted, a.status, "%s: %s", body, a.body)
		require.Equal(t, want, decode[struct{ Version int }](t, a).Version, body)
	}

	// Rollback of latest: back to 1, then nothing left.
	a = tb.send(t, http.MethodPost, "/v1/workflows/hello/aliases/latest/rollback", nil, nil)
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	latest := decode[aliasAnswer](t, a)
	require.Equal(t, 1, latest.Version)
	require.Equal(t, "rollback", latest.History[0].Kind)
	require.Equal(t, "operator", latest.History[0].Actor)
	a = tb.send(t, http.MethodPost, "/v1/workflows/hello/aliases/latest/rollback", nil, nil)
	require.Equal(t, http.StatusConflict, a.status, "%s", a.body)
	require.Equal(t, "nothing_to_roll_back", a.problem.Code)

	// The bad requests.
	tests := []struct {
		name, method, path, body string
		status                   int
		code, location, detail   string
	}{
		{name: "unknown version", method: http.MethodPut, path: "/v1/workflows/hello/aliases/stable", body: `{"version":99}`,
			status: 422, code: "validation_failed", location: "body.version"},
		{name: "version zero", method: http.MethodPut, path: "/v1/workflows/hello/aliases/stable", body: `{"version":0}`,
			status: 422, code: "validation_failed", location: "body.version"},
		{name: "no version", method: http.MethodPut, path: "/v1/workflows/hello/aliases/stable", body: `{}`,
			status: 422, code: "validation_failed", location: "body"}, // Huma's: "expected required property version"
		{name: "alias all digits", method: http.MethodPut, path: "/v1/workflows/hello/aliases/123", body: `{"version":1}`,
			status: 422, code: "validation_failed", location: "path.alias"},
		{name: "alias upper case", method: http.MethodGet, path: "/v1/workflows/hello/aliases/Stable",
			status: 422, code: "validation_failed", location: "path.alias"},
		{name: "unknown workflow", method: http.MethodPut, path: "/v1/workflows/nope/aliases/stable", body: `{"version":1}`,
			status: 404, code: "not_found", detail: `no workflow "nope"`},
		{name: "unknown alias", method: http.MethodGet, path: "/v1/workflows/hello/aliases/canary",
			status: 404, code: "not_found", detail: `workflow "hello" has no alias "canary"`},
		{name: "rollback unknown alias", method: http.MethodPost, path: "/v1/workflows/hello/aliases/canary/rollback",
			status: 404, code: "not_found", detail: `workflow "hello" has no alias "canary"`},
		{name: "list of unknown workflow", method: http.MethodGet, path: "/v1/workflows/nope/aliases",
			status: 404, code: "not_found"},
		{name: "run on unknown alias", method: http.MethodPost, path: "/v1/workflows/hello/runs", body: `{"alias":"canary"}`,
			status: 404, code: "not_found", detail: `workflow "hello" has no alias "canary"`},
		{name: "run on alias and version", method: http.MethodPost, path: "/v1/workflows/hello/runs", body: `{"alias":"stable","version":1}`,
			status: 422, code: "validation_failed", location: "body.alias"},
		{name: "run on a bad alias", method: http.MethodPost, path: "/v1/workflows/hello/runs", body: `{"alias":"7"}`,
			status: 422, code: "validation_failed", location: "body.alias"},
		{name: "run of unknown workflow on an alias", method: http.MethodPost, path: "/v1/workflows/nope/runs", body: `{"alias":"stable"}`,
			status: 404, code: "not_found", detail: `no workflow "nope"`},
		{name: "bad promote", method: http.MethodPost, path: "/v1/bundles?promote=maybe", body: `x`,
			status: 422, code: "validation_failed", location: "query.promote"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var body []byte
			if tt.body != "" {
				body = []byte(tt.body)
			}
			a := tb.send(t, tt.method, tt.path, nil, body)
			require.Equal(t, tt.status, a.status, "%s", a.body)
			require.Equal(t, tt.code, a.problem.Code)
			if tt.location != "" {
				require.Contains(t, a.locations(), tt.location, "%s", a.body)
			}
			require.Contains(t, a.problem.Detail, tt.detail)
		})
	}

	// A redeploy of the first bundle makes it latest again.
	a = tb.send(t, http.MethodPost, "/v1/bundles", gz, helloBundle(t, 3))
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	a = tb.send(t, http.MethodGet, "/v1/workflows/hello/aliases/latest", nil, nil)
	require.Equal(t, 3, decode[aliasAnswer](t, a).Version)
}

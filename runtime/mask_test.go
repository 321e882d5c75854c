package runtime_test

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/functions"
	"github.com/cairnrun/cairn/runtime"
)

// storedLog returns the stored log of an attempt.
func storedLog(t *testing.T, tb *testBundle, id uuid.UUID, key string, attempt int) string {
	t.Helper()
	a, err := tb.store.AttemptGet(context.Background(), id, key, attempt)
	require.NoError(t, err)
	require.NotNil(t, a.LogKey, "the attempt's log is stored")
	return string(readBlob(t, tb, *a.LogKey))
}

// rowsContaining counts the rows of the catalog's steps, events and attempts that
// hold s in their text (jsonb decoded, as viewers get it back).
func rowsContaining(t *testing.T, tb *testBundle, s string) int {
	t.Helper()
	db, err := sql.Open("postgres", tb.dbURL)
	require.NoError(t, err)
	defer db.Close()
	total := 0
	for _, table := range []string{"steps", "events", "attempts"} {
		var n int
		require.NoError(t, db.QueryRow("SELECT count(*) FROM "+table+" t WHERE strpos(t::text, $1) > 0", s).Scan(&n))
		total += n
	}
	return total
}

// TestSecretMaskedInEveryEscaping: a handler prints a
// secret JSON-escaped as PHP does (`ab\/cd…`) and as Python's json.dumps does
// (`…\u00e9…`) in its output, a checkpoint, a progress report and its log. Before,
// the mask missed both; PostgreSQL's jsonb decoded them, and viewers (and the
// catalog) got the secret in clear. Now every form is ***, and no row of the
// catalog holds the value.
func TestSecretMaskedInEveryEscaping(t *testing.T) {
	t.Parallel()
	_, tb := setup(t)
	const secret = "ab/cd-SECRET-é-xyz"
	startDispatcher(t, tb, runtime.Config{Handlers: runtime.HandlerConfig{Secrets: oneSecret{"s1", secret}}})
	v := deploy(t, tb, map[string]string{
		"cairn.yaml": "name: escapes\nsteps:\n  - {key: leak, exec: [./bin/leak], env: {TOK: {secret: s1}}}\n",
		"bin/leak": `#!/bin/sh
cat >/dev/null
esc=$(printf '%s' "$TOK" | sed 's#/#\\/#g')
uni=$(printf '%s' "$TOK" | sed 's#é#\\u00e9#g')
printf '{"checkpoint": {"c": "%s"}}\n' "$esc" >&3
printf '{"progress": {"p": "%s"}}\n' "$uni" >&3
printf 'log: %s %s\n' "$esc" "$uni" >&2
printf '{"slash": "%s", "pyjson": "%s", "raw": "%s"}\n' "$esc" "$uni" "$TOK"
`,
	})
	id := startRun(t, tb, v, "")
	require.Equal(t, catalog.RunSucceeded, waitRun(t, tb, id, time.Minute).Status)

	st := stepMap(t, tb, id)["leak"]
	require.JSONEq(t, `{"slash": "***", "pyjson": "***", "raw": "***"}`, string(st.Output))
	require.JSONEq(t, `{"c": "***"}`, string(st.Checkpoint))
	events, err := tb.store.EventList(context.Background(), id, 0, 1000)
	require.NoError(t, err)
	progress := 0
	for _, e := range events {
		if e.Type == catalog.EventStepProgress {
			progress++
			require.JSONEq(t, `{"progress": {"p": "***"}}`, string(e.Data))
		}
	}
	require.Equal(t, 1, progress)
	require.Equal(t, "log: *** ***\n", storedLog(t, tb, id, "leak", 1))
	require.Zero(t, rowsContaining(t, tb, "SECRET"), "no row of the catalog holds the secret")
}

// TestCallbackURLMasked: the token of an attempt's callback
// URL is the credential that completes its step. A handler that logs its envelope,
// or puts the URL in its output or a progress report, used to hand it to every
// viewer; now the token is masked there (the handler still gets and uses the URL).
func TestCallbackURLMasked(t *testing.T) {
	t.Parallel()
	_, tb := setup(t)
	key := []byte("runtime-callback-key-0123456789")
	startDispatcher(t, tb, runtime.Config{Handlers: runtime.HandlerConfig{SigningKey: key, PublicURL: "http://cairn.example"}})
	dir := t.TempDir()
	v := deploy(t, tb, map[string]string{
		"cairn.yaml": "name: envelope\nsteps:\n  - {key: talk, exec: [./bin/talk, '" + dir + "']}\n",
		"bin/talk": `#!/bin/sh
env=$(cat)
url=$(printf '%s' "$env" | sed -n 's/.*"callback_url":"\([^"]*\)".*/\1/p')
printf '%s' "$url" > "$1/url"
printf 'envelope: %s\n' "$env" >&2
printf '{"progress": {"url": "%s"}}\n' "$url" >&3
printf '{"url": "%s"}\n' "$url" | sed 's#/#\\/#g'
`,
	})
	id := startRun(t, tb, v, "")
	require.Equal(t, catalog.RunSucceeded, waitRun(t, tb, id, time.Minute).Status)

	url, err := os.ReadFile(filepath.Join(dir, "url"))
	require.NoError(t, err)
	token, ok := strings.CutPrefix(string(url), "http://cairn.example/v1/callbacks/")
	require.True(t, ok, "the handler got its callback URL: %q", url)
	_, _, _, err = functions.ParseCallbackToken(key, token)
	require.NoError(t, err, "a genuine token")

	st := stepMap(t, tb, id)["talk"]
	require.JSONEq(t, `{"url": "http://cairn.example/v1/callbacks/***"}`, string(st.Output))
	log := storedLog(t, tb, id, "talk", 1)
	require.Contains(t, log, `"callback_url":"http://cairn.example/v1/callbacks/***"`)
	require.NotContains(t, log, token)
	require.Zero(t, rowsContaining(t, tb, token), "no row of the catalog holds the token")
}

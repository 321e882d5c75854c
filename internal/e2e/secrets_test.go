package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/lib/pq"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/client"
	"github.com/cairnrun/cairn/secrets"
)

// TestSecretsLeaveNoTrace is secrets (docs/webhooks.md), through a real
// `cairn serve`: a secret set with the CLI reaches an exec step's env and an http
// step's Authorization header; the exec handler prints it to stdout and stderr
// and reports it as progress, the http function echoes it in its answer, and a
// second workflow's handler fails printing it to stderr (so the stderr tail lands
// in the attempt's error). The handlers got the value (its SHA-256, the header),
// what is stored shows *** instead; and then every row of every catalog table,
// every file of the blob store (and the servers' caches) and the server log hold
// no trace of it (raw, hex or base64). A step referencing a secret that does not
// exist fails with code secret_not_found, naming it.
func TestSecretsLeaveNoTrace(t *testing.T) {
	t.Parallel()
	st := newStack(t, stackOptions{})
	s := st.start(serverOptions{env: []string{
		"CAIRN_TOKENS=operator:" + operatorToken + ",viewer:" + viewerToken + ",admin:" + adminToken,
		"CAIRN_SECRET_KEY=" + secrets.GenerateKey(),
	}})
	c := s.api()

	var raw [16]byte
	_, _ = rand.Read(raw[:])
	value := "canary-" + hex.EncodeToString(raw[:])
	sum := sha256.Sum256([]byte(value))
	file := filepath.Join(t.TempDir(), "secret")
	require.NoError(t, os.WriteFile(file, []byte(value), 0o600))
	require.Equal(t, "secret api-token: version 1\n", s.cli("secret", "set", "api-token", "--from-file", file, "--token", adminToken))

	var mu sync.Mutex
	var gotAuth []string
	fn := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		gotAuth = append(gotAuth, r.Header.Get("Authorization"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{"auth": r.Header.Get("Authorization")})
	}))
	t.Cleanup(fn.Close)

	c.deploy(map[string]string{
		"cairn.yaml": `name: uses-secret
defaults:
  env: {REGION: eu}
steps:
  - key: print
    exec: ["./bin/print"]
    env: {TOKEN: {secret: api-token}}
  - key: call
    http:
      url: "` + fn.URL + `"
      headers: {Authorization: {secret: api-token}, X-Plain: visible}
`,
		"bin/print": `#!/bin/sh
read -r envelope
echo "stderr: the token is $TOKEN" >&2
printf '{"progress": {"token": "%s"}}\n' "$TOKEN" >&3
sha=$(printf %s "$TOKEN" | sha256sum | cut -c1-64)
printf '{"token": "%s", "sha": "%s", "region": "%s"}' "$TOKEN" "$sha" "$REGION"
`,
	})
	c.deploy(map[string]string{
		"cairn.yaml": `name: fails-with-secret
steps:
  - key: leak
    exec: ["./bin/leak"]
    env: {TOKEN: {secret: api-token}}
`,
		"bin/leak": "#!/bin/sh\necho \"failing, token $TOKEN\" >&2\nexit 3\n",
	})
	c.deploy(map[string]string{
		"cairn.yaml": `name: missing-secret
steps:
  - key: need
    exec: ["./bin/need"]
    env: {TOKEN: {secret: never-set}}
    retry: {max_attempts: 3, delay: 10ms}
`,
		"bin/need": "#!/bin/sh\nexit 0\n",
	})

	ok := c.startRun("uses-secret", 0, nil)
	require.Equal(t, client.RunStatus("succeeded"), c.waitRun(ok, time.Minute).Status)
	var out struct{ Token, Sha, Region string }
	require.NoError(t, json.Unmarshal(c.output(ok, "print"), &out))
	require.Equal(t, "***", out.Token)
	require.Equal(t, hex.EncodeToString(sum[:]), out.Sha, "the handler got the secret's value")
	require.Equal(t, "eu", out.Region)
	require.Contains(t, c.logs(ok, "print", 1), "stderr: the token is ***")
	require.JSONEq(t, `{"auth": "***"}`, string(c.output(ok, "call")))
	mu.Lock()
	require.Equal(t, []string{value}, gotAuth, "the http function got the secret in its header")
	mu.Unlock()

	failed := c.startRun("fails-with-secret", 0, nil)
	require.Equal(t, client.RunStatus("failed"), c.waitRun(failed, time.Minute).Status)
	leakErr := errorOf(c.mustAttempts(failed, "leak")[0].Error)
	require.Equal(t, "exit_status", leakErr.Code)
	require.Contains(t, leakErr.Message, "failing, token ***")

	missing := c.startRun("missing-secret", 0, nil)
	require.Equal(t, client.RunStatus("failed"), c.waitRun(missing, time.Minute).Status)
	as := c.mustAttempts(missing, "need")
	require.Len(t, as, 1, "secret_not_found is terminal")
	needErr := errorOf(as[0].Error)
	require.Equal(t, "secret_not_found", needErr.Code)
	require.Contains(t, needErr.Message, `"never-set"`)
	require.False(t, needErr.Retryable)

	// Let the server write what it writes after the runs (logs, events).
	s.stop(30 * time.Second)

	traces := map[string]string{
		"raw":    value,
		"hex":    hex.EncodeToString([]byte(value)),
		"base64": base64.StdEncoding.EncodeToString([]byte(value)),
		// base64 of the value at the other two offsets of a longer text.
		"base64+1": strings.TrimRight(base64.StdEncoding.EncodeToString([]byte("x" + value))[4:], "="),
		"base64+2": strings.TrimRight(base64.StdEncoding.EncodeToString([]byte("xx" + value))[4:], "="),
	}
	for k, v := range traces {
		if strings.HasPrefix(k, "base64") {
			traces[k] = v[:len(v)-4] // the last group depends on what follows
		}
	}
	find := func(where string, data []byte) {
		t.Helper()
		lower := bytes.ToLower(data)
		for kind, tr := range traces {
			needle := []byte(tr)
			if kind == "hex" {
				needle = bytes.ToLower(needle)
				require.False(t, bytes.Contains(lower, needle), "%s holds the secret (%s)", where, kind)
				continue
			}
			require.False(t, bytes.Contains(data, needle), "%s holds the secret (%s)", where, kind)
		}
	}

	// Every row of every table of the catalog, as text.
	db, err := sql.Open("postgres", st.dbURL)
	require.NoError(t, err)
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rows, err := db.QueryContext(ctx, `SELECT quote_ident(table_schema) || '.' || quote_ident(table_name) FROM information_schema.tables
		WHERE table_type = 'BASE TABLE' AND table_schema NOT IN ('pg_catalog', 'information_schema') ORDER BY 1`)
	require.NoError(t, err)
	var tables []string
	for rows.Next() {
		var name string
		require.NoError(t, rows.Scan(&name))
		tables = append(tables, name)
	}
	require.NoError(t, rows.Err())
	require.GreaterOrEqual(t, len(tables), 10)
	totalRows := 0
	for _, table := range tables {
		var dump []byte
		var n int
		require.NoError(t, db.QueryRowContext(ctx, fmt.Sprintf(`SELECT coalesce(string_agg(r::text, E'\n'), ''), count(*) FROM %s r`, table)).Scan(&dump, &n))
		totalRows += n
		find("table "+table, dump)
	}
	require.Greater(t, totalRows, 20)

	// Every file of the stack: the blob store, the servers' caches and logs.
	files := 0
	require.NoError(t, filepath.WalkDir(st.dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !d.Type().IsRegular() {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		files++
		find(path, data)
		return nil
	}))
	log, err := os.ReadFile(s.logPath)
	require.NoError(t, err)
	require.NotEmpty(t, log)
	find("the server log", log)
	t.Logf("searched %d tables (%d rows) and %d files", len(tables), totalRows, files)
}

// TestSecretWithoutKey: on a server without CAIRN_SECRET_KEY a step referencing
// a secret fails at once with code secret_not_found, saying why.
func TestSecretWithoutKey(t *testing.T) {
	t.Parallel()
	st := newStack(t, stackOptions{})
	s := st.start(serverOptions{})
	c := s.api()
	c.deploy(map[string]string{
		"cairn.yaml": `name: no-key
steps:
  - key: call
    http: {url: "http://127.0.0.1:1/never", headers: {Authorization: {secret: api-token}}}
    retry: {max_attempts: 3, delay: 10ms}
`,
	})
	id := c.startRun("no-key", 0, nil)
	require.Equal(t, client.RunStatus("failed"), c.waitRun(id, time.Minute).Status)
	as := c.mustAttempts(id, "call")
	require.Len(t, as, 1)
	e := errorOf(as[0].Error)
	require.Equal(t, "secret_not_found", e.Code)
	require.Contains(t, e.Message, `"api-token"`)
	require.Contains(t, e.Message, "CAIRN_SECRET_KEY")
}

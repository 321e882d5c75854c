package e2e

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/client"
)

// TestExecHandlersCannotReachTheServer runs escapes from a handler (docs/security.md)
// against a real `cairn serve`: a handler that reads its parent's
// environment and command line, the credentials they lead to, and the server's
// other files sees nothing of the server; a handler that rewrites its bundle gets
// a read-only error and the next step runs the original program.
func TestExecHandlersCannotReachTheServer(t *testing.T) {
	t.Parallel()
	requireBwrap(t)
	st := newStack(t, stackOptions{})
	credentials := filepath.Join(st.dir, "credentials")
	require.NoError(t, os.WriteFile(credentials, []byte("CAIRN_ADMIN_TOKEN=audit-canary-token\n"), 0o644))
	s := st.start(serverOptions{env: []string{"CAIRN_EXEC_ISOLATION=bwrap", "AWS_SECRET_ACCESS_KEY=audit-canary-aws", "CAIRN_CREDENTIALS_HINT=" + credentials}})
	api := s.api()
	api.deploy(map[string]string{
		"cairn.yaml": `name: audit-isolation
steps:
  - {key: leak, exec: ["./bin/leak"]}
  - {key: tamper, exec: ["./bin/tamper"]}
  - {key: victim, needs: [tamper], exec: ["./bin/victim"]}
`,
		"bin/leak": `#!/bin/sh
cat >/dev/null
{
  tr '\0' '\n' < /proc/$PPID/environ
  tr '\0' '\n' < /proc/$PPID/cmdline
  for p in /proc/[0-9]*; do tr '\0' '\n' < $p/environ; done
  cat ` + credentials + `
  cat ` + filepath.Join(st.dir, "*.log") + `
} 2>/dev/null | grep -E 'canary|e2e-|CAIRN_TOKENS|CAIRN_DATABASE_URL|CAIRN_SIGNING_KEY|AWS_' | sed 's/^/LEAK /' >&2
echo "{\"uid\": $(id -u), \"processes\": $(ls -d /proc/[0-9]* | wc -l)}"
`,
		"bin/tamper": `#!/bin/sh
cat >/dev/null
chmod u+w . bin bin/victim 2>/dev/null
printf '#!/bin/sh\ncat >/dev/null\necho "{\\"victim\\":\\"PWNED\\"}"\n' > bin/victim && echo WRITE-OK >&2
touch dropped 2>/dev/null && echo CREATE-OK >&2
echo '{}'
`,
		"bin/victim": "#!/bin/sh\ncat >/dev/null\necho '{\"victim\":\"original\"}'\n",
	})
	id := api.startRun("audit-isolation", 0, nil)
	run := api.waitRun(id, 30*time.Second)
	require.Equal(t, client.RunStatusSucceeded, run.Status, "run error: %s", jsonOf(run.Error))

	leakLog := api.logs(id, "leak", 1)
	require.NotContains(t, leakLog, "LEAK", "the handler saw the server's secrets")
	out := string(api.output(id, "leak"))
	require.Contains(t, out, `"uid": 65534`, "a root server runs handlers as nobody")
	require.Regexp(t, regexp.MustCompile(`"processes": [1-9]\b`), out, "only the sandbox's own processes")

	tamperLog := api.logs(id, "tamper", 1)
	require.NotContains(t, tamperLog, "WRITE-OK")
	require.NotContains(t, tamperLog, "CREATE-OK")
	require.Contains(t, tamperLog, "Read-only file system")
	require.JSONEq(t, `{"victim":"original"}`, string(api.output(id, "victim")))
}

// TestNonRootServerRunsHello: `cairn serve` as a user other than root runs
// examples/hello with isolated handlers: it installs the bundle in its cache and
// its handlers run in a user namespace. Two users: nobody, and the non-root user
// of our Docker image (its USER line). A Docker engine is not available here:
// running the image's uid outside Docker is what this machine can prove.
func TestNonRootServerRunsHello(t *testing.T) {
	t.Parallel()
	requireBwrap(t)
	if os.Geteuid() != 0 {
		t.Skip("dropping to another user needs root; this test run is already not root")
	}
	for _, tc := range []struct {
		name string
		uid  int
	}{{"nobody", 65534}, {"docker-image-user", dockerfileUID(t)}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st := newStack(t, stackOptions{})
			s := st.start(serverOptions{uid: tc.uid, env: []string{"CAIRN_EXEC_ISOLATION=bwrap"}})
			api := s.api()
			api.deploy(readTree(t, filepath.Join(moduleRootT(t), "examples", "hello")))
			id := api.startRun("hello", 0, map[string]string{"name": "ada"})
			run := api.waitRun(id, 30*time.Second)
			require.Equal(t, client.RunStatusSucceeded, run.Status, "run error: %s", jsonOf(run.Error))
			for _, step := range api.mustSteps(id) {
				require.EqualValues(t, 1, step.Attempts, "step %s", step.Key)
			}
			require.Contains(t, string(api.output(id, "join")), "ada")
			// The server really ran as that user.
			b, err := os.ReadFile("/proc/" + strconv.Itoa(s.pid) + "/status")
			require.NoError(t, err)
			require.Regexp(t, regexp.MustCompile(`(?m)^Uid:\s+`+strconv.Itoa(tc.uid)+`\s`), string(b))
		})
	}
}

// dockerfileUID reads the uid of the Dockerfile's USER line.
func dockerfileUID(t *testing.T) int {
	t.Helper()
	f, err := os.Open(filepath.Join(moduleRootT(t), "Dockerfile"))
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "USER "); ok {
			uid, err := strconv.Atoi(strings.Split(strings.TrimSpace(rest), ":")[0])
			require.NoError(t, err, "USER %s", rest)
			require.NotZero(t, uid, "the image must not run as root")
			return uid
		}
	}
	require.NoError(t, sc.Err())
	t.Fatal("the Dockerfile has no USER line")
	return 0
}

func moduleRootT(t *testing.T) string {
	t.Helper()
	root, err := moduleRoot()
	require.NoError(t, err)
	return root
}

// readTree reads a folder into the path → content map that deploy takes.
func readTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	files := map[string]string{}
	require.NoError(t, filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		files[filepath.ToSlash(rel)] = string(b)
		return err
	}))
	return files
}

// requireBwrap skips a test without bubblewrap, or fails it under CI=true (`make
// tools` installs it there).
func requireBwrap(t *testing.T) {
	t.Helper()
	for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
		if _, err := os.Stat(filepath.Join(dir, "bwrap")); err == nil {
			return
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("bubblewrap (bwrap) is not installed; `make tools` installs it")
	}
	t.Skip("bubblewrap (bwrap) is not installed; `make tools` installs it")
}

package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/client"
	"github.com/cairnrun/cairn/secrets"
)

// TestNamespacesRunApart is namespaces (docs/security.md, "Namespaces") through a
// real `cairn serve` and the CLI: one bundle deployed in default and in acme; a
// secret of one name set to two values; an event sent in acme. The event starts
// acme's workflow only, whose step reads acme's secret and starts acme's child
// workflow; default's workflow runs nothing and reads nothing of acme's. A token
// scoped to acme sees acme's runs and not default's.
func TestNamespacesRunApart(t *testing.T) {
	t.Parallel()
	st := newStack(t, stackOptions{})
	s := st.start(serverOptions{env: []string{
		"CAIRN_TOKENS=operator:" + operatorToken + ",viewer:" + viewerToken + ",admin:" + adminToken,
		"CAIRN_SECRET_KEY=" + secrets.GenerateKey(),
	}})
	admin := func(args ...string) string { return s.cli(append(args, "--token", adminToken)...) }
	require.Equal(t, "namespace acme created\n", admin("namespace", "create", "acme"))
	require.Contains(t, admin("namespace", "list"), "acme")

	for ns, value := range map[string]string{"default": "value-of-default", "acme": "value-of-acme"} {
		file := filepath.Join(t.TempDir(), "secret")
		require.NoError(t, os.WriteFile(file, []byte(value), 0o600))
		admin("secret", "set", "db", "--from-file", file, "--namespace", ns)
	}

	dir := t.TempDir()
	write := func(name, body string, mode os.FileMode) {
		p := filepath.Join(dir, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(body), mode))
	}
	write("shop/cairn.yaml", `name: shop
triggers:
  - {event: order.paid}
steps:
  - key: read
    exec: ["./bin/read"]
    env: {DB: {secret: db}}
  - key: mail
    needs: [read]
    workflow: {name: mailer}
`, 0o644)
	write("shop/bin/read", "#!/bin/sh\ncat >/dev/null\nprintf '{\"sha\": \"%s\"}' \"$(printf %s \"$DB\" | sha256sum | cut -c1-64)\"\n", 0o755)
	write("mailer/cairn.yaml", "name: mailer\nsteps:\n  - {key: send, builtin: noop}\n", 0o644)
	for _, ns := range []string{"default", "acme"} {
		s.cli("deploy", filepath.Join(dir, "mailer"), "--namespace", ns)
		s.cli("deploy", filepath.Join(dir, "shop"), "--namespace", ns)
	}

	s.cli("event", "send", "order.paid", "--namespace", "acme")

	scoped := strings.TrimSpace(admin("token", "create", "acme-viewer", "--role", "viewer", "--scope", "acme"))
	acme, err := client.New(s.url, scoped)
	require.NoError(t, err)
	c := &apiClient{t: t, cl: acme}
	shop := c.waitRuns("shop", 1, time.Minute)
	run := c.waitRun(shop[0].ID, 2*time.Minute)
	require.Equal(t, client.RunStatus("succeeded"), run.Status, "%v", run.Error)
	var out struct{ Sha string }
	require.NoError(t, json.Unmarshal(c.output(shop[0].ID, "read"), &out))
	sum := sha256.Sum256([]byte("value-of-acme"))
	require.Equal(t, hex.EncodeToString(sum[:]), out.Sha, "acme's step read acme's secret")
	mailer := c.waitRuns("mailer", 1, time.Minute)
	require.Len(t, mailer, 1, "the child run is acme's mailer")

	// Nothing ran in default, and acme's token cannot reach default's objects.
	def := s.api()
	for _, wf := range []string{"shop", "mailer"} {
		runs, err := def.listRuns(wf)
		require.NoError(t, err)
		require.Empty(t, runs, "default's %s ran nothing", wf)
	}
	_, err = def.run(shop[0].ID)
	require.NoError(t, err, "a token of every namespace reaches a run by its ID")
	def.startRun("mailer", 0, nil)
	all, err := c.listRuns("mailer")
	require.NoError(t, err)
	require.Len(t, all, 1, "acme's token lists acme's runs only")
}

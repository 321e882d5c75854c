// Package examples holds the example bundles (one folder each) and this test,
// which shows how a Go integration suite tests a bundle with package cairntest.
package examples

import (
	"strings"
	"testing"

	"github.com/cairnrun/cairn/cairntest"
	"github.com/cairnrun/cairn/client"
)

// TestHello deploys examples/hello to a private Cairn, runs it and checks the
// joined greeting.
func TestHello(t *testing.T) {
	t.Parallel()

	srv := cairntest.Start(t)
	srv.Deploy(t, "hello")
	run := srv.Run(t, "hello", map[string]any{"name": "ada"})
	if run.Status != client.RunStatusSucceeded {
		t.Fatalf("run %s: %s: %v", run.Id, run.Status, run.Error)
	}
	var out struct{ Message string }
	srv.OutputJSON(t, run.Id, "join", &out)
	if !strings.Contains(out.Message, "Hello, ada!") || !strings.Contains(out.Message, "Bonjour, ada!") {
		t.Fatalf("join: %q, want both greetings for ada", out.Message)
	}
}

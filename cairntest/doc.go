// Package cairntest runs a private Cairn for a Go test: your integration suite
// deploys its bundles, starts runs and checks what they produced against a real
// server, with the real catalog and dispatcher, torn down when the test ends.
//
//	func TestHello(t *testing.T) {
//		srv := cairntest.Start(t)
//		srv.Deploy(t, "../examples/hello")
//		run := srv.Run(t, "hello", map[string]any{"name": "ada"})
//		if run.Status != client.RunStatusSucceeded {
//			t.Fatalf("run %s: %v", run.Status, run.Error)
//		}
//		var out struct{ Message string }
//		srv.OutputJSON(t, run.Id, "join", &out)
//	}
//
// [Start] gives a running server: by default in the test's process, as `cairn
// dev` runs, with its catalog in a PostgreSQL cluster started from the PostgreSQL
// binaries installed on the machine (initdb and postgres: Debian's postgresql
// package, or $CAIRN_PG_BIN), a file blob store and a dispatcher, all in a
// temporary folder. Exec handlers run in a bubblewrap sandbox where bubblewrap
// works, else unisolated (a warning in the server's log). The [Server] has the
// API's URL, a token of each role and a [client.Client] with the operator's;
// t.Cleanup stops everything and removes the folder. The server's log is shown
// in the test's output when the test fails.
//
// [WithDocker] runs the server image and PostgreSQL in containers instead, through
// a Docker-compatible engine (DOCKER_HOST, or the default socket): the image your
// production runs, with the same API.
//
// Start takes a few seconds (a new cluster, then the migrations): start one
// server per test binary or per group of tests where that matters, and give each
// test its own workflows. A Server is safe for concurrent use by parallel tests.
package cairntest

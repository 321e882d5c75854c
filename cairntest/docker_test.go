//go:build docker

package cairntest_test

import (
	"os"
	"testing"

	"github.com/ory/dockertest/v3"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/cairntest"
	"github.com/cairnrun/cairn/client"
)

// TestStartDocker runs examples/hello on the server's image through a
// Docker-compatible engine (WithDocker). It runs only where one answers
// (DOCKER_HOST or the default socket): CI machines have none, so it skips there.
// The image is CAIRNTEST_IMAGE, default cairn:local (docker build -t cairn:local .).
func TestStartDocker(t *testing.T) {
	t.Parallel()

	pool, err := dockertest.NewPool("")
	if err == nil {
		err = pool.Client.PingWithContext(t.Context())
	}
	if err != nil {
		t.Skipf("no Docker-compatible engine answers (DOCKER_HOST=%q): %v", os.Getenv("DOCKER_HOST"), err)
	}
	srv := cairntest.Start(t, cairntest.WithDocker(cairntest.DockerConfig{Image: os.Getenv("CAIRNTEST_IMAGE")}))
	srv.Deploy(t, "../examples/hello")
	run := srv.Run(t, "hello", map[string]any{"name": "ada"})
	require.Equal(t, client.RunStatusSucceeded, run.Status, "%v", run.Error)
	require.Contains(t, string(srv.Output(t, run.Id, "join")), "Bonjour, ada!")
}

package testrun

import (
	"context"
	"os"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// sharedEnv is the embedded catalog of this test binary: one cluster, whose
// template every case clones (package-level because there is no TestMain to
// keep it; its cluster dies with the binary: pglocal's DieWithParent).
var sharedEnv struct {
	once sync.Once
	env  *Env
	err  error
}

// testEnv returns the shared Env, started on first use.
func testEnv(t *testing.T) *Env {
	t.Helper()
	sharedEnv.once.Do(func() {
		sharedEnv.env, sharedEnv.err = StartEnv(context.Background(), EnvConfig{})
	})
	require.NoError(t, sharedEnv.err, "start the embedded catalog (needs the PostgreSQL binaries; CAIRN_PG_BIN)")
	return sharedEnv.env
}

// runnerFor deploys the bundle folder dir into a fresh Env of its own (the
// shared one's template holds the bundles deployed before) and returns its
// runner.
func runnerFor(t *testing.T, dir string, cfg *Config) *Runner {
	t.Helper()
	ctx := context.Background()
	env, err := StartEnv(ctx, EnvConfig{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = env.Close(context.Background()) })
	v, err := env.Deploy(ctx, dir)
	require.NoError(t, err)
	r, err := NewRunner(env, v, cfg)
	require.NoError(t, err)
	return r
}

func TestMain(m *testing.M) {
	code := m.Run()
	if sharedEnv.env != nil {
		_ = sharedEnv.env.Close(context.Background())
	}
	os.Exit(code)
}

package testrun

import (
	"context"
	"os"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/catalog"
)

// testBundles are deployed into the shared Env's template before any case
// runs (a deploy writes the template, which a clone must not see changing).
var testBundles = []string{"testdata/yearly", "testdata/orders", "../examples/nightly", "testdata/flows"}

// sharedEnv is the embedded catalog of this test binary: one cluster, whose
// template every case clones (package-level because the test binary has one
// cluster for all its tests; TestMain closes it, and pglocal's DieWithParent
// ends it should the binary die).
var sharedEnv struct {
	once     sync.Once
	env      *Env
	versions map[string]*catalog.Version
	err      error
}

// runnerFor returns a runner of the bundle dir, one of testBundles, on the
// shared Env.
func runnerFor(t *testing.T, dir string, cfg *Config) *Runner {
	t.Helper()
	sharedEnv.once.Do(func() {
		ctx := context.Background()
		sharedEnv.env, sharedEnv.err = StartEnv(ctx, EnvConfig{})
		if sharedEnv.err != nil {
			return
		}
		sharedEnv.versions = map[string]*catalog.Version{}
		for _, d := range testBundles {
			v, err := sharedEnv.env.Deploy(ctx, d)
			if err != nil {
				sharedEnv.err = err
				return
			}
			sharedEnv.versions[d] = v
		}
	})
	require.NoError(t, sharedEnv.err, "start the embedded catalog (needs the PostgreSQL binaries; CAIRN_PG_BIN)")
	v := sharedEnv.versions[dir]
	require.NotNil(t, v, "%s is not in testBundles", dir)
	r, err := NewRunner(sharedEnv.env, v, cfg)
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

package testenv

import (
	"context"
	"errors"
	"net/url"
	"os"
	"testing"

	"github.com/cairnrun/cairn/internal/pglocal"
)

// PgBouncer starts a PgBouncer in transaction mode (pool_mode=transaction, how
// managed setups usually reach PostgreSQL) in front of the server of dbURL (a
// postgres:// URL with a role and password, from DatabaseURL or
// ClusterDatabaseURL) for this test, and stops it when the test ends. Its URL
// method gives dbURL through it. Without a pgbouncer
// binary it skips the test, or fails it when CI=true (`make tools` installs it).
func PgBouncer(t testing.TB, dbURL string) *pglocal.Bouncer {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatalf("testenv: parse %s: %v", dbURL, err)
	}
	password, _ := u.User.Password()
	dir, err := os.MkdirTemp("", "cairn-pgbouncer-")
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	ctx, cancel := context.WithTimeout(context.Background(), dbStartTimeout)
	defer cancel()
	b, err := pglocal.StartBouncer(ctx, pglocal.BouncerConfig{
		Dir:           dir,
		Target:        u.Host,
		Users:         map[string]string{u.User.Username(): password},
		DieWithParent: true,
	})
	switch {
	case errors.Is(err, pglocal.ErrNoBouncer):
		unavailable(t, err.Error())
	case err != nil:
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			if log, err := os.ReadFile(b.LogFile()); err == nil {
				t.Logf("pgbouncer log:\n%s", tail(log, 8<<10))
			}
		}
		_ = b.Stop()
	})
	return b
}

// PooledURL is dbURL through b (Bouncer.URL), failing the test on a malformed URL.
func PooledURL(t testing.TB, b *pglocal.Bouncer, dbURL string) string {
	t.Helper()
	out, err := b.URL(dbURL)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return out
}

// tail is the last n bytes of b.
func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

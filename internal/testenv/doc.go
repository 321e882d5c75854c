// Package testenv is the test harness: real servers, a fresh PostgreSQL
// database and a fresh S3 bucket for each test, with no build tags and no
// TestMain.
//
// Databases: [DB] returns a pool on a fresh, fully migrated database (a clone
// of a template that holds the embedded migrations), [DatabaseURL] its URL for
// a cairn subprocess. Both use one server per test binary, chosen in order
// from CAIRN_TEST_DATABASE_URL ([EnvDatabaseURL]), a private cluster started
// from the installed PostgreSQL binaries (package internal/pglocal), or a
// postgres:16.4 container. Tests that stop or kill PostgreSQL take a cluster
// of their own from [PG] and a database on it from [ClusterDatabaseURL]. The
// servers started here ask every connection for a password (random ones, like
// `cairn dev`'s), and the tests work as roles that are not superusers.
//
// Buckets: [S3Endpoint], [S3Bucket] and [Blobs] do the same for S3, with
// CAIRN_TEST_S3_ENDPOINT, a local versitygw process or a MinIO container.
//
// The binary: [CairnBinary] builds ./cmd/cairn once per test binary for tests
// that run the real `cairn` as a subprocess; [RemoveCairnBinary], from a
// TestMain, removes it when the tests end (without one, a later build does).
//
// An OpenID provider: package internal/testenv/oidcprovider starts a real one
// (zitadel/oidc's op package) in the test process, with the users, groups and
// CI workloads a test gives it, for single sign-on and OIDC bearer tests.
//
// With no server available a test is skipped, except under CI=true, where it
// fails with what to install: nothing is skipped silently in CI.
//
// Servers started here must not outlive the test binary, which has no hook
// at its end: they get the kernel's parent-death signal (PostgreSQL: SIGQUIT,
// an immediate shutdown), and their temporary directories, named after the
// binary's pid, are removed by a later run once that pid is gone. Containers
// carry a label with their owner and a lifetime cap, and are purged likewise.
package testenv

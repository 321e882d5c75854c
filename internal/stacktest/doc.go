// Package stacktest checks the wiring of the Docker Compose stack (compose.yaml,
// Dockerfile, the LocalStack init hooks) without a Docker engine, which our
// machines do not run: it parses the files and asserts what `docker compose up`
// relies on. Pinned images, health checks, start order, the server's database,
// blob store and tokens, ports bound to 127.0.0.1, a non-root image with a
// HEALTHCHECK, and the Lambda zip that the init hook deploys being the one
// `make lambda-zip` builds.
//
// Compose's own validation, `docker compose config -q`, needs the Docker CLI's
// compose plugin, which CI does not have; run it by hand where Docker is installed
// (a test that skips in CI would prove nothing).
//
// The package holds tests only; it is no library.
package stacktest

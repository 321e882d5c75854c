// Package e2e holds the end-to-end recovery suites that run the real binary: each
// test builds `cairn` once per test binary (go build ./cmd/cairn), starts `cairn serve`
// processes on a fresh database and blob store of its own, and then kills them
// (SIGKILL), freezes them (SIGSTOP), stops them (SIGTERM), takes PostgreSQL or the S3
// server away from them, and checks through the HTTP API, with the generated client
// (package client), that every run still ends as docs/architecture.md says: completions
// fenced by their lease, expired leases swept, checkpoints resumed, infrastructure
// failures retried without using up attempts.
//
// The package has no non-test code. Its tests need PostgreSQL binaries and the
// versitygw S3 server, like internal/testenv; without them they are skipped (and
// fail under CI=true). CAIRN_E2E_BINARY, when set, names a cairn binary to run
// instead of building one.
package e2e

// Package catalog is Cairn's PostgreSQL catalog: every SQL statement the system runs
// lives here, one file per entity, behind a concrete Store.
//
// Driver errors are translated at one place (translateError): no rows becomes
// ErrNotFound, a unique violation ErrConflict, serialization failures and deadlocks
// ErrRetryable. Callers check them with errors.Is.
//
// The schema comes from package migrations and is applied by goose (Migrate). A
// server checks it with CheckSchema before serving: a schema behind or ahead of the
// binary is an error that says what to do.
package catalog

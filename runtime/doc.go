// Package runtime is Cairn's engine: the dispatcher that claims ready steps from the
// catalog with leases, invokes one short-lived handler per attempt, heartbeats its
// leases, and commits each attempt's outcome (fenced by the lease token); the sweeper
// that returns expired leases; retry policies; and payload handling (outputs and
// checkpoints over the inline limit go to the blob store, and large inputs reach
// handlers as local files or presigned URLs, through a size-capped local cache).
//
// The dispatcher keeps to the step path: its loops claim, complete, heartbeat,
// sweep, wake, expand maps and listen for notifications. The server's
// housekeeping (retention, the blob collector, schedules, bulk operations, span
// export, the registry of live dispatchers) is the work of the services of package
// maintenance, which cairn serve runs beside it.
//
// The package is named for what it is, the engine's runtime, although it shadows
// the standard library's runtime: a file that needs both imports one of them under
// another name (cmd/cairn and the exec invoker do). Likewise package functions is
// plural because it holds the invokers of every kind of function, not one function.
//
// Dispatchers are stateless: any number of them run against one database. The
// catalog's state machine (migrations, cairn_* functions) decides what follows an
// outcome; the dispatcher only reports outcomes (catalog.Outcome; catalog's state.go
// lists what each one does).
//
// # Lost leases
//
// A lease is lost when another dispatcher's sweeper took the step (its lease
// expired), or the run was canceled. Three errors carry the news, one per layer:
//
//   - catalog.ErrLeaseLost: a write fenced by the lease token (heartbeat, checkpoint,
//     progress, completion) found that the token is no longer the step's: nothing
//     was written. The catalog's functions report it per item as a false, never as
//     an error text.
//   - functions.ErrLeaseLost: what a functions.Sink method wraps when its catalog
//     write failed with catalog.ErrLeaseLost (attemptSink turns one into the other),
//     so that an invoker, which does not import catalog, stops the handler.
//   - errLeaseLost: the cause with which the dispatcher cancels an attempt's context
//     when a heartbeat finds the lease gone, so that runAttempt tells it from a
//     timeout, a cancel (errRunCanceled) and a shutdown (errShutdown).
//
// In all three cases the attempt's outcome is not written: the step is someone
// else's now; a completion that meets catalog.ErrLeaseLost is dropped and counted in
// cairn_lease_lost_total.
package runtime

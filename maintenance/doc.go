// Package maintenance holds the server's housekeeping services: the loops that keep
// the catalog and the blob store tidy beside the dispatcher's step path (claim,
// attempt, complete, heartbeat, sweep, wake, map and listen, package runtime).
//
//   - Reaper deletes the finished runs past their retention (archiving those
//     configured so) and the expired idempotency keys (reaper.go).
//   - Collector deletes the blobs no catalog row names and the leftovers of crashed
//     uploads; `cairn gc` runs one pass of it (collector.go).
//   - ScheduleFirer fires the manifests' schedules (schedules.go).
//   - EventFlowFirer starts the runs event triggers' debounce, batch and
//     singleton queue held back (event_flow.go).
//   - OperationWorker applies bulk operations, POST /v1/runs:bulk (operations.go).
//   - SpanExporter records the trace spans no attempt records (spans.go).
//   - Registry keeps a dispatcher's row in the catalog's registry of live
//     dispatchers (registry.go).
//
// Each is a small type with its own config (a nil config means defaults), built by
// its New function, run by Start (which returns once its loop runs) and ended by
// Stop (which cancels the loop, waits for it, and is safe twice and before Start);
// Group starts and stops several. cairn serve and cairn dev run them all beside
// their dispatcher (cmd/cairn/maintenance.go), on every server: the SQL lets one
// server at a time act on each row, so they need no leader.
//
// The package imports catalog, blobstore and bundle, never runtime: a service and the
// dispatcher share only the catalog, and what cairn serve hands one to the other
// (the dispatcher's name, its tags, its note of database errors).
package maintenance

// Package runtime is Cairn's engine: the dispatcher that claims ready steps from the
// catalog with leases, invokes one short-lived handler per attempt, heartbeats its
// leases, and commits each attempt's outcome (fenced by the lease token); the sweeper
// that returns expired leases; retry policies; and payload handling (outputs and
// checkpoints over the inline limit go to the blob store, and large inputs reach
// handlers as local files or presigned URLs).
//
// Dispatchers are stateless: any number of them run against one database. The
// catalog's state machine (migrations, cairn_* functions) decides what follows an
// outcome; the dispatcher only reports outcomes.
package runtime

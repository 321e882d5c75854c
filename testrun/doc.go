// Package testrun runs workflow test cases (`cairn test`, docs/testing.md) on
// the real state machine: each case gets its own database, a clone of a
// migrated template holding the bundle, a runtime.Dispatcher whose invokers
// answer the case's mocks (and run the real handlers of the steps it does not
// mock), and a virtual clock (catalog.InstallVirtualClock) that jumps to the
// next due time whenever nothing is left to do at the current one, so a case
// that sleeps a year ends in well under a second.
//
// Nothing of the semantics is re-implemented here: conditions, retries,
// compensations, waits, timeouts and deadlines are the catalog's SQL functions
// and the runtime's code, as in production. This package only delivers the
// case's events (signals, approvals, callbacks) at their virtual times and
// compares what the catalog recorded with the case's expectations.
package testrun

// Package api is Cairn's HTTP API: Huma v2 operations under /v1, bearer-token auth
// with roles, RFC 9457 problem details, server-sent events and the OpenAPI 3.1
// document (committed as api/openapi.yaml and served at /openapi.json and
// /openapi.yaml, with a docs page at /docs).
//
// Routes are registered by New, outside main, so tests drive them through a real
// listener (httptest) and the generated client. Handlers return errors; problemFor
// (problem.go) alone turns them into error classes, and so statuses.
package api

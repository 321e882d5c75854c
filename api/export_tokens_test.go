package api

// TokenCacheTTL is how stale a server's view of a managed token may be, for the
// tests of package api_test.
const TokenCacheTTL = tokenCacheTTL

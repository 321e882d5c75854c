package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/client"
)

// TestMapText: a map's progress in cairn run get.
func TestMapText(t *testing.T) {
	t.Parallel()
	total := int64(100000)
	require.Equal(t, "312/100000 ✓ 2 ✗", mapText(client.MapProgress{Created: 1200, Total: &total, Succeeded: 312, Failed: 2}))
	require.Equal(t, "312/1200+ ✓ 0 ✗", mapText(client.MapProgress{Created: 1200, Succeeded: 312}))
}

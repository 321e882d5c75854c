package runtime

import (
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestInfraErrorHidesServerPaths: what viewers see of an infrastructure
// failure names no file of the server, but keeps URLs and the cause.
func TestInfraErrorHidesServerPaths(t *testing.T) {
	t.Parallel()
	err := fmt.Errorf("install bundle sha256:ab: %w", &os.LinkError{Op: "rename",
		Old: "/var/lib/cairn/cache/tmp/bundle-1/tree", New: "/var/lib/cairn/cache/bundles/ab", Err: os.ErrPermission})
	e := infraError("prepare the attempt", err)
	require.NotContains(t, e.Message, "/var/lib")
	require.Contains(t, e.Message, "rename <path> <path>: permission denied")

	e = infraError("store the output", errors.New(`Put "http://minio:9000/bucket/payloads/x": dial tcp: connection refused`))
	require.Contains(t, e.Message, "http://minio:9000/bucket/payloads/x", "URLs are not server paths")
	e = infraError("open", errors.New("open '/etc/cairn/tokens' (=/srv/x)"))
	require.Equal(t, "cairn could not open: open '<path>' (=<path>)", e.Message)
}

package pglocal

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestLeftoverAttachedSharedMemory: a killed server's processes are gone but its
// shared memory is still attached for a while (the kernel drops the last
// reference to a dead process's memory late when another task held it; here the
// test attaches to the segment itself). PostgreSQL refuses to start while it is
// ("pre-existing shared memory block is still in use"): the start waits for it.
func TestLeftoverAttachedSharedMemory(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	c := startKeeping(t, cfg, 3)
	require.NoError(t, c.Kill())

	pidPath := filepath.Join(c.DataDir(), pidFileName)
	id, ok := pidFileShmID(pidPath)
	require.True(t, ok, "postmaster.pid records the shared memory segment")
	mem, err := unix.SysvShmAttach(id, 0, unix.SHM_RDONLY)
	require.NoError(t, err)
	require.True(t, shmAttached(pidPath))
	detached := make(chan time.Time, 1)
	go func() {
		time.Sleep(time.Second)
		detached <- time.Now()
		_ = unix.SysvShmDetach(mem)
	}()

	c2 := startCluster(t, cfg)
	require.False(t, time.Now().Before(<-detached), "started before the segment was let go")
	require.Equal(t, "3", queryString(t, openDB(t, c2.URL("postgres")), "SELECT v::text FROM kept"))
}

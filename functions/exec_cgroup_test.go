package functions

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// The cgroup v2 path cannot run on the machine these tests were written on (a
// cgroup v1 hybrid whose v2 hierarchy has only hugetlb), and moving a test
// process between real cgroups needs a delegated hierarchy: these tests check
// its logic against a temporary directory laid out like cgroupfs (the files the
// kernel would show), not the kernel's behaviour.

// fakeCgroupfs lays out a cgroup v2 mount in a temporary directory: the root's
// cgroup.controllers, and at path own the server's cgroup with controllers and
// subtree_control.
func fakeCgroupfs(t *testing.T, own, controllers, subtree string) string {
	t.Helper()
	root := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(root, "cgroup.controllers"), []byte(controllers+"\n"), 0o644))
	dir := filepath.Join(root, own)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "cgroup.controllers"), []byte(controllers+"\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte(subtree+"\n"), 0o644))
	return root
}

// TestCgroupDetect: a cgroup v2 with the cpu, memory and pids controllers is
// used, the server moved into a leaf of its own and the controllers enabled for
// its children when they are not yet; anything else (cgroup v1, a v2 hierarchy
// without the controllers, no v2 cgroup for the process) falls back to rlimits,
// saying why.
func TestCgroupDetect(t *testing.T) {
	t.Parallel()
	const svc = "system.slice/cairn.service"
	self := []byte("12:pids:/x\n1:name=systemd:/x\n0::/" + svc + "\n")

	root := fakeCgroupfs(t, svc, "cpuset cpu io memory hugetlb pids", "")
	cg, err := detectCgroupV2(root, self, 4242)
	require.NoError(t, err)
	dir := filepath.Join(root, svc)
	require.Equal(t, dir, cg.dir)
	procs, err := os.ReadFile(filepath.Join(dir, "cairn-server", "cgroup.procs"))
	require.NoError(t, err)
	require.Equal(t, "4242", string(procs), "the server leaves the cgroup whose children it limits")
	subtree, err := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
	require.NoError(t, err)
	require.Equal(t, "+cpu +memory +pids", string(subtree))

	// Delegated with the controllers on already (systemd's Delegate=, a
	// container's runtime): nothing moves.
	root = fakeCgroupfs(t, svc, "cpu memory pids", "cpu memory pids")
	cg, err = detectCgroupV2(root, self, 4242)
	require.NoError(t, err)
	require.NoDirExists(t, filepath.Join(cg.dir, "cairn-server"))

	for _, tt := range []struct {
		name, why string
		root      func() string
		self      []byte
	}{
		{"cgroup v1", "not a cgroup v2", func() string { return t.TempDir() }, self},
		{"this machine: v2 with hugetlb alone", "controller cpu is not available",
			func() string { return fakeCgroupfs(t, "", "hugetlb", "") }, []byte("0::/\n")},
		{"no memory controller", "controller memory is not available",
			func() string { return fakeCgroupfs(t, svc, "cpu pids", "") }, self},
		{"no v2 cgroup", "no 0:: line", func() string { return fakeCgroupfs(t, svc, "cpu memory pids", "") },
			[]byte("1:name=systemd:/\n")},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := detectCgroupV2(tt.root(), tt.self, 1)
			require.ErrorIs(t, err, errNoCgroup)
			require.ErrorContains(t, err, tt.why)
		})
	}
}

// TestCgroupAttempt: an attempt's cgroup gets memory.max (and no swap), cpu.max
// (cpu × the 100 ms period) and pids.max; memory.events' oom_kill makes the
// failure resource_exhausted; the cgroup is removed afterwards.
func TestCgroupAttempt(t *testing.T) {
	t.Parallel()
	cg := &cgroupV2{dir: t.TempDir()}
	res := &Resources{MemoryBytes: 64 << 20, CPU: 1.5, Pids: 100}
	a, err := cg.create("attempt-1", res)
	require.NoError(t, err)
	read := func(file string) string {
		b, err := os.ReadFile(filepath.Join(a.dir, file))
		require.NoError(t, err)
		return string(b)
	}
	require.Equal(t, strconv.Itoa(64<<20), read("memory.max"))
	require.Equal(t, "0", read("memory.swap.max"))
	require.Equal(t, "150000 100000", read("cpu.max"))
	require.Equal(t, "100", read("pids.max"))
	require.NotNil(t, a.fd, "the directory is open for CLONE_INTO_CGROUP")

	require.Equal(t, 0, a.oomKills(), "no memory.events yet")
	require.NoError(t, os.WriteFile(filepath.Join(a.dir, "memory.events"),
		[]byte("low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\noom_group_kill 0\n"), 0o644))
	require.Equal(t, 1, a.oomKills())
	f := cgroupFailure(res, a.oomKills(), &Error{Message: "killed by signal 9 (killed)", Code: CodeSignal, Retryable: true})
	require.Equal(t, CodeResourceExhausted, f.Code)
	require.False(t, f.Retryable)
	require.Contains(t, f.Message, "out-of-memory killer")

	require.NoError(t, a.remove())
	require.NoDirExists(t, a.dir)

	// A tiny cpu share gets the kernel's least quota; unset limits write nothing.
	b, err := cg.create("attempt-2", &Resources{CPU: 0.001})
	require.NoError(t, err)
	q, err := os.ReadFile(filepath.Join(b.dir, "cpu.max"))
	require.NoError(t, err)
	require.Equal(t, "1000 100000", string(q))
	require.NoFileExists(t, filepath.Join(b.dir, "memory.max"))
	require.NoFileExists(t, filepath.Join(b.dir, "pids.max"))
	require.NoError(t, b.remove())
}

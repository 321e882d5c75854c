package functions

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSandboxNoNamespacesNoKernelExtras: a handler cannot make a
// user namespace (where it would be root and mount a tmpfs past its memory
// limit) nor any other, and runs under a seccomp filter that refuses mount,
// ptrace, bpf and keyctl.
func TestSandboxNoNamespacesNoKernelExtras(t *testing.T) {
	t.Parallel()
	b := setupSandbox(t)
	b.script(t, "probe", `cat >/dev/null
unshare -Ur id 2>/dev/null && echo USERNS-OK
unshare -Urn true 2>/dev/null && echo NETNS-OK
unshare -m true 2>/dev/null && echo MOUNTNS-OK
grep -E '^(Seccomp|NoNewPrivs):' /proc/self/status | tr -d '\t '
python3 - <<'PY'
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
# ptrace(PTRACE_TRACEME), keyctl(KEYCTL_GET_KEYRING_ID), bpf(BPF_PROG_LOAD), mount
for name, nr, args in [("ptrace", 101, (0, 0, 0, 0)), ("keyctl", 250, (0, -3, 0, 0)), ("bpf", 321, (5, 0, 0, 0)),
                       ("mount", 165, (b"none", b"/tmp", b"tmpfs", 0)), ("userfaultfd", 323, (0, 0, 0, 0))]:
    r = libc.syscall(nr, *args)
    print(name, "refused" if r == -1 and ctypes.get_errno() == 1 else "ALLOWED %d errno %d" % (r, ctypes.get_errno()))
PY`)
	sink := &testSink{}
	require.NoError(t, b.exec.Invoke(context.Background(), b.invocation("./probe"), sink), sink.LogText())
	out := sink.Out()
	require.NotContains(t, out, "-OK")
	require.NotContains(t, out, "ALLOWED")
	require.Contains(t, out, "Seccomp:2\n")
	require.Contains(t, out, "NoNewPrivs:1\n")
	for _, call := range []string{"ptrace", "keyctl", "bpf", "mount", "userfaultfd"} {
		require.Contains(t, out, call+" refused\n")
	}
}

// TestSandboxDefaultLimits: a handler whose step
// sets no resources still has the server's bounds: memory (3 GiB refused under
// the 2 GiB default), processes (a fork loop stops at the bound), each file (a
// memfd under a 256Mi memory limit cannot grow to 1 GiB) and, on a root
// server, its HOME and TMPDIR together.
func TestSandboxDefaultLimits(t *testing.T) {
	t.Parallel()
	requireBwrap(t)
	b := setupExec(t, &ExecConfig{Isolation: IsolationBwrap, DefaultPids: 64, TempBytes: 64 << 20})

	b.script(t, "bin/alloc", `cat >/dev/null; exec python3 -c 'b = bytearray(3 << 30); b[-1] = 1; print("{}")'`)
	err := b.exec.Invoke(context.Background(), b.invocation("./bin/alloc"), &testSink{})
	var fe *Error
	require.True(t, errors.As(err, &fe), "3 GiB went through: %v", err)
	require.Equal(t, CodeResourceExhausted, fe.Code, fe.Message)
	require.Contains(t, fe.Message, "2147483648 bytes")

	b.script(t, "bin/fork", `cat >/dev/null
i=0; while [ $i -lt 200 ]; do sleep 30 & i=$((i+1)); done
echo "{\"processes\": $(ls -d /proc/[0-9]* | wc -l)}"`)
	sink := &testSink{}
	err = b.exec.Invoke(context.Background(), b.invocation("./bin/fork"), sink)
	if err == nil {
		// The shell survived its failed forks: its count is the proof.
		var n int
		_, scanErr := fmt.Sscanf(strings.TrimSpace(sink.Out()), `{"processes": %d}`, &n)
		require.NoError(t, scanErr, sink.Out())
		require.LessOrEqual(t, n, 64+4, "processes in the sandbox past the bound")
	}
	require.Contains(t, sink.LogText(), "fork", "the shell was refused processes: %s", sink.LogText())

	b.script(t, "bin/memfd", `cat >/dev/null; exec python3 -c '
import os
fd = os.memfd_create("x"); c = b"\x01" * (1 << 20)
try:
    [os.write(fd, c) for _ in range(1024)]
except OSError as e:
    print("refused at", os.fstat(fd).st_size)
else:
    print("wrote", os.fstat(fd).st_size)'`)
	inv := b.invocation("./bin/memfd")
	inv.Spec.Resources = &Resources{MemoryBytes: 256 << 20}
	sink = &testSink{}
	_ = b.exec.Invoke(context.Background(), inv, sink) // SIGXFSZ may end it
	require.NotContains(t, sink.Out(), "wrote 1073741824", "a memfd grew past the memory limit")

	if os.Geteuid() == 0 {
		b.script(t, "bin/fill", `cat >/dev/null
dd if=/dev/zero of="$HOME/a" bs=1M count=40 2>/dev/null && echo home-ok
dd if=/dev/zero of="$TMPDIR/b" bs=1M count=40 2>&1 | grep -o 'No space left on device'`)
		sink = &testSink{}
		_ = b.exec.Invoke(context.Background(), b.invocation("./bin/fill"), sink)
		require.Equal(t, "home-ok\nNo space left on device\n", sink.Out(), sink.LogText())
	}
}

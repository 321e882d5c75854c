"""The exec kind: the envelope on stdin, the output on stdout, fd 3 for control."""

import json
import os
import sys
import tempfile
import threading

from ._call import Call
from ._errors import Error, retryable, terminal
from ._output import invoke

# How long a control message may be before save_checkpoint sends a
# checkpoint_file instead: under the server's limit of one line (1 MiB).
MAX_CONTROL_LINE = 512 << 10


class ExecChannel:
    """Control messages on the descriptor CAIRN_CONTROL_FD names (3), or on
    stderr when the handler runs by hand, outside Cairn."""

    def __init__(self, stderr):
        self._lock = threading.Lock()
        self._stderr = stderr
        self._f = None
        fd = os.environ.get("CAIRN_CONTROL_FD", "")
        if fd.isdigit() and int(fd) > 2:
            try:
                self._f = os.fdopen(int(fd), "wb", buffering=0)
            except OSError:
                self._f = None

    def send(self, key, raw):
        line = b'{"' + key.encode() + b'":' + raw + b"}\n"
        with self._lock:
            if self._f is not None:
                self._f.write(line)
            else:
                self._stderr.write(b"cairn control (no CAIRN_CONTROL_FD): " + line)
                self._stderr.flush()

    def checkpoint(self, body):
        if len(body) < MAX_CONTROL_LINE:
            self.send("checkpoint", body)
            return
        # Too long for one control line: a file in the attempt's TMPDIR, whose
        # bytes the server stores; a newer checkpoint gets a file of its own.
        fd, path = tempfile.mkstemp(prefix="cairn-checkpoint-", suffix=".json")
        with os.fdopen(fd, "wb") as f:
            f.write(body)
        self.send("checkpoint_file", json.dumps(os.path.abspath(path)).encode())

    def progress(self, body):
        self.send("progress", body)

    def fail(self, err):
        try:
            self.send("error", err.to_json().encode())
        except OSError as e:
            self._stderr.write(f"cairn: report the failure: {e}\n".encode())
        self._stderr.write(f"cairn: {err}\n".encode())
        self._stderr.flush()


def run_exec(handler, stdin=None, stdout=None, stderr=None):
    """Runs one exec attempt and returns the exit status: 0 on success, 1 when
    the handler failed (the failure is sent on fd 3 and written to stderr)."""
    stdin = stdin or sys.stdin.buffer
    stdout = stdout or sys.stdout.buffer
    stderr = stderr or sys.stderr.buffer
    channel = ExecChannel(stderr)
    try:
        envelope = json.loads(stdin.read() or b"null")
        if not isinstance(envelope, dict):
            raise ValueError("not an object")
    except ValueError as e:
        channel.fail(terminal("protocol", f"read the envelope from stdin: {e}"))
        return 1
    call = Call(envelope, "exec", channel)
    try:
        _, chunks = invoke(handler, call)
    except Error as e:
        channel.fail(e)
        return 1
    try:
        for chunk in chunks:
            stdout.write(chunk)
        stdout.flush()
    except Error as e:
        channel.fail(e)
        return 1
    except Exception as e:  # noqa: BLE001 - a stream that broke off
        call.logger.exception("write the output")
        channel.fail(retryable("output", f"write the output: {type(e).__name__}: {e}"))
        return 1
    return 0

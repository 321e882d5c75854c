"""A handler's result, as bytes to write."""

import json

from ._errors import Error, as_error, terminal

CHUNK = 64 << 10


class Stream:
    """An output written as it is produced: ``chunks`` is an iterable of bytes
    (or str, encoded as UTF-8), or a binary file object, read a chunk at a time.
    Nothing holds the output whole. ``content_type`` is sent by the http adapter.
    """

    def __init__(self, chunks, content_type="application/octet-stream"):
        self.chunks = chunks
        self.content_type = content_type


def _file_chunks(f):
    try:
        while True:
            b = f.read(CHUNK)
            if not b:
                return
            yield b
    finally:
        close = getattr(f, "close", None)
        if close:
            close()


def _encode(chunks):
    for c in chunks:
        if isinstance(c, str):
            c = c.encode()
        if c:
            yield c


def to_output(value):
    """(content type, iterable of bytes) for a handler's result."""
    if value is None:
        return "application/json", [b"null"]
    if isinstance(value, (bytes, bytearray, memoryview)):
        return "application/octet-stream", [bytes(value)]
    if isinstance(value, Stream):
        chunks = value.chunks
        if hasattr(chunks, "read"):
            chunks = _file_chunks(chunks)
        return value.content_type, _encode(chunks)
    if hasattr(value, "read"):
        return "application/octet-stream", _file_chunks(value)
    if hasattr(value, "__next__"):  # a generator or iterator: streamed
        return "application/octet-stream", _encode(value)
    # JSON, encoded a piece at a time.
    try:
        pieces = json.JSONEncoder(allow_nan=False).iterencode(value)
        first = next(pieces, "")
    except (TypeError, ValueError) as e:
        raise terminal("invalid_output", f"encode the output as JSON: {e}") from None
    return "application/json", _encode(_chain(first, pieces))


def _chain(first, rest):
    yield first
    yield from rest


def invoke(handler, call):
    """Runs the handler: (content type, chunks) or raises an Error."""
    try:
        value = handler(call)
    except BaseException as e:  # noqa: BLE001 - every failure is reported
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        if isinstance(e, Error):
            call.logger.warning("the handler failed: %s", e)
        else:
            call.logger.exception("the handler failed")
        raise as_error(e) from None
    suspended = call._suspend_output()
    if suspended is not None:
        if value is not None:
            raise terminal("protocol", "the handler suspended and returned an output too: return None after suspend")
        return "application/json", [suspended]
    return to_output(value)


__all__ = ["Stream", "to_output", "invoke", "Error"]

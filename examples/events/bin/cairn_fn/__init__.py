"""Cairn's function SDK for Python: one handler serves a step of every kind.

The standard library only, Python >= 3.9. The protocol is docs/functions.md; this
package hides it::

    import cairn_fn

    def handle(call):
        name = call.input.get("name", "world")
        return {"greeting": f"hello, {name}"}

    if __name__ == "__main__":
        cairn_fn.run(handle)

``run`` picks the kind from the environment: ``CAIRN_FN_LISTEN`` (an address,
``:8080``) serves http calls (verified with ``CAIRN_SIGNING_KEY``), anything else
runs one exec attempt (stdin, stdout, fd 3). On AWS Lambda, point the function's
handler at ``cairn_fn.lambda_handler(handle)``. ``wsgi_app(handle)`` serves http
calls under any WSGI server.

What a handler returns is the step's output: ``None`` is JSON null, ``bytes``
are written as they are, a ``Stream``, a generator or a file object is written
as it is produced (never held whole), anything else is encoded as JSON. Raise
``cairn_fn.Error`` (``terminal(code, message)``, ``retryable(code, message)``)
to say whether Cairn retries; any other exception is retryable. Error messages
of this package never hold the attempt's credentials (the lease token, the
callback and checkpoint URLs, presigned URLs, the signing key).
"""

from ._call import Blob, Call, LeaseLost, parse_blob
from ._errors import Error, retryable, terminal
from ._output import Stream
from ._exec import run_exec
from ._http import serve, verify_signature, wsgi_app, InvalidSignature
from ._lambda import lambda_handler
from ._run import run

__all__ = [
    "Blob",
    "Call",
    "Error",
    "InvalidSignature",
    "LeaseLost",
    "Stream",
    "lambda_handler",
    "parse_blob",
    "retryable",
    "run",
    "run_exec",
    "serve",
    "terminal",
    "verify_signature",
    "wsgi_app",
]

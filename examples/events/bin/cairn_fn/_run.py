"""run: serve a handler as the kind the environment says."""

import os
import sys

from ._exec import run_exec
from ._http import serve


def run(handler):
    """Serves ``handler`` and exits: http calls when CAIRN_FN_LISTEN names an
    address (":8080"), verified with CAIRN_SIGNING_KEY, until SIGTERM; else one
    exec attempt (exit status 0 on success, 1 on failure). On Lambda, use
    ``lambda_handler(handler)`` as the function's handler instead."""
    listen = os.environ.get("CAIRN_FN_LISTEN")
    if listen:
        serve(handler, listen)
        sys.exit(0)
    sys.exit(run_exec(handler))

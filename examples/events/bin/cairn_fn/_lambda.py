"""The lambda kind: a handler function for AWS Lambda's Python runtime."""

import json

from ._call import Call, UrlChannel
from ._errors import Error, retryable
from ._output import invoke


class CairnError(Exception):
    """A failure as Lambda reports it: its text is {"message", "code",
    "retryable"}, which Cairn reads from the function error's errorMessage."""


def lambda_handler(handler):
    """A Lambda handler function serving ``handler``: the event is the envelope.

    Lambda's Python runtime encodes what a function returns as JSON, so the
    output is a JSON value: a Stream or bytes are collected and returned as
    text (Lambda bounds a response to 6 MB; larger outputs need exec or http).
    """

    def handle(event, context=None):
        if isinstance(event, (bytes, str)):
            event = json.loads(event)
        call = Call(event, "lambda", UrlChannel(event))
        try:
            content_type, chunks = invoke(handler, call)
            data = b"".join(chunks)
        except Error as e:
            raise CairnError(e.to_json()) from None
        except Exception as e:  # noqa: BLE001 - a stream that broke off
            raise CairnError(retryable("output", f"write the output: {e}").to_json()) from None
        if content_type == "application/json":
            return json.loads(data)
        return data.decode("utf-8", errors="replace")

    return handle

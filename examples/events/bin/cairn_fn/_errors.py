"""Errors a handler raises, as Cairn records them."""

import json


class Error(Exception):
    """A handler's failure: a message, a short code, and whether a retry may help.

    Raise one from a handler; any other exception is retryable with code
    ``failed``. ``retry_after`` (seconds) is sent as Retry-After by the http
    adapter; exec and lambda have no such channel.
    """

    def __init__(self, message, code="failed", retryable=True, retry_after=None):
        super().__init__(message)
        self.message = str(message) or "the handler failed without a message"
        self.code = code
        self.retryable = bool(retryable)
        self.retry_after = retry_after

    def __str__(self):
        return f"{self.code}: {self.message}" if self.code else self.message

    def to_json(self):
        """The error as Cairn reads it: {"message", "code", "retryable"}."""
        return json.dumps({"message": self.message, "code": self.code, "retryable": self.retryable})


def terminal(code, message):
    """An Error that Cairn does not retry: the step fails at once."""
    return Error(message, code=code, retryable=False)


def retryable(code, message, retry_after=None):
    """An Error that Cairn retries under the step's retry policy."""
    return Error(message, code=code, retryable=True, retry_after=retry_after)


def as_error(exc):
    """What a handler raised, as an Error."""
    if isinstance(exc, Error):
        return exc
    return Error(f"{type(exc).__name__}: {exc}", code="failed", retryable=True)

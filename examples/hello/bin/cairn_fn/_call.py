"""One attempt of a step, as its handler sees it."""

import io
import json
import logging
import sys
import threading

from ._errors import terminal


class LeaseLost(Exception):
    """Cairn refused a checkpoint: the attempt no longer holds its step. Stop."""


class Blob:
    """The body of a {"$blob": ...} reference: a value too large to travel inline.

    ``path`` is set for exec (a local, read-only file), ``url`` for http and
    lambda (a presigned GET, when the blob store is S3).
    """

    def __init__(self, body):
        self.digest = body.get("digest", "")
        self.size = body.get("size", 0)
        self.content_type = body.get("content_type", "")
        self.path = body.get("path", "")
        self.url = body.get("url", "")

    def open(self, timeout=60):
        """Opens the blob's bytes as a binary stream: its file, or a GET of its URL.

        Errors name the blob by digest, never by its URL (a credential).
        """
        if self.path:
            try:
                return open(self.path, "rb")
            except OSError as e:
                raise OSError(f"open $blob {self.digest}: {e.strerror}") from None
        if self.url:
            import urllib.error  # here, not at the top: exec handlers do without it
            import urllib.request

            try:
                return urllib.request.urlopen(self.url, timeout=timeout)
            except urllib.error.HTTPError as e:
                raise OSError(f"open $blob {self.digest}: GET its url: {e.code} {e.reason}") from None
            except (urllib.error.URLError, OSError) as e:
                reason = getattr(e, "reason", e)
                raise OSError(f"open $blob {self.digest}: GET its url: {reason}") from None
        raise OSError(
            f"open $blob {self.digest}: it has neither a path nor a url "
            "(an http or lambda function needs a blob store that presigns: S3)"
        )


def parse_blob(value):
    """The Blob a value of the envelope references, or None for any other value."""
    if isinstance(value, dict) and len(value) == 1 and isinstance(value.get("$blob"), dict):
        return Blob(value["$blob"])
    return None


def _logger(env):
    log = logging.getLogger("cairn_fn")
    if not log.handlers:
        h = logging.StreamHandler(sys.stderr)
        h.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        log.addHandler(h)
        log.setLevel(logging.INFO)
        log.propagate = False
    return logging.LoggerAdapter(log, {"run_id": env.get("run_id"), "step": env.get("step")})


class Call:
    """One attempt of a step: the envelope, and the ways back to Cairn.

    Attributes: ``run_id``, ``workflow``, ``version``, ``step``, ``attempt``,
    ``kind`` ("exec", "http" or "lambda"), ``input``, ``params``, ``deps`` (step
    key to output, as sent: a value or a $blob reference), ``item`` and
    ``index`` (map instances), ``failure`` (failure handlers), ``traceparent``,
    ``idempotency_key`` ("<run_id>/<step>": the same on every attempt), and
    ``envelope``, the document as sent.
    """

    def __init__(self, envelope, kind, channel):
        self.envelope = envelope
        self.kind = kind
        self._channel = channel
        self._lock = threading.Lock()
        self._suspended = None
        self.run_id = envelope.get("run_id", "")
        self.workflow = envelope.get("workflow", "")
        self.version = envelope.get("version", 0)
        self.step = envelope.get("step", "")
        self.attempt = envelope.get("attempt", 0)
        self.input = envelope.get("input")
        self.params = envelope.get("params") or {}
        self.deps = envelope.get("deps") or {}
        self.item = envelope.get("item")
        self.index = envelope.get("index")
        self.failure = envelope.get("failure")
        self.traceparent = envelope.get("traceparent", "")
        self.idempotency_key = f"{self.run_id}/{self.step}"
        self.logger = _logger(envelope)

    def log(self, message, *args):
        """Writes a line to the attempt's log (stderr; for exec Cairn keeps it)."""
        self.logger.info(message, *args)

    def decode(self, value, into=None):
        """A value of the envelope, a $blob read and decoded as JSON; ``into``
        (a dataclass or any class taking keyword arguments) builds a typed value."""
        blob = parse_blob(value)
        if blob is not None:
            with blob.open() as f:
                value = json.load(f)
        if into is not None and isinstance(value, dict):
            return into(**value)
        return value

    def input_as(self, into):
        """The run's input as a typed value (``into(**input)``)."""
        return self.decode(self.input, into)

    def params_as(self, into):
        """The step's params as a typed value (``into(**params)``)."""
        return self.decode(self.params, into)

    def dep(self, key, into=None):
        """The output of the upstream step ``key``, decoded (a $blob is read)."""
        if key not in self.deps:
            raise KeyError(f"dep {key!r}: not among this step's needs")
        return self.decode(self.deps[key], into)

    def open(self, value):
        """A value of the envelope as a binary stream: a $blob's file or URL,
        any other value its JSON text."""
        blob = parse_blob(value)
        if blob is not None:
            return blob.open()
        return io.BytesIO(json.dumps(value).encode())

    def open_dep(self, key):
        """The output of the upstream step ``key`` as a binary stream."""
        if key not in self.deps:
            raise KeyError(f"dep {key!r}: not among this step's needs")
        return self.open(self.deps[key])

    @property
    def checkpoint(self):
        """The newest checkpoint of an earlier attempt (decoded), or None: resume
        from it."""
        return self.decode(self.envelope.get("checkpoint"))

    def save_checkpoint(self, value):
        """Stores ``value`` (JSON) as the step's checkpoint. exec sends it on fd 3
        (a large one as a checkpoint_file); http and lambda PUT it to the
        checkpoint_url. Raises LeaseLost when the attempt lost its step."""
        self._channel.checkpoint(json.dumps(value).encode())

    def progress(self, value):
        """Reports progress (JSON). exec records it as a step.progress event; http
        and lambda functions have no channel for it, so it goes to the log."""
        self._channel.progress(json.dumps(value).encode())

    heartbeat = progress

    def suspend(self, timeout=None, on_timeout="fail"):
        """Ends the attempt without an output and returns the callback URL.

        The step waits, holding nothing, until a third party POSTs the result to
        the URL (or ``timeout`` passes: a Go duration such as "72h", or seconds;
        None waits forever; ``on_timeout`` "continue" then succeeds with null).
        Hand the URL on, then return None: the answer is {"$suspend": ...}. The
        URL is a credential: never log it.
        """
        url = self.envelope.get("callback_url")
        if not url:
            raise terminal("protocol", "suspend: the envelope has no callback_url (the server has no signing key)")
        body = {}
        if timeout is not None:
            body["timeout"] = f"{int(timeout)}s" if isinstance(timeout, (int, float)) else str(timeout)
        if on_timeout != "fail":
            body["on_timeout"] = on_timeout
        with self._lock:
            self._suspended = body
        return url

    def _suspend_output(self):
        with self._lock:
            if self._suspended is None:
                return None
            return json.dumps({"$suspend": self._suspended}).encode()


class UrlChannel:
    """Checkpoints through the envelope's checkpoint_url (http and lambda)."""

    def __init__(self, envelope, logger=None):
        self._env = envelope
        self._logger = logger

    def checkpoint(self, body):
        url, token = self._env.get("checkpoint_url"), self._env.get("lease_token")
        if not url or not token:
            raise OSError("save checkpoint: the envelope has no checkpoint_url")
        import urllib.error  # here, not at the top: exec handlers do without it
        import urllib.request

        req = urllib.request.Request(url, data=body, method="PUT")
        req.add_header("Content-Type", "application/json")
        req.add_header("Authorization", "Bearer " + token)
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                resp.read()
        except urllib.error.HTTPError as e:
            if e.code == 409:
                raise LeaseLost(f"save checkpoint: PUT checkpoint_url: {e.code} {e.reason}") from None
            raise OSError(f"save checkpoint: PUT checkpoint_url: {e.code} {e.reason}") from None
        except (urllib.error.URLError, OSError) as e:
            raise OSError(f"save checkpoint: PUT checkpoint_url: {getattr(e, 'reason', e)}") from None

    def progress(self, body):
        logging.getLogger("cairn_fn").info("progress %s", body.decode())

"""The http kind: Cairn POSTs the envelope, the response is the output."""

import hashlib
import hmac
import json
import logging
import math
import os
import signal
import threading
import time

from ._call import Call, UrlChannel
from ._errors import Error, terminal
from ._output import invoke

MAX_ENVELOPE = 64 << 20
DEFAULT_MAX_SKEW = 300


class InvalidSignature(Exception):
    """A Cairn-Signature that is missing, malformed, wrong or too old."""


def verify_signature(key, header, body, max_skew=DEFAULT_MAX_SKEW, now=None):
    """Checks a Cairn-Signature header ("t=<unix>,v1=<hex>") against the raw
    body: the HMAC-SHA256, keyed with ``key``, of "<t>.<body>", with t within
    ``max_skew`` seconds of the clock. Raises InvalidSignature, whose message
    never quotes the header."""
    if not key:
        raise InvalidSignature("no signing key")
    if isinstance(key, str):
        key = key.encode()
    ts, sigs = None, []
    for part in (header or "").split(","):
        k, sep, v = part.strip().partition("=")
        if not sep:
            continue
        if k == "t":
            if ts is not None:
                raise InvalidSignature("two timestamps")
            ts = v
        elif k == "v1":
            sigs.append(v)
    if ts is None or not sigs:
        raise InvalidSignature("no Cairn-Signature with t= and v1=")
    if not ts.lstrip("-").isdigit() or str(int(ts)) != ts:
        raise InvalidSignature("a malformed timestamp")
    now = time.time() if now is None else now
    if abs(now - int(ts)) > max_skew:
        raise InvalidSignature(f"timestamp outside {max_skew} s of the local clock")
    want = hmac.new(key, ts.encode() + b"." + body, hashlib.sha256).hexdigest()
    if not any(hmac.compare_digest(want, s.lower()) for s in sigs):
        raise InvalidSignature("no matching v1 signature")


def _key(signing_key, insecure):
    key = signing_key or os.environ.get("CAIRN_SIGNING_KEY", "")
    if not key and not insecure:
        raise ValueError(
            "cairn_fn: an http function needs the signing key (signing_key= or CAIRN_SIGNING_KEY) "
            "to verify Cairn-Signature; insecure=True skips the check"
        )
    return key


def _error(status, err, headers=()):
    return status, [("Content-Type", "application/json"), *headers], [err.to_json().encode()]


def handle_request(handler, key, insecure, body, get_header):
    """(status, headers, chunks) for one call; chunks stream the output."""
    if not insecure:
        try:
            verify_signature(key, get_header("Cairn-Signature"), body)
        except InvalidSignature as e:
            logging.getLogger("cairn_fn").warning("refused a call: %s", e)
            return _error("401 Unauthorized", terminal("unauthorized", f"invalid signature: {e}"))
    try:
        envelope = json.loads(body)
        if not isinstance(envelope, dict):
            raise ValueError("not an object")
    except ValueError as e:
        return _error("400 Bad Request", terminal("protocol", f"decode the envelope: {e}"))
    if not envelope.get("traceparent") and get_header("traceparent"):
        envelope["traceparent"] = get_header("traceparent")
    call = Call(envelope, "http", UrlChannel(envelope))
    try:
        content_type, chunks = invoke(handler, call)
    except Error as e:
        if not e.retryable:
            return _error("422 Unprocessable Entity", e)
        if e.retry_after:
            return _error("503 Service Unavailable", e, [("Retry-After", str(math.ceil(e.retry_after)))])
        return _error("500 Internal Server Error", e)
    return "200 OK", [("Content-Type", content_type)], chunks


def wsgi_app(handler, signing_key=None, insecure=False):
    """A WSGI application serving ``handler`` as an http function; it verifies
    Cairn-Signature with ``signing_key`` (default CAIRN_SIGNING_KEY) unless
    ``insecure``. A stream that breaks off mid-output raises, so the WSGI
    server aborts the response; use one that sends chunked responses (or
    ``serve``), so that Cairn tells a broken output from a short one."""
    key = _key(signing_key, insecure)

    def app(environ, start_response):
        if environ.get("REQUEST_METHOD") != "POST":
            status, headers, chunks = _error("405 Method Not Allowed", terminal("protocol", "Cairn calls functions with POST"))
            start_response(status, headers)
            return chunks
        length = int(environ.get("CONTENT_LENGTH") or 0)
        if length > MAX_ENVELOPE:
            status, headers, chunks = _error("413 Payload Too Large", terminal("protocol", "the envelope is too large"))
            start_response(status, headers)
            return chunks
        body = environ["wsgi.input"].read(length)

        def get_header(name):
            return environ.get("HTTP_" + name.upper().replace("-", "_"), "")

        status, headers, chunks = handle_request(handler, key, insecure, body, get_header)
        start_response(status, headers)
        return chunks

    return app


def _handler_class():
    """The request handler class of serve, made on first use: http.server is
    imported only by a process that serves (an exec handler never does)."""
    from http.server import BaseHTTPRequestHandler

    class _Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        app = None  # (handler, key, insecure), set per server

        def log_message(self, format, *args):  # noqa: A002 - the base class's name
            logging.getLogger("cairn_fn").debug(format, *args)

        def do_POST(self):  # noqa: N802 - the base class's name
            handler, key, insecure = self.app
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_ENVELOPE:
                self._send(*_error("413 Payload Too Large", terminal("protocol", "the envelope is too large")))
                return
            body = self.rfile.read(length)
            self._send(*handle_request(handler, key, insecure, body, lambda n: self.headers.get(n, "")))

        def _send(self, status, headers, chunks):
            code, _, reason = status.partition(" ")
            self.send_response(int(code), reason)
            for k, v in headers:
                self.send_header(k, v)
            # Chunked: a stream that breaks off leaves the response without its last
            # chunk, which Cairn reads as a broken output (retryable), never a short one.
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            try:
                for chunk in chunks:
                    if chunk:
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self.wfile.write(b"0\r\n\r\n")
            except Exception:  # noqa: BLE001 - break the response off
                logging.getLogger("cairn_fn").exception("write the output")
                self.close_connection = True
                try:
                    self.connection.shutdown(2)
                except OSError:
                    pass

    return _Handler


def serve(handler, address, signing_key=None, insecure=False):
    """Serves ``handler`` as an http function on ``address`` ("host:port" or
    ":port"), a thread a call, until SIGTERM or SIGINT."""
    key = _key(signing_key, insecure)
    host, _, port = address.rpartition(":")
    from http.server import ThreadingHTTPServer

    cls = type("CairnHandler", (_handler_class(),), {"app": (handler, key, insecure)})
    server = ThreadingHTTPServer((host or "0.0.0.0", int(port)), cls)
    server.daemon_threads = True

    def stop(*_):
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        server.serve_forever()
    finally:
        server.server_close()

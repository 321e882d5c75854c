"""Unit tests of cairn_fn (python3 -m unittest discover -s sdk/python/tests).
The conformance suite (sdk/conformance) runs it against a real server."""

import hashlib
import hmac
import io
import json
import os
import sys
import threading
import time
import unittest
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import cairn_fn  # noqa: E402

SECRET = "SECRET-TOKEN-123"


def envelope(**extra):
    env = {"run_id": "r1", "step": "s", "attempt": 1, "input": {"n": 2}, "params": {"k": 3}, "deps": {}}
    env.update(extra)
    return env


def run_exec(handler, env):
    stdin = io.BytesIO(json.dumps(env).encode())
    stdout, stderr = io.BytesIO(), io.BytesIO()
    os.environ.pop("CAIRN_CONTROL_FD", None)
    status = cairn_fn.run_exec(handler, stdin, stdout, stderr)
    return status, stdout.getvalue(), stderr.getvalue().decode()


class Forbidden(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802
        self.send_response(403)
        self.end_headers()

    do_PUT = do_GET

    def log_message(self, *args):
        pass


class ExecTest(unittest.TestCase):
    def test_value(self):
        status, out, _ = run_exec(lambda c: {"twice": c.input["n"] * 2, "key": c.idempotency_key}, envelope())
        self.assertEqual(status, 0)
        self.assertEqual(json.loads(out), {"twice": 4, "key": "r1/s"})

    def test_stream(self):
        status, out, _ = run_exec(lambda c: cairn_fn.Stream(f"{i}\n" for i in range(3)), envelope())
        self.assertEqual((status, out), (0, b"0\n1\n2\n"))

    def test_suspend(self):
        def h(c):
            self.assertIn("/v1/callbacks/", c.suspend("72h"))

        status, out, _ = run_exec(h, envelope(callback_url="https://cairn.example/v1/callbacks/t"))
        self.assertEqual((status, json.loads(out)), (0, {"$suspend": {"timeout": "72h"}}))

    def test_terminal_error(self):
        def h(c):
            raise cairn_fn.terminal("declined", "card declined")

        status, out, err = run_exec(h, envelope())
        self.assertEqual(status, 1)
        self.assertIn('"error":{"message": "card declined", "code": "declined", "retryable": false}', err)

    def test_checkpoint_and_blob(self):
        with open(os.path.join(os.path.dirname(__file__), "blob.txt"), "w") as f:
            f.write("1\n2\n3\n")
        try:
            env = envelope(checkpoint={"i": 4}, deps={"up": {"$blob": {"digest": "sha256:ab", "size": 6, "path": f.name}}})

            def h(c):
                with c.open_dep("up") as r:
                    total = sum(int(line) for line in r)
                c.save_checkpoint({"i": c.checkpoint["i"] + 1})
                return {"sum": total}

            status, out, err = run_exec(h, env)
            self.assertEqual((status, json.loads(out)), (0, {"sum": 6}))
            self.assertIn('{"checkpoint":{"i": 5}}', err)
        finally:
            os.remove(f.name)


class HTTPTest(unittest.TestCase):
    def setUp(self):
        self.forbidden = ThreadingHTTPServer(("127.0.0.1", 0), Forbidden)
        threading.Thread(target=self.forbidden.serve_forever, daemon=True).start()
        self.base = f"http://127.0.0.1:{self.forbidden.server_port}"

    def tearDown(self):
        self.forbidden.shutdown()
        self.forbidden.server_close()

    def call(self, app, body, key):
        ts = str(int(time.time()))
        sig = hmac.new(key.encode(), ts.encode() + b"." + body, hashlib.sha256).hexdigest()
        environ = {
            "REQUEST_METHOD": "POST",
            "CONTENT_LENGTH": str(len(body)),
            "wsgi.input": io.BytesIO(body),
            "HTTP_CAIRN_SIGNATURE": f"t={ts},v1={sig}",
        }
        got = {}

        def start_response(status, headers):
            got["status"] = status

        data = b"".join(app(environ, start_response))
        return got["status"], data

    def test_signed_call(self):
        app = cairn_fn.wsgi_app(lambda c: {"n": c.input["n"]}, signing_key="k")
        status, data = self.call(app, json.dumps(envelope()).encode(), "k")
        self.assertEqual((status, json.loads(data)), ("200 OK", {"n": 2}))

    def test_bad_signature_is_refused_before_the_handler(self):
        ran = []
        app = cairn_fn.wsgi_app(lambda c: ran.append(1), signing_key="k")
        status, data = self.call(app, json.dumps(envelope()).encode(), "other")
        self.assertEqual(status, "401 Unauthorized")
        self.assertEqual(ran, [])
        self.assertFalse(json.loads(data)["retryable"])

    def test_terminal_error_is_422(self):
        def h(c):
            raise cairn_fn.terminal("declined", "card declined")

        status, data = self.call(cairn_fn.wsgi_app(h, signing_key="k"), json.dumps(envelope()).encode(), "k")
        self.assertEqual(status, "422 Unprocessable Entity")
        self.assertEqual(json.loads(data), {"message": "card declined", "code": "declined", "retryable": False})

    def test_no_key_is_refused(self):
        os.environ.pop("CAIRN_SIGNING_KEY", None)
        with self.assertRaises(ValueError):
            cairn_fn.wsgi_app(lambda c: None)

    def test_errors_hold_no_credentials(self):
        errors = []

        def h(c):
            for f in (lambda: c.save_checkpoint(1), lambda: c.open_dep("big")):
                try:
                    f()
                except Exception as e:  # noqa: BLE001
                    errors.append(str(e))

        env = envelope(
            lease_token=SECRET,
            checkpoint_url=f"{self.base}/cp?t={SECRET}",
            deps={"big": {"$blob": {"digest": "sha256:ab", "size": 1, "url": f"{self.base}/b?X-Amz-Signature={SECRET}"}}},
        )
        cairn_fn.lambda_handler(h)(env)
        cairn_fn.lambda_handler(lambda c: errors.append(_raised(lambda: c.save_checkpoint(1))))(
            envelope(lease_token=SECRET, checkpoint_url=f"http://127.0.0.1:1/x?t={SECRET}")
        )
        self.assertEqual(len(errors), 3)
        for e in errors:
            self.assertNotIn(SECRET, e)
            self.assertNotIn(self.base + "/", e)


def _raised(f):
    try:
        f()
    except Exception as e:  # noqa: BLE001
        return str(e)
    return ""


class LambdaTest(unittest.TestCase):
    def test_error_is_json(self):
        def h(c):
            raise cairn_fn.terminal("declined", "card declined")

        with self.assertRaises(Exception) as cm:
            cairn_fn.lambda_handler(h)(envelope())
        self.assertEqual(json.loads(str(cm.exception)), {"message": "card declined", "code": "declined", "retryable": False})

    def test_value(self):
        self.assertEqual(cairn_fn.lambda_handler(lambda c: {"n": c.input["n"]})(envelope()), {"n": 2})


class SignatureTest(unittest.TestCase):
    def test_verify(self):
        body = b'{"a":1}'
        ts = str(int(time.time()))
        sig = hmac.new(b"k", ts.encode() + b"." + body, hashlib.sha256).hexdigest()
        cairn_fn.verify_signature("k", f"t={ts},v1={sig}", body)
        for key, header in (("other", f"t={ts},v1={sig}"), ("k", f"t=1,v1={sig}"), ("k", "garbage")):
            with self.assertRaises(cairn_fn.InvalidSignature) as cm:
                cairn_fn.verify_signature(key, header, body)
            self.assertNotIn(sig, str(cm.exception))


if __name__ == "__main__":
    unittest.main()

#!/usr/bin/env python3
"""The conformance suite's handler on the Python SDK (cairn_fn): one program
serving every case, its behaviour chosen by the step's params ("behavior"). It
does what handlers/go/main.go does; see sdk/conformance/README.md."""

import json
import time
import urllib.request
from dataclasses import dataclass

import cairn_fn


@dataclass
class Person:
    name: str = "world"


def notify(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST")
    req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=30) as resp:
        resp.read()


def peak_rss():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return -1


def reset_peak_rss():
    """Starts the peak (VmHWM) again from the current size, so that it measures
    this call, not an earlier one of the same http or lambda process."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def echo(call):
    person = call.input_as(Person)
    return {
        "greeting": f"hello, {person.name}",
        "params": call.params,
        "deps": {k: call.dep(k) for k in call.deps},
        "idempotency_key": call.idempotency_key,
        "kind": call.kind,
        "attempt": call.attempt,
    }


def count(call):
    p = call.params
    start = (call.checkpoint or {}).get("i", 0)
    for i in range(start + 1, p["to"] + 1):
        time.sleep(p["sleep_ms"] / 1000)
        call.save_checkpoint({"i": i})
        call.progress({"i": i})
    return {"count": p["to"], "resumed_from": start, "attempt": call.attempt}


def suspend(call):
    url = call.suspend(call.params["timeout"])
    notify(call.params["notify"], {"run_id": call.run_id, "callback_url": url})


def big_output(call):
    reset_peak_rss()
    chunk = b"x" * (64 << 10)

    def chunks():
        for _ in range(call.params["mib"] * 16):
            yield chunk
        notify(call.params["notify"], {"run_id": call.run_id, "peak_rss_bytes": peak_rss()})

    return cairn_fn.Stream(chunks())


def produce(call):
    return cairn_fn.Stream((f"{i}\n" for i in range(call.params["lines"])), content_type="application/jsonl")


def consume(call):
    dep = call.params["dep"]
    lines = total = 0
    with call.open_dep(dep) as f:
        for line in f:
            lines += 1
            total += int(line)
    return {"lines": lines, "sum": total, "blob": cairn_fn.parse_blob(call.deps[dep]) is not None}


def fail(call):
    raise cairn_fn.terminal(call.params["code"], call.params["message"])


BEHAVIORS = {
    "echo": echo,
    "count": count,
    "fail": fail,
    "suspend": suspend,
    "big_output": big_output,
    "produce": produce,
    "consume": consume,
}


def handle(call):
    behavior = call.params.get("behavior")
    if behavior not in BEHAVIORS:
        raise cairn_fn.terminal("bad_params", f"unknown behavior {behavior!r}")
    return BEHAVIORS[behavior](call)


lambda_handler = cairn_fn.lambda_handler(handle)

if __name__ == "__main__":
    cairn_fn.run(handle)

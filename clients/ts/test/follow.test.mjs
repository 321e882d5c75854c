// Tests of followRun, waitRun and the list iterators against scripted servers
// (node:http on 127.0.0.1), for what a real server does not do on demand: a gap,
// a stall, CRLF lines, an event cut short. They need no CAIRN_SERVER.
import assert from "node:assert/strict";
import { createServer } from "node:http";
import { after, before, describe, test } from "node:test";

import { CairnProblemError, createCairnClient, followRun, listWorkflows, StreamFailedError, waitRun } from "../dist/index.js";

const runId = "0190b6a2-0000-7000-8000-000000000001";

/** Writes an SSE event as the server does, with nl as the line end. */
function event(res, seq, type, nl = "\n") {
  const data = JSON.stringify({ seq, type, data: {}, created_at: "2026-01-01T00:00:00Z" });
  res.write(`id: ${seq}${nl}event: ${type}${nl}data: ${data}${nl}${nl}`);
}

function runBody(status, revision) {
  return JSON.stringify({ id: runId, workflow: "w", version: 1, status, revision, created_at: "2026-01-01T00:00:00Z" });
}

/**
 * A server whose stream connections follow script[n] (the last one past the end),
 * and whose GET /v1/runs/{id} answers run(). It records every stream request's
 * Last-Event-ID.
 */
async function scripted(script, run = () => runBody("running", 0)) {
  const lastEventIds = [];
  const closed = [];
  const server = createServer((req, res) => {
    const url = new URL(req.url, "http://x");
    if (url.pathname === `/v1/runs/${runId}/events/stream`) {
      const n = lastEventIds.length;
      lastEventIds.push(req.headers["last-event-id"] ?? "");
      res.on("close", () => closed.push(n));
      script[Math.min(n, script.length - 1)](req, res);
      return;
    }
    if (url.pathname === `/v1/runs/${runId}`) {
      res.writeHead(200, { "Content-Type": "application/json" });
      res.end(run());
      return;
    }
    res.writeHead(404, { "Content-Type": "application/problem+json" });
    res.end(JSON.stringify({ title: "Not Found", status: 404, code: "not_found", detail: "no such thing" }));
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  const cairn = createCairnClient({ baseUrl: `http://127.0.0.1:${server.address().port}`, token: "t" });
  return {
    cairn,
    lastEventIds,
    closed,
    close: () => {
      server.closeAllConnections();
      return new Promise((resolve) => server.close(resolve));
    },
  };
}

const sse = (res) => res.writeHead(200, { "Content-Type": "text/event-stream" });
const fast = { minBackoffMs: 10, maxBackoffMs: 50 };

async function collect(iterable) {
  const out = [];
  for await (const ev of iterable) {
    out.push(`${ev.seq} ${ev.type}`);
  }
  return out;
}

describe("followRun against scripted streams", () => {
  const cases = [
    {
      name: "a dropped stream resumes after the last event; a replayed one is skipped",
      script: [
        (_, res) => {
          sse(res);
          res.write(": stream\n\n");
          event(res, 1, "run.created");
          event(res, 2, "step.started");
          res.end();
        },
        (_, res) => {
          sse(res);
          event(res, 2, "step.started");
          event(res, 3, "run.succeeded");
          res.end();
        },
      ],
      want: ["1 run.created", "2 step.started", "3 run.succeeded"],
      lastIds: ["", "2"],
    },
    {
      name: "CRLF lines, from after",
      after: 4,
      script: [
        (_, res) => {
          sse(res);
          res.write(": stream\r\n\r\n");
          event(res, 5, "step.succeeded", "\r\n");
          event(res, 6, "run.failed", "\r\n");
          res.end();
        },
      ],
      want: ["5 step.succeeded", "6 run.failed"],
      lastIds: ["4"],
    },
    {
      name: "a gap reopens the stream after the last event rather than skip one",
      script: [
        (_, res) => {
          sse(res);
          event(res, 1, "run.created");
          event(res, 3, "step.succeeded");
          res.end();
        },
        (_, res) => {
          sse(res);
          event(res, 2, "step.started");
          event(res, 3, "step.succeeded");
          event(res, 4, "run.succeeded");
          res.end();
        },
      ],
      want: ["1 run.created", "2 step.started", "3 step.succeeded", "4 run.succeeded"],
      lastIds: ["", "1"],
    },
    {
      name: "an event cut short by a broken connection is read again",
      script: [
        (_, res) => {
          sse(res);
          event(res, 1, "run.created");
          res.write('id: 2\nevent: step.started\ndata: {"seq":2,');
          setTimeout(() => res.socket.destroy(), 20);
        },
        (_, res) => {
          sse(res);
          event(res, 2, "step.started");
          event(res, 3, "run.canceled");
          res.end();
        },
      ],
      want: ["1 run.created", "2 step.started", "3 run.canceled"],
      lastIds: ["", "1"],
    },
    {
      name: "a stalled stream is dropped after idleTimeoutMs and reopened",
      options: { minBackoffMs: 10, idleTimeoutMs: 200 },
      script: [
        (_, res) => {
          sse(res);
          event(res, 1, "run.created"); // then silence
        },
        (_, res) => {
          sse(res);
          event(res, 2, "run.succeeded");
          res.end();
        },
      ],
      want: ["1 run.created", "2 run.succeeded"],
      lastIds: ["", "1"],
    },
    {
      name: "a run that ended before: the stream ends at once, and so does following",
      after: 7,
      run: () => runBody("succeeded", 7),
      script: [
        (_, res) => {
          sse(res);
          res.end(": stream\n\n");
        },
      ],
      want: [],
      lastIds: ["7"],
    },
  ];
  for (const c of cases) {
    test(c.name, async () => {
      const s = await scripted(c.script, c.run);
      try {
        assert.deepEqual(await collect(followRun(s.cairn, runId, c.after ?? 0, c.options ?? fast)), c.want);
        assert.deepEqual(s.lastEventIds, c.lastIds);
      } finally {
        await s.close();
      }
    });
  }

  test("a refusal (404) is not tried again", async () => {
    const s = await scripted([
      (_, res) => {
        res.writeHead(404, { "Content-Type": "application/problem+json" });
        res.end(JSON.stringify({ title: "Not Found", status: 404, code: "not_found", detail: "no such run" }));
      },
    ]);
    try {
      await assert.rejects(collect(followRun(s.cairn, runId, 0, fast)), (err) => {
        assert.ok(err instanceof CairnProblemError, String(err));
        assert.equal(err.status, 404);
        assert.equal(err.problem?.code, "not_found");
        return true;
      });
      assert.deepEqual(s.lastEventIds, [""]);
    } finally {
      await s.close();
    }
  });

  test("a 503 with Retry-After is waited for, then followed", async () => {
    const s = await scripted([
      (_, res) => {
        res.writeHead(503, { "Content-Type": "application/problem+json", "Retry-After": "1" });
        res.end(JSON.stringify({ title: "Service Unavailable", status: 503, code: "unavailable" }));
      },
      (_, res) => {
        sse(res);
        event(res, 1, "run.succeeded");
        res.end();
      },
    ]);
    try {
      const start = Date.now();
      assert.deepEqual(await collect(followRun(s.cairn, runId, 0, fast)), ["1 run.succeeded"]);
      assert.ok(Date.now() - start >= 950, `waited ${Date.now() - start} ms for Retry-After: 1`);
    } finally {
      await s.close();
    }
  });

  test("after maxFailures failures in a row, it gives up", async () => {
    const s = await scripted([
      (_, res) => {
        res.writeHead(502, { "Content-Type": "text/plain" });
        res.end("down");
      },
    ]);
    try {
      await assert.rejects(collect(followRun(s.cairn, runId, 0, { minBackoffMs: 1, maxFailures: 3 })), (err) => {
        assert.ok(err instanceof StreamFailedError, String(err));
        assert.ok(err.cause instanceof CairnProblemError);
        assert.equal(err.cause.status, 502);
        return true;
      });
      assert.equal(s.lastEventIds.length, 3);
    } finally {
      await s.close();
    }
  });

  test("breaking out of the loop closes the stream", async () => {
    const s = await scripted([
      (_, res) => {
        sse(res);
        event(res, 1, "run.created");
        event(res, 2, "step.started"); // and the stream stays open
      },
    ]);
    try {
      for await (const ev of followRun(s.cairn, runId, 0, fast)) {
        assert.equal(ev.seq, 1);
        break;
      }
      // Waiting for the server to see the connection end.
      for (let i = 0; i < 100 && s.closed.length === 0; i++) {
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      assert.deepEqual(s.closed, [0]);
    } finally {
      await s.close();
    }
  });

  test("an abort ends following with the signal's reason", async () => {
    const s = await scripted([
      (_, res) => {
        sse(res);
        event(res, 1, "run.created");
      },
    ]);
    try {
      const ac = new AbortController();
      const reason = new Error("enough");
      await assert.rejects(
        (async () => {
          for await (const ev of followRun(s.cairn, runId, 0, { ...fast, signal: ac.signal })) {
            if (ev.seq === 1) setTimeout(() => ac.abort(reason), 20);
          }
        })(),
        (err) => err === reason,
      );
    } finally {
      await s.close();
    }
  });
});

describe("waitRun against scripted servers", () => {
  test("polls when the stream is refused", async () => {
    let reads = 0;
    const s = await scripted(
      [
        (_, res) => {
          res.writeHead(503, { "Content-Type": "application/problem+json", "Retry-After": "10" });
          res.end(JSON.stringify({ title: "Service Unavailable", status: 503, code: "unavailable" }));
        },
      ],
      () => runBody(++reads >= 3 ? "succeeded" : "running", 5),
    );
    try {
      const start = Date.now();
      const run = await waitRun(s.cairn, runId, { pollIntervalMs: 20, follow: fast });
      assert.equal(run.status, "succeeded");
      assert.deepEqual(s.lastEventIds, ["5"], "one stream request, after the run's revision, then polling");
      assert.ok(Date.now() - start < 5000, "no wait for Retry-After: polling instead");
    } finally {
      await s.close();
    }
  });

  test("gives up at timeoutMs", async () => {
    const s = await scripted([
      (_, res) => {
        sse(res);
        res.write(": stream\n\n"); // and nothing more
      },
    ]);
    try {
      await assert.rejects(waitRun(s.cairn, runId, { timeoutMs: 200 }), (err) => err.name === "TimeoutError");
    } finally {
      await s.close();
    }
  });
});

describe("list iterators against a scripted server", () => {
  let server;
  let cairn;
  const cursors = [];
  before(async () => {
    // Pages of two workflows w0..w4; the last page has no next_cursor.
    server = createServer((req, res) => {
      const url = new URL(req.url, "http://x");
      const cursor = url.searchParams.get("cursor");
      cursors.push(cursor);
      const start = cursor ? Number(cursor) : 0;
      const items = [start, start + 1].filter((i) => i < 5).map((i) => ({ name: `w${i}`, latest_version: 1 }));
      res.writeHead(200, { "Content-Type": "application/json" });
      res.end(JSON.stringify({ items, ...(start + 2 < 5 ? { next_cursor: String(start + 2) } : {}) }));
    });
    await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
    cairn = createCairnClient({ baseUrl: `http://127.0.0.1:${server.address().port}`, token: "t" });
  });
  after(() => new Promise((resolve) => server.close(resolve)));

  test("follows next_cursor to the last page, and fetches no more after a break", async () => {
    const names = [];
    for await (const w of listWorkflows(cairn, { limit: 2 })) {
      names.push(w.name);
    }
    assert.deepEqual(names, ["w0", "w1", "w2", "w3", "w4"]);
    assert.deepEqual(cursors, [null, "2", "4"]);

    cursors.length = 0;
    for await (const w of listWorkflows(cairn, { limit: 2 })) {
      if (w.name === "w1") break;
    }
    assert.deepEqual(cursors, [null]);
  });
});

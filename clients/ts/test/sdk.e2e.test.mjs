// End-to-end tests of waitRun, followRun and the list iterators against a live
// server (CAIRN_SERVER, CAIRN_TOKEN: see e2e.test.mjs), partly through a proxy
// on 127.0.0.1 that breaks the event stream's connection or refuses it, as a
// network failure or a server at its maximum of streams does.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { request as httpRequest, createServer } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";

import {
  createCairnClient,
  followRun,
  listEvents,
  listRuns,
  listVersions,
  listWorkflows,
  startRun,
  uploadBundle,
  waitRun,
} from "../dist/index.js";

const server = process.env.CAIRN_SERVER;
const token = process.env.CAIRN_TOKEN;
const missing = !server || !token;
if (missing && process.env.CI === "true") {
  throw new Error("CAIRN_SERVER and CAIRN_TOKEN must name a live server under CI=true (see scripts/ts-client-test.sh)");
}
const skip = missing ? "CAIRN_SERVER and CAIRN_TOKEN are not set: no server to test against" : false;

// Names unique to this process: the server is shared by every run of the tests.
const tag = `${process.pid}-${Date.now().toString(36)}`;

/** A workflow of n sleep steps one after another, each of ms: 2n+2 events. */
function chain(name, n, ms) {
  let yaml = `name: ${name}\nsteps:\n`;
  for (let i = 0; i < n; i++) {
    yaml += `  - key: s${i}\n    builtin: sleep\n    with: {duration: ${ms}ms}\n`;
    if (i > 0) yaml += `    needs: [s${i - 1}]\n`;
  }
  return yaml;
}

/** Packs a bundle made of the manifest alone (system tar). */
function pack(work, manifest) {
  const dir = mkdtempSync(join(work, "bundle-"));
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, "cairn.yaml"), manifest);
  const out = join(dir, "..", `${dir.split("/").pop()}.tar.gz`);
  execFileSync("tar", ["-czf", out, "-C", dir, "cairn.yaml"]);
  return readFileSync(out);
}

/**
 * A proxy to the server. Stream requests are recorded; while refuse > 0 they are
 * answered 503 with Retry-After: 1; with cutAfter set, the next stream's
 * connection is broken once that many events went through.
 */
async function startProxy() {
  const target = new URL(server);
  const p = { streams: [], refuse: 0, cutAfter: 0 };
  p.server = createServer((req, res) => {
    const isStream = req.url.includes("/events/stream");
    if (isStream) {
      p.streams.push(req.headers["last-event-id"] ?? "");
      if (p.refuse > 0) {
        p.refuse--;
        res.writeHead(503, { "Content-Type": "application/problem+json", "Retry-After": "1" });
        res.end(JSON.stringify({ title: "Service Unavailable", status: 503, code: "unavailable", detail: "too many streams" }));
        return;
      }
    }
    const cut = isStream ? p.cutAfter : 0;
    if (cut) p.cutAfter = 0;
    const up = httpRequest(
      { host: target.hostname, port: target.port, method: req.method, path: req.url, headers: { ...req.headers, host: target.host } },
      (upRes) => {
        res.writeHead(upRes.statusCode, upRes.headers);
        let events = 0;
        upRes.on("data", (chunk) => {
          res.write(chunk);
          events += (chunk.toString().match(/^id: /gm) ?? []).length;
          if (cut && events >= cut) {
            upRes.destroy();
            res.socket.destroy(); // as a network failure: no clean end
          }
        });
        upRes.on("end", () => res.end());
      },
    );
    up.on("error", () => res.destroy());
    req.pipe(up);
  });
  await new Promise((resolve) => p.server.listen(0, "127.0.0.1", resolve));
  p.url = `http://127.0.0.1:${p.server.address().port}`;
  p.close = () => {
    p.server.closeAllConnections();
    return new Promise((resolve) => p.server.close(resolve));
  };
  return p;
}

describe("waitRun, followRun and the list iterators against a live server", { skip }, () => {
  let work;
  let cairn;
  let proxy;
  let viaProxy;
  const chainName = `ts-sdk-chain-${tag}`;
  const failName = `ts-sdk-fails-${tag}`;

  before(async () => {
    work = mkdtempSync(join(tmpdir(), "cairn-ts-sdk-"));
    cairn = createCairnClient({ baseUrl: server, token });
    proxy = await startProxy();
    viaProxy = createCairnClient({ baseUrl: proxy.url, token });
    await uploadBundle(cairn, pack(work, chain(chainName, 5, 150)));
    await uploadBundle(
      cairn,
      pack(work, `name: ${failName}\nsteps:\n  - key: boom\n    builtin: fail\n    retry: {max_attempts: 1}\n    with: {retryable: false, message: "boom on purpose"}\n`),
    );
  });

  after(async () => {
    await proxy?.close();
    if (work) rmSync(work, { recursive: true, force: true });
  });

  test("waitRun returns a run that succeeded, and one that failed", async () => {
    const ok = await startRun(cairn, chainName);
    const run = await waitRun(cairn, ok.id, { timeoutMs: 60_000 });
    assert.equal(run.status, "succeeded");
    assert.equal(run.steps_remaining, 0);

    const bad = await startRun(cairn, failName);
    const failed = await waitRun(cairn, bad.id, { timeoutMs: 60_000 });
    assert.equal(failed.status, "failed");
    assert.match(JSON.stringify(failed.error), /boom/);
  });

  test("followRun resumes across a broken connection without gaps or duplicates", async () => {
    const started = await startRun(cairn, chainName);
    const before = proxy.streams.length;
    proxy.cutAfter = 3;
    const seen = [];
    const reconnects = [];
    const onReconnect = ({ after }) => reconnects.push(after);
    for await (const ev of followRun(viaProxy, started.id, 0, { minBackoffMs: 50, onReconnect })) {
      seen.push(ev);
    }
    const history = [];
    for await (const ev of listEvents(cairn, started.id, { limit: 2 })) {
      history.push(ev);
    }
    assert.deepEqual(
      seen.map((e) => e.seq),
      history.map((e) => e.seq),
    );
    assert.deepEqual(
      seen.map((e) => e.seq),
      history.map((_, i) => i + 1),
    );
    assert.equal(seen.at(-1).type, "run.succeeded");
    const streams = proxy.streams.slice(before);
    assert.ok(streams.length >= 2, `the stream was reopened (${streams.length} requests)`);
    assert.equal(streams[0], "");
    assert.ok(reconnects.length >= 1 && reconnects[0] >= 1, `reconnected after event ${reconnects[0]}`);
    assert.equal(streams[1], String(reconnects[0]), "the second stream resumes after the last event had");
  });

  test("waitRun polls when the stream is refused", async () => {
    const started = await startRun(cairn, chainName);
    const before = proxy.streams.length;
    proxy.refuse = 1000;
    try {
      const run = await waitRun(viaProxy, started.id, { timeoutMs: 60_000, pollIntervalMs: 100 });
      assert.equal(run.status, "succeeded");
      assert.equal(proxy.streams.length - before, 1, "one refusal, then polling");
    } finally {
      proxy.refuse = 0;
    }
  });

  test("the list iterators follow next_cursor across pages", async () => {
    const name = `ts-sdk-pages-${tag}`;
    for (let i = 0; i < 3; i++) {
      await uploadBundle(cairn, pack(work, `name: ${name}\ndescription: version ${i}\nsteps:\n  - key: a\n    builtin: noop\n`));
    }
    const ids = [];
    for (let i = 0; i < 3; i++) {
      ids.push((await startRun(cairn, name)).id);
    }
    for (const id of ids) {
      await waitRun(cairn, id, { timeoutMs: 60_000 });
    }

    const versions = [];
    for await (const v of listVersions(cairn, name, { limit: 2 })) {
      versions.push(v.version);
    }
    assert.deepEqual(versions, [3, 2, 1]);

    const runs = [];
    for await (const r of listRuns(cairn, { workflow: name, status: "succeeded", limit: 2 })) {
      runs.push(r.id);
    }
    assert.deepEqual(runs, [...ids].reverse(), "newest first, each once");

    const names = [];
    for await (const w of listWorkflows(cairn, { limit: 1 })) {
      names.push(w.name);
    }
    for (const n of [chainName, failName, name]) {
      assert.ok(names.includes(n), `${n} listed`);
    }
    assert.equal(new Set(names).size, names.length, "each once");
  });
});

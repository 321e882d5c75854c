// Unit tests of @cairnrun/fn (node --test sdk/ts/test/). The conformance suite
// (sdk/conformance) runs the SDK against a real server.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { createHmac } from "node:crypto";
import { once } from "node:events";
import { mkdtempSync, writeFileSync } from "node:fs";
import { createServer, request } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { createHandler, InvalidSignature, lambdaHandler, verifySignature } from "../index.mjs";

const SECRET = "SECRET-TOKEN-123";
const index = fileURLToPath(new URL("../index.mjs", import.meta.url));

function envelope(extra = {}) {
  return { run_id: "r1", step: "s", attempt: 1, input: { n: 2 }, params: {}, deps: {}, ...extra };
}

// runExec runs a handler module as an exec attempt would (stdin, stdout).
function runExec(body, env) {
  const dir = mkdtempSync(join(tmpdir(), "cairn-fn-test-"));
  const file = join(dir, "h.mjs");
  writeFileSync(file, `import * as fn from ${JSON.stringify(index)};\nawait fn.run(${body});\n`);
  const environment = { ...process.env };
  delete environment.CAIRN_CONTROL_FD;
  delete environment.CAIRN_FN_LISTEN;
  return spawnSync(process.execPath, [file], { input: JSON.stringify(env), env: environment });
}

test("exec: a value, a stream, a suspend, a terminal error", () => {
  let r = runExec(`(c) => ({ twice: c.input.n * 2, key: c.idempotencyKey })`, envelope());
  assert.equal(r.status, 0, r.stderr.toString());
  assert.deepEqual(JSON.parse(r.stdout), { twice: 4, key: "r1/s" });

  r = runExec(`(c) => new fn.Stream((function* () { yield "a\\n"; yield "b\\n"; })())`, envelope());
  assert.equal(r.stdout.toString(), "a\nb\n");

  r = runExec(`(c) => { c.suspend("72h"); }`, envelope({ callback_url: "https://cairn.example/v1/callbacks/t" }));
  assert.deepEqual(JSON.parse(r.stdout), { $suspend: { timeout: "72h" } });

  r = runExec(`() => { throw fn.terminal("declined", "card declined"); }`, envelope());
  assert.equal(r.status, 1);
  assert.match(r.stderr.toString(), /\{"error":\{"message":"card declined","code":"declined","retryable":false\}\}/);
});

test("exec: checkpoint resume and a $blob read as a stream", () => {
  const dir = mkdtempSync(join(tmpdir(), "cairn-fn-blob-"));
  const path = join(dir, "blob");
  writeFileSync(path, "1\n2\n3\n");
  const r = runExec(
    `async (c) => {
      let text = "";
      for await (const b of await c.openDep("up")) text += b;
      await c.saveCheckpoint({ i: (await c.checkpoint()).i + 1 });
      return { sum: text.trim().split("\\n").map(Number).reduce((a, b) => a + b, 0) };
    }`,
    envelope({ checkpoint: { i: 4 }, deps: { up: { $blob: { digest: "sha256:ab", size: 6, path } } } }),
  );
  assert.equal(r.status, 0, r.stderr.toString());
  assert.deepEqual(JSON.parse(r.stdout), { sum: 6 });
  assert.match(r.stderr.toString(), /\{"checkpoint":\{"i":5\}\}/);
});

async function listen(handler) {
  const server = createServer(handler);
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  return { server, url: `http://127.0.0.1:${server.address().port}` };
}

function post(url, body, headers) {
  return new Promise((resolve, reject) => {
    const req = request(url, { method: "POST", headers }, async (res) => {
      let text = "";
      for await (const c of res) text += c;
      resolve({ status: res.statusCode, text });
    });
    req.on("error", reject);
    req.end(body);
  });
}

function sign(key, body) {
  const t = Math.floor(Date.now() / 1000);
  return `t=${t},v1=${createHmac("sha256", key).update(`${t}.`).update(body).digest("hex")}`;
}

test("http: signed calls run, others are refused before the handler", async () => {
  let ran = 0;
  const { server, url } = await listen(
    createHandler(
      (c) => {
        ran++;
        if (c.input.fail) throw new Error("boom");
        return { n: c.input.n };
      },
      { signingKey: "k" },
    ),
  );
  try {
    let body = JSON.stringify(envelope());
    let r = await post(url, body, { "Cairn-Signature": sign("k", body) });
    assert.deepEqual([r.status, JSON.parse(r.text)], [200, { n: 2 }]);
    r = await post(url, body, { "Cairn-Signature": sign("other", body) });
    assert.equal(r.status, 401);
    assert.equal(ran, 1);
    body = JSON.stringify(envelope({ input: { fail: true } }));
    r = await post(url, body, { "Cairn-Signature": sign("k", body) });
    assert.equal(r.status, 500);
    assert.equal(JSON.parse(r.text).retryable, true);
  } finally {
    server.close();
  }
  delete process.env.CAIRN_SIGNING_KEY;
  assert.throws(() => createHandler(() => null));
});

test("errors hold no credentials", async () => {
  const { server, url } = await listen((req, res) => {
    res.writeHead(403);
    res.end();
  });
  const errors = [];
  try {
    const h = lambdaHandler(async (c) => {
      for (const f of [() => c.saveCheckpoint(1), () => c.openDep("big")]) {
        await f().catch((e) => errors.push(e.message));
      }
    });
    await h(
      envelope({
        lease_token: SECRET,
        checkpoint_url: `${url}/cp?t=${SECRET}`,
        deps: { big: { $blob: { digest: "sha256:ab", size: 1, url: `${url}/b?X-Amz-Signature=${SECRET}` } } },
      }),
    );
    await lambdaHandler(async (c) => {
      await c.saveCheckpoint(1).catch((e) => errors.push(e.message));
    })(envelope({ lease_token: SECRET, checkpoint_url: `http://127.0.0.1:1/x?t=${SECRET}` }));
  } finally {
    server.close();
  }
  assert.equal(errors.length, 3);
  for (const e of errors) {
    assert.ok(!e.includes(SECRET), e);
    assert.ok(!e.includes(`${url}/`), e);
  }
});

test("lambda: a failure's message is the JSON Cairn reads", async () => {
  const h = lambdaHandler(() => {
    throw new (class extends Error {})("x");
  });
  await assert.rejects(h(envelope()), (e) => JSON.parse(e.message).retryable === true);
  const t = lambdaHandler(async () => {
    const { terminal } = await import("../index.mjs");
    throw terminal("declined", "card declined");
  });
  await assert.rejects(t(envelope()), (e) => e.name === "declined" && JSON.parse(e.message).retryable === false);
  assert.deepEqual(await lambdaHandler((c) => ({ n: c.input.n }))(envelope()), { n: 2 });
});

test("verifySignature", () => {
  const body = Buffer.from('{"a":1}');
  const header = sign("k", body);
  verifySignature("k", header, body);
  for (const [key, h] of [["other", header], ["k", "t=1,v1=00"], ["k", "garbage"]]) {
    assert.throws(() => verifySignature(key, h, body), (e) => e instanceof InvalidSignature && !e.message.includes(header));
  }
});

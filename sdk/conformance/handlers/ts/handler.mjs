#!/usr/bin/env node
// The conformance suite's handler on the TypeScript SDK (@cairnrun/fn): one
// program serving every case, its behaviour chosen by the step's params
// ("behavior"). It does what handlers/go/main.go does; see
// sdk/conformance/README.md.
import { readFileSync, writeFileSync } from "node:fs";
import { request } from "node:http";
import { createInterface } from "node:readline";
import { lambdaHandler, parseBlob, run, Stream, terminal } from "@cairnrun/fn";

// notify POSTs body to the test (node:http: fetch's engine would weigh on the
// peak RSS the large-output case measures).
function notify(url, body) {
  const data = Buffer.from(JSON.stringify(body));
  return new Promise((resolve, reject) => {
    const req = request(url, { method: "POST", headers: { "Content-Type": "application/json", "Content-Length": data.length } }, (resp) => {
      resp.resume();
      if (resp.statusCode >= 300) reject(new Error(`notify: ${resp.statusCode}`));
      else resp.on("end", resolve);
    });
    req.on("error", reject);
    req.end(data);
  });
}

function peakRSS() {
  const m = /VmHWM:\s*(\d+)\s*kB/.exec(readFileSync("/proc/self/status", "utf8"));
  return m ? Number(m[1]) * 1024 : -1;
}

// resetPeakRSS starts the peak (VmHWM) again from the current size, so that it
// measures this call, not an earlier one of the same http or lambda process.
function resetPeakRSS() {
  writeFileSync("/proc/self/clear_refs", "5");
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const behaviors = {
  async echo(call) {
    const deps = {};
    for (const k of Object.keys(call.deps)) deps[k] = await call.dep(k);
    return {
      greeting: `hello, ${call.input?.name ?? "world"}`,
      params: call.params,
      deps,
      idempotency_key: call.idempotencyKey,
      kind: call.kind,
      attempt: call.attempt,
    };
  },
  async count(call) {
    const { to, sleep_ms: sleepMs } = call.params;
    const start = (await call.checkpoint())?.i ?? 0;
    for (let i = start + 1; i <= to; i++) {
      if (call.signal?.aborted) throw call.signal.reason;
      await sleep(sleepMs);
      await call.saveCheckpoint({ i });
      await call.progress({ i });
    }
    return { count: to, resumed_from: start, attempt: call.attempt };
  },
  async fail(call) {
    throw terminal(call.params.code, call.params.message);
  },
  async suspend(call) {
    const url = call.suspend(call.params.timeout);
    await notify(call.params.notify, { run_id: call.runId, callback_url: url });
  },
  async big_output(call) {
    const { mib, notify: to } = call.params;
    resetPeakRSS();
    const chunk = Buffer.alloc(64 << 10, "x");
    async function* chunks() {
      for (let i = 0; i < mib * 16; i++) yield chunk;
      await notify(to, { run_id: call.runId, peak_rss_bytes: peakRSS() });
    }
    return new Stream(chunks());
  },
  async produce(call) {
    function* lines() {
      for (let i = 0; i < call.params.lines; i++) yield `${i}\n`;
    }
    return new Stream(lines(), { contentType: "application/jsonl" });
  },
  async consume(call) {
    const dep = call.params.dep;
    let lines = 0;
    let sum = 0;
    for await (const line of createInterface({ input: await call.openDep(dep), crlfDelay: Infinity })) {
      lines++;
      sum += Number(line);
    }
    return { lines, sum, blob: parseBlob(call.deps[dep]) !== null };
  },
};

async function handle(call) {
  const b = behaviors[call.params?.behavior];
  if (!b) throw terminal("bad_params", `unknown behavior ${JSON.stringify(call.params?.behavior)}`);
  return b(call);
}

export const handler = lambdaHandler(handle);

if (!process.env.AWS_LAMBDA_RUNTIME_API) await run(handle);

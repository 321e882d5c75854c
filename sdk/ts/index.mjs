// Cairn's function SDK for TypeScript and JavaScript: one handler serves a step of
// every kind, exec (stdin, stdout, fd 3), http (createHandler, serve: Cairn-Signature
// verified) and AWS Lambda (lambdaHandler), over the protocol of docs/functions.md.
// Node >= 20 built-ins only; types in index.d.ts.
//
//   import { run } from "@cairnrun/fn";
//   run(async (call) => ({ greeting: `hello, ${call.input?.name ?? "world"}` }));
//
// Error messages of this module never hold the attempt's credentials (the lease
// token, the callback and checkpoint URLs, presigned URLs, the signing key).

import { createHmac, timingSafeEqual } from "node:crypto";
import { once } from "node:events";
import { createReadStream, mkdtempSync, writeFileSync, writeSync } from "node:fs";
import { createServer, request as httpRequest } from "node:http";
import { request as httpsRequest } from "node:https";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable } from "node:stream";

/** How long a control message may be before saveCheckpoint sends a
 * checkpoint_file: under the server's limit of one line (1 MiB). */
const MAX_CONTROL_LINE = 512 << 10;
const MAX_ENVELOPE = 64 << 20;
const HTTP_WRITE = 1 << 20;

/** A handler's failure as Cairn records it: a message, a code, and whether a
 * retry may help. Throw one; any other error is retryable with code "failed". */
export class CairnError extends Error {
  constructor(message, { code = "failed", retryable = true, retryAfter } = {}) {
    super(message || "the handler failed without a message");
    this.name = "CairnError";
    this.code = code;
    this.retryable = retryable;
    this.retryAfter = retryAfter;
  }

  /** The error as Cairn reads it: {"message", "code", "retryable"}. */
  toJSON() {
    return { message: this.message, code: this.code, retryable: this.retryable };
  }
}

/** An error Cairn does not retry: the step fails at once. */
export function terminal(code, message) {
  return new CairnError(message, { code, retryable: false });
}

/** An error Cairn retries under the step's retry policy. */
export function retryable(code, message, retryAfter) {
  return new CairnError(message, { code, retryable: true, retryAfter });
}

/** Thrown by saveCheckpoint when the attempt no longer holds its step: stop. */
export class LeaseLost extends Error {
  constructor(message) {
    super(message);
    this.name = "LeaseLost";
  }
}

function asError(e) {
  if (e instanceof CairnError) return e;
  return new CairnError(`${e?.name ?? "Error"}: ${e?.message ?? String(e)}`, { code: "failed", retryable: true });
}

/** An output written as it is produced: an (async) iterable of Uint8Array or
 * string chunks, or a Node Readable. Nothing holds it whole. */
export class Stream {
  constructor(chunks, { contentType = "application/octet-stream" } = {}) {
    this.chunks = chunks;
    this.contentType = contentType;
  }
}

/** Sends one request with node:http(s) (lighter than fetch, whose engine adds
 * megabytes to a small process) and resolves to the response, a Readable.
 * Errors never name the URL: presigned, checkpoint and callback URLs are
 * credentials. */
function send(method, url, { headers = {}, body, signal } = {}) {
  return new Promise((resolve, reject) => {
    let u;
    try {
      u = new URL(url);
    } catch {
      reject(new Error("a malformed url"));
      return;
    }
    const req = (u.protocol === "https:" ? httpsRequest : httpRequest)(u, { method, headers, signal }, resolve);
    req.on("error", (e) => reject(new Error(e?.code ?? e?.name ?? "request failed")));
    req.end(body);
  });
}

/** The body of a {"$blob": …} reference, or null for any other value. */
export function parseBlob(value) {
  if (value && typeof value === "object" && !Array.isArray(value) && Object.keys(value).length === 1) {
    const b = value.$blob;
    if (b && typeof b === "object") return b;
  }
  return null;
}

/** Opens a blob's bytes as a Node Readable: its file (exec) or a GET of its
 * presigned URL (http, lambda). Errors name it by digest, never by URL. */
export async function openBlob(blob, { signal } = {}) {
  if (blob.path) return createReadStream(blob.path);
  if (blob.url) {
    let resp;
    try {
      resp = await send("GET", blob.url, { signal });
    } catch (e) {
      throw new Error(`open $blob ${blob.digest}: GET its url: ${e.message}`);
    }
    if (resp.statusCode !== 200) {
      resp.resume();
      throw new Error(`open $blob ${blob.digest}: GET its url: ${resp.statusCode} ${resp.statusMessage}`);
    }
    return resp;
  }
  throw new Error(`open $blob ${blob.digest}: it has neither a path nor a url (an http or lambda function needs a blob store that presigns: S3)`);
}

async function readAll(stream) {
  const parts = [];
  for await (const c of stream) parts.push(typeof c === "string" ? Buffer.from(c) : c);
  return Buffer.concat(parts);
}

/** One attempt of a step, as its handler sees it. */
export class Call {
  constructor(envelope, kind, channel, signal) {
    this.envelope = envelope;
    this.kind = kind;
    this.signal = signal;
    this._channel = channel;
    this._suspended = null;
    this.runId = envelope.run_id ?? "";
    this.workflow = envelope.workflow ?? "";
    this.version = envelope.version ?? 0;
    this.step = envelope.step ?? "";
    this.attempt = envelope.attempt ?? 0;
    this.input = envelope.input ?? null;
    this.params = envelope.params ?? {};
    this.deps = envelope.deps ?? {};
    this.item = envelope.item;
    this.index = envelope.index;
    this.failure = envelope.failure;
    this.traceparent = envelope.traceparent ?? "";
    this.idempotencyKey = `${this.runId}/${this.step}`;
  }

  /** Writes a line to the attempt's log (stderr; for exec Cairn keeps it). */
  log(...args) {
    const text = args.map((a) => (typeof a === "string" ? a : JSON.stringify(a))).join(" ");
    process.stderr.write(`${new Date().toISOString()} run_id=${this.runId} step=${this.step} attempt=${this.attempt} ${text}\n`);
  }

  /** A value of the envelope, a $blob read and decoded as JSON. */
  async decode(value) {
    const blob = parseBlob(value);
    if (!blob) return value;
    return JSON.parse((await readAll(await openBlob(blob, { signal: this.signal }))).toString("utf8"));
  }

  /** The output of the upstream step key, decoded (a $blob is read). */
  async dep(key) {
    if (!(key in this.deps)) throw new Error(`dep ${JSON.stringify(key)}: not among this step's needs`);
    return this.decode(this.deps[key]);
  }

  /** A value of the envelope as a Readable: a $blob's file or URL, any other
   * value its JSON text. */
  async open(value) {
    const blob = parseBlob(value);
    if (blob) return openBlob(blob, { signal: this.signal });
    return Readable.from([Buffer.from(JSON.stringify(value))]);
  }

  /** The output of the upstream step key as a Readable. */
  async openDep(key) {
    if (!(key in this.deps)) throw new Error(`dep ${JSON.stringify(key)}: not among this step's needs`);
    return this.open(this.deps[key]);
  }

  /** The newest checkpoint of an earlier attempt, decoded, or null. */
  async checkpoint() {
    return this.decode(this.envelope.checkpoint ?? null);
  }

  /** Stores value (JSON) as the step's checkpoint: exec sends it on fd 3 (a
   * large one as a checkpoint_file), http and lambda PUT it to the
   * checkpoint_url. Throws LeaseLost when the attempt lost its step. */
  async saveCheckpoint(value) {
    await this._channel.checkpoint(JSON.stringify(value ?? null));
  }

  /** Reports progress (JSON): a step.progress event for exec; http and lambda
   * functions have no channel for it, so it goes to the log. */
  async progress(value) {
    await this._channel.progress(JSON.stringify(value ?? null));
  }

  /** Alias of progress: a sign of life. */
  async heartbeat(value) {
    await this.progress(value);
  }

  /** Ends the attempt without an output and returns the callback URL: the step
   * waits, holding nothing, until a third party POSTs the result to it (or the
   * timeout passes: a Go duration such as "72h", or seconds; none waits
   * forever). Hand the URL on, then return undefined: the answer is
   * {"$suspend": …}. The URL is a credential: never log it. */
  suspend(timeout, { onTimeout = "fail" } = {}) {
    const url = this.envelope.callback_url;
    if (!url) throw terminal("protocol", "suspend: the envelope has no callback_url (the server has no signing key)");
    const body = {};
    if (timeout !== undefined && timeout !== null) body.timeout = typeof timeout === "number" ? `${Math.ceil(timeout)}s` : String(timeout);
    if (onTimeout !== "fail") body.on_timeout = onTimeout;
    this._suspended = body;
    return url;
  }
}

function toBuffer(c) {
  return typeof c === "string" ? Buffer.from(c) : c;
}

async function* encoded(chunks) {
  for await (const c of chunks) {
    const b = toBuffer(c);
    if (b && b.length) yield b;
  }
}

/** A handler's result as {contentType, chunks: AsyncIterable<Buffer>}. */
function toOutput(value) {
  if (value === undefined || value === null) return { contentType: "application/json", chunks: encoded(["null"]) };
  if (value instanceof Uint8Array) return { contentType: "application/octet-stream", chunks: encoded([value]) };
  if (value instanceof Stream) return { contentType: value.contentType, chunks: encoded(value.chunks) };
  if (typeof value[Symbol.asyncIterator] === "function" || (typeof value.next === "function" && typeof value[Symbol.iterator] === "function")) {
    return { contentType: "application/octet-stream", chunks: encoded(value) };
  }
  let text;
  try {
    text = JSON.stringify(value);
  } catch (e) {
    throw terminal("invalid_output", `encode the output as JSON: ${e.message}`);
  }
  return { contentType: "application/json", chunks: encoded([text]) };
}

async function invoke(handler, call) {
  let value;
  try {
    value = await handler(call);
  } catch (e) {
    if (!(e instanceof CairnError)) call.log("the handler failed:", e?.stack ?? String(e));
    throw asError(e);
  }
  if (call._suspended) {
    if (value !== undefined && value !== null) {
      throw terminal("protocol", "the handler suspended and returned an output too: return undefined after suspend");
    }
    return { contentType: "application/json", chunks: encoded([JSON.stringify({ $suspend: call._suspended })]) };
  }
  return toOutput(value);
}

// ---- exec --------------------------------------------------------------------

function writeAllSync(fd, buf) {
  let off = 0;
  while (off < buf.length) {
    try {
      off += writeSync(fd, buf, off);
    } catch (e) {
      if (e.code !== "EAGAIN") throw e;
    }
  }
}

/** Control messages on the descriptor CAIRN_CONTROL_FD names (3), or on stderr
 * when the handler runs by hand, outside Cairn. */
class ExecChannel {
  constructor() {
    const fd = Number.parseInt(process.env.CAIRN_CONTROL_FD ?? "", 10);
    this.fd = Number.isInteger(fd) && fd > 2 ? fd : null;
  }

  send(key, raw) {
    const line = Buffer.from(`{"${key}":${raw}}\n`);
    if (this.fd === null) {
      process.stderr.write(Buffer.concat([Buffer.from("cairn control (no CAIRN_CONTROL_FD): "), line]));
      return;
    }
    writeAllSync(this.fd, line);
  }

  async checkpoint(raw) {
    if (Buffer.byteLength(raw) < MAX_CONTROL_LINE) {
      this.send("checkpoint", raw);
      return;
    }
    // Too long for one control line: a file in the attempt's TMPDIR, whose bytes
    // the server stores; a newer checkpoint gets a file of its own.
    const path = join(mkdtempSync(join(tmpdir(), "cairn-checkpoint-")), "checkpoint.json");
    writeFileSync(path, raw);
    this.send("checkpoint_file", JSON.stringify(path));
  }

  async progress(raw) {
    this.send("progress", raw);
  }

  fail(err) {
    try {
      this.send("error", JSON.stringify(err));
    } catch (e) {
      process.stderr.write(`cairn: report the failure: ${e.message}\n`);
    }
    process.stderr.write(`cairn: ${err.code}: ${err.message}\n`);
  }
}

async function writeTo(out, chunks) {
  for await (const chunk of chunks) {
    if (!out.write(chunk)) await once(out, "drain");
  }
}

/** Runs one exec attempt; resolves to the exit status (0 on success, 1 when the
 * handler failed: the failure is sent on fd 3 and written to stderr). SIGTERM
 * (Cairn's timeout or cancel) aborts call.signal. */
export async function runExec(handler) {
  const channel = new ExecChannel();
  const abort = new AbortController();
  const onTerm = () => abort.abort(new Error("SIGTERM"));
  process.once("SIGTERM", onTerm);
  try {
    let envelope;
    try {
      envelope = JSON.parse((await readAll(process.stdin)).toString("utf8") || "null");
      if (!envelope || typeof envelope !== "object") throw new Error("not an object");
    } catch (e) {
      channel.fail(terminal("protocol", `read the envelope from stdin: ${e.message}`));
      return 1;
    }
    const call = new Call(envelope, "exec", channel, abort.signal);
    let out;
    try {
      out = await invoke(handler, call);
      await writeTo(process.stdout, out.chunks);
    } catch (e) {
      channel.fail(e instanceof CairnError ? e : retryable("output", `write the output: ${e?.message ?? e}`));
      return 1;
    }
    return 0;
  } finally {
    process.removeListener("SIGTERM", onTerm);
  }
}

// ---- http and lambda ---------------------------------------------------------

/** Checkpoints through the envelope's checkpoint_url (http and lambda). */
class UrlChannel {
  constructor(envelope, log) {
    this.envelope = envelope;
    this.log = log;
  }

  async checkpoint(raw) {
    const { checkpoint_url: url, lease_token: token } = this.envelope;
    if (!url || !token) throw new Error("save checkpoint: the envelope has no checkpoint_url");
    const body = Buffer.from(raw);
    let resp;
    try {
      resp = await send("PUT", url, {
        body,
        headers: { "Content-Type": "application/json", "Content-Length": body.length, Authorization: `Bearer ${token}` },
      });
    } catch (e) {
      throw new Error(`save checkpoint: PUT checkpoint_url: ${e.message}`);
    }
    resp.resume();
    const status = `${resp.statusCode} ${resp.statusMessage}`;
    if (resp.statusCode === 409) throw new LeaseLost(`save checkpoint: PUT checkpoint_url: ${status}`);
    if (resp.statusCode < 200 || resp.statusCode > 299) throw new Error(`save checkpoint: PUT checkpoint_url: ${status}`);
  }

  async progress(raw) {
    this.log(`progress ${raw}`);
  }
}

export class InvalidSignature extends Error {
  constructor(message) {
    super(message);
    this.name = "InvalidSignature";
  }
}

/** Checks a Cairn-Signature header ("t=<unix>,v1=<hex>") against the raw body:
 * the HMAC-SHA256, keyed with key, of "<t>.<body>", t within maxSkew seconds
 * of the clock. Throws InvalidSignature, whose message never quotes the header. */
export function verifySignature(key, header, body, { maxSkew = 300, now = Date.now() / 1000 } = {}) {
  if (!key) throw new InvalidSignature("no signing key");
  let ts = null;
  const sigs = [];
  for (const part of String(header ?? "").split(",")) {
    const i = part.indexOf("=");
    if (i < 0) continue;
    const k = part.slice(0, i).trim();
    const v = part.slice(i + 1).trim();
    if (k === "t") {
      if (ts !== null) throw new InvalidSignature("two timestamps");
      ts = v;
    } else if (k === "v1") sigs.push(v);
  }
  if (ts === null || sigs.length === 0) throw new InvalidSignature("no Cairn-Signature with t= and v1=");
  if (!/^-?\d+$/.test(ts) || String(Number.parseInt(ts, 10)) !== ts) throw new InvalidSignature("a malformed timestamp");
  if (Math.abs(now - Number.parseInt(ts, 10)) > maxSkew) throw new InvalidSignature(`timestamp outside ${maxSkew} s of the local clock`);
  const want = createHmac("sha256", key).update(`${ts}.`).update(body).digest();
  for (const s of sigs) {
    const got = /^[0-9a-fA-F]*$/.test(s) ? Buffer.from(s, "hex") : Buffer.alloc(0);
    if (got.length === want.length && timingSafeEqual(got, want)) return;
  }
  throw new InvalidSignature("no matching v1 signature");
}

function sendError(res, status, err, headers = {}) {
  res.writeHead(status, { "Content-Type": "application/json", ...headers });
  res.end(JSON.stringify(err));
}

/** Writes chunks to a chunked http response through one staging buffer of
 * HTTP_WRITE bytes, reused once each write has completed. Node frames each write
 * of a chunked response with a string (its length), and a write that mixes a
 * string with a buffer is copied into memory of its own: copies of 64 KiB
 * fragment the heap, and fresh buffers per write wait for the collector, so
 * the process would grow with the output (by 12 to 40 MiB over 200 MiB). */
async function writeChunked(res, chunks) {
  const stage = Buffer.allocUnsafe(HTTP_WRITE);
  let used = 0;
  const flush = async () => {
    if (used === 0) return;
    const n = used;
    used = 0;
    await new Promise((resolve, reject) => {
      res.write(stage.subarray(0, n), (err) => (err ? reject(err) : resolve()));
    });
  };
  for await (const c of chunks) {
    let off = 0;
    while (off < c.length) {
      const n = Math.min(c.length - off, HTTP_WRITE - used);
      c.copy(stage, used, off, off + n);
      used += n;
      off += n;
      if (used === HTTP_WRITE) await flush();
    }
  }
  await flush();
}

/** A request listener (http.createServer) serving handler as an http function.
 * It verifies Cairn-Signature with options.signingKey (default
 * CAIRN_SIGNING_KEY) unless options.insecure; answers 200 with the output
 * (streamed, chunked), 422 for a terminal failure, 500 (503 with Retry-After)
 * for a retryable one, with the body {"message", "code", "retryable"}. */
export function createHandler(handler, { signingKey, insecure = false, maxSkew = 300 } = {}) {
  const key = signingKey || process.env.CAIRN_SIGNING_KEY || "";
  if (!key && !insecure) {
    throw new Error("@cairnrun/fn: an http function needs the signing key (signingKey or CAIRN_SIGNING_KEY) to verify Cairn-Signature; insecure: true skips the check");
  }
  return async (req, res) => {
    if (req.method !== "POST") {
      sendError(res, 405, terminal("protocol", "Cairn calls functions with POST"), { Allow: "POST" });
      return;
    }
    const parts = [];
    let size = 0;
    for await (const c of req) {
      size += c.length;
      if (size > MAX_ENVELOPE) {
        sendError(res, 413, terminal("protocol", "the envelope is too large"));
        return;
      }
      parts.push(c);
    }
    const body = Buffer.concat(parts);
    if (!insecure) {
      try {
        verifySignature(key, req.headers["cairn-signature"], body, { maxSkew });
      } catch (e) {
        process.stderr.write(`cairn: refused a call: ${e.message}\n`);
        sendError(res, 401, terminal("unauthorized", `invalid signature: ${e.message}`));
        return;
      }
    }
    let envelope;
    try {
      envelope = JSON.parse(body.toString("utf8"));
      if (!envelope || typeof envelope !== "object") throw new Error("not an object");
    } catch (e) {
      sendError(res, 400, terminal("protocol", `decode the envelope: ${e.message}`));
      return;
    }
    if (!envelope.traceparent && req.headers.traceparent) envelope.traceparent = req.headers.traceparent;
    const abort = new AbortController();
    res.on("close", () => {
      if (!res.writableFinished) abort.abort(new Error("Cairn closed the call"));
    });
    const call = new Call(envelope, "http", null, abort.signal);
    call._channel = new UrlChannel(envelope, (t) => call.log(t));
    let out;
    try {
      out = await invoke(handler, call);
    } catch (err) {
      call.log("the handler failed:", `${err.code}: ${err.message}`);
      if (!err.retryable) sendError(res, 422, err);
      else if (err.retryAfter) sendError(res, 503, err, { "Retry-After": String(Math.ceil(err.retryAfter)) });
      else sendError(res, 500, err);
      return;
    }
    res.writeHead(200, { "Content-Type": out.contentType });
    try {
      await writeChunked(res, out.chunks);
      res.end();
    } catch (e) {
      // Break the response off without its last chunk: Cairn reads a broken
      // output (retryable), never a short one.
      call.log("write the output:", e?.message ?? String(e));
      res.destroy(e);
    }
  };
}

/** Serves handler as an http function on address ("host:port" or ":port")
 * until SIGTERM or SIGINT; resolves once it listens, to the http.Server. */
export async function serve(handler, address, options = {}) {
  const listener = createHandler(handler, options);
  const server = createServer((req, res) => {
    listener(req, res).catch((e) => {
      process.stderr.write(`cairn: ${e?.stack ?? e}\n`);
      res.destroy();
    });
  });
  const i = address.lastIndexOf(":");
  const host = address.slice(0, i) || undefined;
  const port = Number.parseInt(address.slice(i + 1), 10);
  server.listen(port, host);
  await once(server, "listening");
  const stop = () => server.close();
  process.once("SIGTERM", stop);
  process.once("SIGINT", stop);
  return server;
}

/** A handler function for AWS Lambda's Node.js runtime serving handler: the
 * event is the envelope. The runtime encodes what it returns as JSON, so the
 * output is a JSON value: a Stream or bytes are collected and returned as text
 * (Lambda bounds a response to 6 MB). A failure is thrown with its JSON
 * {"message", "code", "retryable"} as the message, which Cairn reads. */
export function lambdaHandler(handler) {
  return async (event) => {
    const envelope = typeof event === "string" ? JSON.parse(event) : event;
    const call = new Call(envelope, "lambda", null, undefined);
    call._channel = new UrlChannel(envelope, (t) => call.log(t));
    let out, data;
    try {
      out = await invoke(handler, call);
      data = await readAll(out.chunks);
    } catch (e) {
      const err = e instanceof CairnError ? e : retryable("output", `write the output: ${e?.message ?? e}`);
      const thrown = new Error(JSON.stringify(err));
      thrown.name = err.code || "CairnError";
      throw thrown;
    }
    const text = data.toString("utf8");
    return out.contentType === "application/json" ? JSON.parse(text) : text;
  };
}

/** Serves handler as the kind its environment says: http calls when
 * CAIRN_FN_LISTEN names an address (":8080"), verified with
 * CAIRN_SIGNING_KEY; else one exec attempt, then the process exits with its
 * status. On
 * Lambda, export lambdaHandler(handler) as the function's handler instead. */
export async function run(handler) {
  const listen = process.env.CAIRN_FN_LISTEN;
  if (listen) {
    await serve(handler, listen);
    return;
  }
  // The attempt ends when the handler has answered: exit, whatever timers or
  // sockets it left behind (stdout, a pipe, is written synchronously on Linux).
  process.exit(await runExec(handler));
}

// Types of @cairnrun/fn (index.mjs): Cairn's function SDK for TypeScript and
// JavaScript. The protocol is docs/functions.md.
import type { IncomingMessage, Server, ServerResponse } from "node:http";
import type { Readable } from "node:stream";

/** How the handler was called. */
export type Kind = "exec" | "http" | "lambda";

/** The JSON document Cairn sends every attempt. */
export interface Envelope<In = unknown, Params = Record<string, unknown>> {
  run_id: string;
  workflow: string;
  version: number;
  step: string;
  attempt: number;
  input: In;
  params: Params | null;
  deps: Record<string, unknown> | null;
  checkpoint: unknown;
  lease_token?: string;
  checkpoint_url?: string;
  callback_url?: string;
  failure?: unknown;
  item?: unknown;
  index?: number;
  traceparent?: string;
}

/** The body of a {"$blob": …} reference: a value too large to travel inline. */
export interface Blob {
  digest: string;
  size: number;
  content_type?: string;
  /** A local, read-only file (exec). */
  path?: string;
  /** A presigned GET (http, lambda; when the blob store is S3). */
  url?: string;
}

/** One attempt of a step, as its handler sees it. */
export declare class Call<In = unknown, Params = Record<string, unknown>> {
  readonly envelope: Envelope<In, Params>;
  readonly kind: Kind;
  /** Aborted when Cairn stops the attempt (exec: SIGTERM; http: the call closed). */
  readonly signal: AbortSignal | undefined;
  readonly runId: string;
  readonly workflow: string;
  readonly version: number;
  readonly step: string;
  readonly attempt: number;
  /** The run's input. */
  readonly input: In;
  /** The step's `with` values. */
  readonly params: Params;
  /** Step key → output as sent: a value or a {"$blob": …} reference (see dep). */
  readonly deps: Record<string, unknown>;
  readonly item: unknown;
  readonly index: number | undefined;
  readonly failure: unknown;
  readonly traceparent: string;
  /** "<run_id>/<step>": the same on every attempt; key side effects with it. */
  readonly idempotencyKey: string;
  /** Writes a line to the attempt's log (stderr). */
  log(...args: unknown[]): void;
  /** A value of the envelope; a $blob is read and decoded as JSON. */
  decode<T = unknown>(value: unknown): Promise<T>;
  /** The output of the upstream step key, decoded (a $blob is read). */
  dep<T = unknown>(key: string): Promise<T>;
  /** A value as a stream of bytes: a $blob's file or URL, else its JSON text. */
  open(value: unknown): Promise<Readable>;
  /** The output of the upstream step key as a stream of bytes. */
  openDep(key: string): Promise<Readable>;
  /** The newest checkpoint of an earlier attempt, or null: resume from it. */
  checkpoint<T = unknown>(): Promise<T | null>;
  /** Stores value as the step's checkpoint. Rejects with LeaseLost when the attempt lost its step. */
  saveCheckpoint(value: unknown): Promise<void>;
  /** Reports progress (a step.progress event for exec; the log for http and lambda). */
  progress(value: unknown): Promise<void>;
  /** Alias of progress. */
  heartbeat(value: unknown): Promise<void>;
  /**
   * Ends the attempt without an output and returns the callback URL: the step
   * waits until a third party POSTs the result to it. timeout: a Go duration
   * ("72h") or seconds; none waits forever. Return undefined afterwards.
   */
  suspend(timeout?: string | number, options?: { onTimeout?: "fail" | "continue" }): string;
}

/** A handler: its result is the step's output. */
export type Handler<In = unknown, Params = Record<string, unknown>> = (call: Call<In, Params>) => unknown | Promise<unknown>;

/** A handler's failure: a message, a short code, and whether a retry may help. */
export declare class CairnError extends Error {
  constructor(message: string, options?: { code?: string; retryable?: boolean; retryAfter?: number });
  code: string;
  retryable: boolean;
  /** Seconds: sent as Retry-After by the http adapter. */
  retryAfter?: number;
  toJSON(): { message: string; code: string; retryable: boolean };
}

/** An error Cairn does not retry. */
export declare function terminal(code: string, message: string): CairnError;
/** An error Cairn retries under the step's retry policy. */
export declare function retryable(code: string, message: string, retryAfter?: number): CairnError;

/** Thrown by saveCheckpoint when the attempt no longer holds its step. */
export declare class LeaseLost extends Error {}

/** Thrown by verifySignature. */
export declare class InvalidSignature extends Error {}

/** An output written as it is produced. */
export declare class Stream {
  constructor(chunks: Iterable<Uint8Array | string> | AsyncIterable<Uint8Array | string> | Readable, options?: { contentType?: string });
  chunks: Iterable<Uint8Array | string> | AsyncIterable<Uint8Array | string>;
  contentType: string;
}

/** The body of a {"$blob": …} reference, or null. */
export declare function parseBlob(value: unknown): Blob | null;
/** Opens a blob's bytes: its file, or a GET of its URL. */
export declare function openBlob(blob: Blob, options?: { signal?: AbortSignal }): Promise<Readable>;

/** Checks a Cairn-Signature header against the raw body; throws InvalidSignature. */
export declare function verifySignature(key: string, header: string | undefined, body: Uint8Array, options?: { maxSkew?: number; now?: number }): void;

export interface HTTPOptions {
  /** Default: CAIRN_SIGNING_KEY. */
  signingKey?: string;
  /** Accept unsigned calls: local experiments only. */
  insecure?: boolean;
  /** Seconds; default 300. */
  maxSkew?: number;
}

/** A request listener for http.createServer serving handler as an http function. */
export declare function createHandler<In = unknown, Params = Record<string, unknown>>(
  handler: Handler<In, Params>,
  options?: HTTPOptions,
): (req: IncomingMessage, res: ServerResponse) => Promise<void>;

/** Serves handler as an http function on address ("host:port", ":port") until SIGTERM. */
export declare function serve<In = unknown, Params = Record<string, unknown>>(handler: Handler<In, Params>, address: string, options?: HTTPOptions): Promise<Server>;

/** Runs one exec attempt; resolves to the exit status. */
export declare function runExec<In = unknown, Params = Record<string, unknown>>(handler: Handler<In, Params>): Promise<number>;

/** A handler function for AWS Lambda's Node.js runtime. */
export declare function lambdaHandler<In = unknown, Params = Record<string, unknown>>(handler: Handler<In, Params>): (event: unknown) => Promise<unknown>;

/** Serves handler as its environment says: http when CAIRN_FN_LISTEN is set, else one exec attempt. */
export declare function run<In = unknown, Params = Record<string, unknown>>(handler: Handler<In, Params>): Promise<void>;

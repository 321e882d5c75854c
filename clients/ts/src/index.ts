/**
 * TypeScript client for the Cairn API.
 *
 * The types in ./schema.d.ts are generated from api/openapi.yaml by
 * openapi-typescript (`npm run generate`); requests go through openapi-fetch, so
 * every path, parameter and body is checked against the contract at compile time.
 * This module adds what the contract cannot say: the bearer token, binary bundle
 * uploads, problem details as errors, and waiting for a run to end.
 *
 * @example
 * const cairn = createCairnClient({ baseUrl: "http://127.0.0.1:8080", token });
 * const { workflow } = await uploadBundle(cairn, archiveBytes);
 * const run = await startRun(cairn, workflow, { input: { name: "ada" } });
 * const done = await waitForRun(cairn, run.id);
 */
import createClient, { type Client, type Middleware } from "openapi-fetch";
import type { components, operations, paths } from "./schema.js";

export type { components, operations, paths };

/** A run (GET /v1/runs/{id}). */
export type Run = components["schemas"]["Run"];
/** A step of a run (GET /v1/runs/{id}/steps). */
export type Step = components["schemas"]["Step"];
/** The answer to a bundle upload. */
export type UploadResult = components["schemas"]["UploadResult"];
/** The body of POST /v1/workflows/{name}/runs. */
export type StartRunBody = components["schemas"]["StartRunBody"];
/** An RFC 9457 problem detail, the body of every error response. */
export type Problem = components["schemas"]["Problem"];
/** A run's status. */
export type RunStatus = Run["status"];

/** The typed openapi-fetch client of the Cairn API. */
export type CairnClient = Client<paths>;

/** Statuses after which a run never changes. */
export const terminalRunStatuses: readonly RunStatus[] = ["succeeded", "failed", "canceled"];

/** Options of createCairnClient. */
export interface CairnClientOptions {
  /** The server's base URL, "http://127.0.0.1:8080" (CAIRN_SERVER). */
  baseUrl: string;
  /** Bearer token (CAIRN_TOKEN). Without it only /healthz, /readyz and the docs answer. */
  token?: string;
  /** fetch implementation; default: the global fetch. */
  fetch?: typeof globalThis.fetch;
}

/**
 * Returns a client for the server at options.baseUrl that sends options.token as
 * its bearer credential. The client is stateless and may be shared.
 */
export function createCairnClient(options: CairnClientOptions): CairnClient {
  const client = createClient<paths>({
    baseUrl: options.baseUrl.replace(/\/+$/, ""),
    ...(options.fetch ? { fetch: options.fetch } : {}),
  });
  const token = options.token;
  if (token) {
    const auth: Middleware = {
      onRequest({ request }) {
        request.headers.set("Authorization", `Bearer ${token}`);
        return request;
      },
    };
    client.use(auth);
  }
  return client;
}

/** The error thrown by the helpers below for a non-2xx answer. */
export class CairnProblemError extends Error {
  /** The HTTP status. */
  readonly status: number;
  /** The problem detail the server sent, when it sent one. */
  readonly problem: Problem | undefined;

  constructor(operation: string, response: Response, problem: unknown) {
    const p = isProblem(problem) ? problem : undefined;
    const detail = p ? `${p.title}${p.detail ? `: ${p.detail}` : ""}${p.code ? ` (${p.code})` : ""}` : response.statusText;
    super(`${operation}: ${response.status} ${detail}`.trim());
    this.name = "CairnProblemError";
    this.status = response.status;
    this.problem = p;
  }
}

function isProblem(v: unknown): v is Problem {
  return typeof v === "object" && v !== null && ("title" in v || "detail" in v || "status" in v);
}

/** Returns data, or throws CairnProblemError for an error answer. */
function unwrap<T>(operation: string, result: { data?: T; error?: unknown; response: Response }): T {
  if (result.error !== undefined || !result.response.ok || result.data === undefined) {
    throw new CairnProblemError(operation, result.response, result.error);
  }
  return result.data;
}

/**
 * Uploads a bundle: a gzip-compressed tar archive with cairn.yaml at its root.
 * Uploading the same tree again returns the existing version (created: false).
 * Requires the operator role.
 */
export async function uploadBundle(client: CairnClient, archive: Uint8Array | Blob): Promise<UploadResult> {
  const result = await client.POST("/v1/bundles", {
    // The contract types a binary body as string; the bytes go out unchanged.
    body: archive as unknown as string,
    bodySerializer: (body) => body,
    headers: { "Content-Type": "application/gzip" },
  });
  return unwrap("upload bundle", result);
}

/**
 * Starts a run of workflow (its latest version unless body.version is set).
 * With idempotencyKey, repeating the call returns the first run. Requires the
 * operator role.
 */
export async function startRun(
  client: CairnClient,
  workflow: string,
  body: StartRunBody = {},
  idempotencyKey?: string,
): Promise<Run> {
  const result = await client.POST("/v1/workflows/{name}/runs", {
    params: {
      path: { name: workflow },
      ...(idempotencyKey ? { header: { "Idempotency-Key": idempotencyKey } } : {}),
    },
    body,
  });
  return unwrap("start run", result);
}

/** Returns the run. Requires the viewer role. */
export async function getRun(client: CairnClient, id: string): Promise<Run> {
  return unwrap("get run", await client.GET("/v1/runs/{id}", { params: { path: { id } } }));
}

/** Returns the run's steps. Requires the viewer role. */
export async function listSteps(client: CairnClient, id: string): Promise<Step[]> {
  const page = unwrap("list steps", await client.GET("/v1/runs/{id}/steps", { params: { path: { id } } }));
  return page.items ?? [];
}

/**
 * Returns a succeeded step's output parsed as JSON (outputs over the inline
 * limit are streamed from the blob store by the server). Requires the viewer role.
 */
export async function getStepOutput(client: CairnClient, id: string, key: string): Promise<unknown> {
  const result = await client.GET("/v1/runs/{id}/steps/{key}/output", {
    params: { path: { id, key } },
    parseAs: "text",
  });
  const text = unwrap("get step output", result);
  return text === "" ? null : JSON.parse(text);
}

/** Options of waitForRun. */
export interface WaitOptions {
  /** Give up after this many milliseconds; default 60000. */
  timeoutMs?: number;
  /** Poll interval in milliseconds; default 250. */
  intervalMs?: number;
  /** Stops waiting when aborted. */
  signal?: AbortSignal;
}

/**
 * Polls the run until it reaches a terminal status (succeeded, failed,
 * canceled) and returns it, whatever that status is. Throws when the timeout
 * passes or the signal aborts first.
 */
export async function waitForRun(client: CairnClient, id: string, options: WaitOptions = {}): Promise<Run> {
  const timeoutMs = options.timeoutMs ?? 60_000;
  const intervalMs = options.intervalMs ?? 250;
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    options.signal?.throwIfAborted();
    const run = await getRun(client, id);
    if (terminalRunStatuses.includes(run.status)) {
      return run;
    }
    if (Date.now() + intervalMs > deadline) {
      throw new Error(`run ${id} still ${run.status} after ${timeoutMs} ms`);
    }
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
}

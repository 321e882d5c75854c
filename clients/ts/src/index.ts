/**
 * TypeScript client for the Cairn API.
 *
 * The types in ./schema.d.ts are generated from api/openapi.yaml by
 * openapi-typescript (`npm run generate`); requests go through openapi-fetch, so
 * every path, parameter and body is checked against the contract at compile time.
 * This module adds what the contract cannot say: the bearer token, binary bundle
 * uploads, problem details as errors, waiting for a run to end (waitRun),
 * following its events with resumption after a dropped stream (followRun), and
 * async iterators over the paginated lists (listRuns, listWorkflows,
 * listVersions, listEvents).
 *
 * @example
 * const cairn = createCairnClient({ baseUrl: "http://127.0.0.1:8080", token });
 * const { workflow } = await uploadBundle(cairn, archiveBytes);
 * const run = await startRun(cairn, workflow, { input: { name: "ada" } });
 * for await (const event of followRun(cairn, run.id)) console.log(event.seq, event.type);
 * const done = await waitRun(cairn, run.id, { timeoutMs: 60_000 });
 */
import createClient, { type Middleware } from "openapi-fetch";
import { type CairnClient, type Run, type StartRunBody, type Step, type UploadResult, terminalRunStatuses, unwrap } from "./base.js";
import type { paths } from "./schema.js";

export {
  CairnProblemError,
  finalEventTypes,
  isRetryable,
  terminalRunStatuses,
  type CairnClient,
  type components,
  type operations,
  type paths,
  type Problem,
  type Run,
  type RunEvent,
  type RunStatus,
  type StartRunBody,
  type Step,
  type UploadResult,
  type Version,
  type Workflow,
} from "./base.js";
export { followRun, StreamFailedError, waitRun, type FollowOptions, type WaitRunOptions } from "./follow.js";
export {
  listEvents,
  listRuns,
  listVersions,
  listWorkflows,
  type ListEventsQuery,
  type ListOptions,
  type ListRunsQuery,
  type ListVersionsQuery,
  type ListWorkflowsQuery,
} from "./lists.js";

/** Options of createCairnClient. */
export interface CairnClientOptions {
  /** The server's base URL, "http://127.0.0.1:8080" (CAIRN_SERVER). */
  baseUrl: string;
  /** Bearer token (CAIRN_TOKEN). Without it only /healthz, /readyz and the docs answer. */
  token?: string;
  /** fetch implementation; default: the global fetch. */
  fetch?: typeof globalThis.fetch;
  /**
   * The namespace every request acts in (the Cairn-Namespace header;
   * CAIRN_NAMESPACE). Default: the token's namespace, else "default".
   */
  namespace?: string;
}

/**
 * Returns a client for the server at options.baseUrl that sends options.token as
 * its bearer credential (and options.namespace as its Cairn-Namespace). The
 * client is stateless and may be shared.
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
  const namespace = options.namespace;
  if (namespace) {
    const ns: Middleware = {
      onRequest({ request }) {
        request.headers.set("Cairn-Namespace", namespace);
        return request;
      },
    };
    client.use(ns);
  }
  return client;
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
 * passes or the signal aborts first. waitRun does the same without asking over
 * and over: it follows the run's event stream.
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

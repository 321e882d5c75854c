// Types and errors shared by the modules of the client (index.ts re-exports them).
import type { Client } from "openapi-fetch";
import type { components, operations, paths } from "./schema.js";

export type { components, operations, paths };

/** The typed openapi-fetch client of the Cairn API. */
export type CairnClient = Client<paths>;

/** A run (GET /v1/runs/{id}). */
export type Run = components["schemas"]["Run"];
/** A step of a run (GET /v1/runs/{id}/steps). */
export type Step = components["schemas"]["Step"];
/** An event of a run's history (GET /v1/runs/{id}/events, and its stream). */
export type RunEvent = components["schemas"]["Event"];
/** A workflow (GET /v1/workflows). */
export type Workflow = components["schemas"]["Workflow"];
/** A version of a workflow (GET /v1/workflows/{name}/versions). */
export type Version = components["schemas"]["Version"];
/** The answer to a bundle upload. */
export type UploadResult = components["schemas"]["UploadResult"];
/** The body of POST /v1/workflows/{name}/runs. */
export type StartRunBody = components["schemas"]["StartRunBody"];
/** An RFC 9457 problem detail, the body of every error response. */
export type Problem = components["schemas"]["Problem"];
/** A run's status. */
export type RunStatus = Run["status"];

/** Statuses after which a run never changes. */
export const terminalRunStatuses: readonly RunStatus[] = ["succeeded", "failed", "canceled"];

/** The event types that end a run's history. */
export const finalEventTypes: readonly string[] = ["run.succeeded", "run.failed", "run.canceled"];

/** The most a server's Retry-After can make the client wait: 5 minutes. */
const maxRetryAfterMs = 5 * 60_000;

/** The error thrown by the helpers of this package for a non-2xx answer. */
export class CairnProblemError extends Error {
  /** The HTTP status. */
  readonly status: number;
  /** The problem detail the server sent, when it sent one. */
  readonly problem: Problem | undefined;
  /**
   * How long the server asked to wait before trying again (its Retry-After
   * header, at most 5 minutes), in milliseconds; undefined when it did not say.
   */
  readonly retryAfterMs: number | undefined;

  constructor(operation: string, response: Response, problem: unknown) {
    const p = isProblem(problem) ? problem : undefined;
    const detail = p ? `${p.title}${p.detail ? `: ${p.detail}` : ""}${p.code ? ` (${p.code})` : ""}` : response.statusText;
    super(`${operation}: ${response.status} ${detail}`.trim());
    this.name = "CairnProblemError";
    this.status = response.status;
    this.problem = p;
    this.retryAfterMs = parseRetryAfter(response.headers.get("Retry-After"), Date.now());
  }
}

function isProblem(v: unknown): v is Problem {
  return typeof v === "object" && v !== null && ("title" in v || "detail" in v || "status" in v);
}

/**
 * Reads a Retry-After header (seconds, or an HTTP date) as milliseconds from
 * now, at most 5 minutes; undefined when there is none or it cannot be read.
 */
export function parseRetryAfter(header: string | null | undefined, now: number): number | undefined {
  const v = header?.trim();
  if (!v) {
    return undefined;
  }
  let ms: number;
  if (/^\d+$/.test(v)) {
    ms = Number(v) * 1000;
  } else {
    const at = Date.parse(v);
    if (Number.isNaN(at)) {
      return undefined;
    }
    ms = at - now;
  }
  return Math.min(Math.max(ms, 0), maxRetryAfterMs);
}

/**
 * Whether a call that failed with err may succeed if tried again: network
 * trouble, and answers that say "not now" (5xx, 429, 408). A refusal (another
 * 4xx) is not, nor an abort. Only repeat calls that are safe to repeat: reads,
 * and writes with an Idempotency-Key.
 */
export function isRetryable(err: unknown): boolean {
  if (err instanceof CairnProblemError) {
    return err.status >= 500 || err.status === 429 || err.status === 408;
  }
  if (err instanceof Error && (err.name === "AbortError" || err.name === "TimeoutError")) {
    return false;
  }
  return true;
}

/** Returns data, or throws CairnProblemError for an error answer. */
export function unwrap<T>(operation: string, result: { data?: T; error?: unknown; response: Response }): T {
  if (result.error !== undefined || !result.response.ok || result.data === undefined) {
    throw new CairnProblemError(operation, result.response, result.error);
  }
  return result.data;
}

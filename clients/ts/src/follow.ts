// Following a run: its events as they happen (followRun), and waiting until it
// has ended (waitRun).
import { createParser, type EventSourceMessage } from "eventsource-parser";

import {
  CairnProblemError,
  type CairnClient,
  finalEventTypes,
  isRetryable,
  type Run,
  type RunEvent,
  terminalRunStatuses,
  unwrap,
} from "./base.js";

/** Options of followRun. */
export interface FollowOptions {
  /** Stops following when aborted: the iteration throws the signal's reason. */
  signal?: AbortSignal | undefined;
  /**
   * Wait before reconnecting after the stream dropped, in milliseconds; it
   * doubles (±20% jitter) on every connection in a row that brings no new event,
   * up to maxBackoffMs, and starts again after one that does. A server's
   * Retry-After (a 503 at its maximum of streams, or with its database down) is
   * waited for when it is longer. Default 200.
   */
  minBackoffMs?: number | undefined;
  /** The longest wait between reconnections, in milliseconds. Default 5000. */
  maxBackoffMs?: number | undefined;
  /**
   * How many connections in a row may fail (refused, broken, or ended by the
   * server) without bringing a new event before followRun gives up. Default 10.
   */
  maxFailures?: number | undefined;
  /**
   * Drops a connection on which nothing, not even the keep-alive comment a server
   * sends every 15 seconds, arrived for this long (the time the loop's body takes
   * is not counted), and reopens the stream. Default 60000.
   */
  idleTimeoutMs?: number | undefined;
  /** Called before each reconnection, with why and how long it waits. */
  onReconnect?: ((info: { after: number; delayMs: number; error: unknown }) => void) | undefined;
}

/** The largest event the client buffers, in characters (an Event's JSON). */
const maxEventSize = 4 << 20;

/**
 * Yields the events of run id with a seq above after (0: from the first), in
 * order, as the run makes them, over the server-sent event stream GET
 * /v1/runs/{id}/events/stream. The iteration ends after the run's final event
 * (run.succeeded, run.failed, run.canceled), or once the run is over and every
 * event after after was yielded.
 *
 * When the stream drops (network trouble, a server restarting, a 5xx or 429
 * answer), it is reopened with Last-Event-ID set to the last event yielded,
 * after a growing wait (see FollowOptions): each event comes once, in seq order,
 * none missing. Breaking out of the loop closes the stream.
 *
 * Throws CairnProblemError when the server refuses (404 for an unknown run, 401,
 * 403), the signal's reason when it aborts, and an Error (with the last failure
 * as its cause) after maxFailures failed connections in a row.
 *
 * @example
 * for await (const event of followRun(cairn, run.id)) {
 *   console.log(event.seq, event.type, event.step ?? "");
 * }
 */
export function followRun(client: CairnClient, id: string, after = 0, options: FollowOptions = {}): AsyncGenerator<RunEvent, void, undefined> {
  return follow(client, id, after, options, false);
}

/**
 * The error of followRun when the stream failed maxFailures times in a row
 * without bringing an event; its cause is the last failure.
 */
export class StreamFailedError extends Error {
  constructor(message: string, options: { cause: unknown }) {
    super(message, options);
    this.name = "StreamFailedError";
  }
}

/** A server's error answer to opening the stream, as opposed to a stream that broke. */
class StreamRefused extends Error {
  constructor(readonly problem: CairnProblemError) {
    super(problem.message, { cause: problem });
    this.name = "StreamRefused";
  }
}

async function* follow(
  client: CairnClient,
  id: string,
  after: number,
  options: FollowOptions,
  stopOnRefusal: boolean,
): AsyncGenerator<RunEvent, void, undefined> {
  const signal = options.signal;
  const minBackoff = positive(options.minBackoffMs, 200);
  const maxBackoff = Math.max(positive(options.maxBackoffMs, 5000), minBackoff);
  const maxFailures = positive(options.maxFailures, 10);
  const idleTimeout = positive(options.idleTimeoutMs, 60_000);
  let last = Math.max(after, 0);
  let backoff = minBackoff;
  let failures = 0;
  for (;;) {
    signal?.throwIfAborted();
    const before = last;
    let error: unknown;
    let endedByServer = false;
    try {
      for await (const event of streamOnce(client, id, last, signal, idleTimeout)) {
        if (event.seq <= last) {
          continue; // replayed again: already yielded
        }
        if (event.seq !== last + 1) {
          // Seqs have no gaps: an event is missing from this stream. Reopen it
          // after the last one yielded rather than skip one.
          throw new Error(`event ${event.seq} came after ${last}: event ${last + 1} missing`);
        }
        last = event.seq;
        yield event;
        if (finalEventTypes.includes(event.type)) {
          return;
        }
      }
      endedByServer = true;
    } catch (err) {
      if (signal?.aborted) {
        throw signal.reason;
      }
      if (err instanceof StreamRefused) {
        if (!isRetryable(err.problem) || stopOnRefusal) {
          throw err.problem;
        }
        err = err.problem;
      } else if (!isRetryable(err)) {
        throw err;
      }
      error = err;
    }
    if (endedByServer) {
      // The server ended the stream without the final event: it is shutting
      // down, or the run was over when it looked. Ask which, and whether every
      // event was yielded.
      try {
        const run = await readRun(client, id, signal);
        if (terminalRunStatuses.includes(run.status) && last >= run.revision) {
          return;
        }
        error = new Error(
          terminalRunStatuses.includes(run.status)
            ? `the stream ended at event ${last} of the ended run's ${run.revision}`
            : "the server ended the stream before the run ended",
        );
      } catch (err) {
        if (signal?.aborted) {
          throw signal.reason;
        }
        if (!isRetryable(err)) {
          throw err;
        }
        error = err;
      }
    }
    if (last > before) {
      failures = 0;
      backoff = minBackoff;
    }
    failures++;
    if (failures >= maxFailures) {
      throw new StreamFailedError(`follow run ${id}: the event stream failed ${failures} times in a row: ${describe(error)}`, { cause: error });
    }
    const retryAfter = error instanceof CairnProblemError ? (error.retryAfterMs ?? 0) : 0;
    const delayMs = Math.max(jitter(backoff), retryAfter);
    options.onReconnect?.({ after: last, delayMs, error });
    await sleep(delayMs, signal);
    backoff = Math.min(backoff * 2, maxBackoff);
  }
}

/**
 * Yields the events of one connection of the stream, from the event after
 * last, until the server ends it. Throws StreamRefused for an error answer to the
 * request; an Error when nothing arrived for idleTimeout.
 */
async function* streamOnce(
  client: CairnClient,
  id: string,
  last: number,
  signal: AbortSignal | undefined,
  idleTimeout: number,
): AsyncGenerator<RunEvent, void, undefined> {
  const conn = new AbortController();
  const connSignal = signal ? AbortSignal.any([signal, conn.signal]) : conn.signal;
  let idle = false;
  let timer: ReturnType<typeof setTimeout> | undefined;
  const arm = () => {
    clearTimeout(timer);
    timer = setTimeout(() => {
      idle = true;
      conn.abort(new Error(`nothing arrived on the stream for ${idleTimeout} ms`));
    }, idleTimeout);
  };
  let reader: ReadableStreamDefaultReader<Uint8Array> | undefined;
  try {
    arm();
    const result = await client.GET("/v1/runs/{id}/events/stream", {
      params: { path: { id }, ...(last > 0 ? { header: { "Last-Event-ID": String(last) } } : {}) },
      parseAs: "stream",
      signal: connSignal,
    });
    if (!result.response.ok || !result.data) {
      throw new StreamRefused(new CairnProblemError(`follow run ${id}`, result.response, result.error));
    }
    reader = (result.data as ReadableStream<Uint8Array>).getReader();
    const decoder = new TextDecoder();
    const messages: EventSourceMessage[] = [];
    let parseError: Error | undefined;
    const parser = createParser({
      maxBufferSize: maxEventSize,
      onEvent: (m) => messages.push(m),
      onError: (e) => {
        parseError ??= e;
      },
    });
    for (;;) {
      arm();
      const chunk = await reader.read();
      if (chunk.done) {
        return; // an event cut short at the end is dropped by the parser
      }
      parser.feed(decoder.decode(chunk.value, { stream: true }));
      if (parseError) {
        throw new Error(`read event stream: ${parseError.message}`, { cause: parseError });
      }
      while (messages.length > 0) {
        const m = messages.shift()!;
        if (m.data === "") {
          continue;
        }
        let event: RunEvent;
        try {
          event = JSON.parse(m.data) as RunEvent;
        } catch (err) {
          throw new Error(`decode event ${m.id ?? ""}: ${describe(err)}`, { cause: err });
        }
        clearTimeout(timer); // the loop's body is not the server's silence
        yield event;
        arm();
      }
    }
  } catch (err) {
    throw idle ? conn.signal.reason : err;
  } finally {
    clearTimeout(timer);
    conn.abort();
    await reader?.cancel().catch(() => {});
  }
}

/** Options of waitRun. */
export interface WaitRunOptions {
  /** Stops waiting when aborted: waitRun rejects with the signal's reason. */
  signal?: AbortSignal | undefined;
  /** Gives up after this many milliseconds (a TimeoutError); default: no limit. */
  timeoutMs?: number | undefined;
  /**
   * How often the run is read when its event stream cannot be followed (the
   * server refused it, or it kept failing), in milliseconds. Default 1000.
   */
  pollIntervalMs?: number | undefined;
  /**
   * The event stream's backoff and failures (see FollowOptions). maxFailures
   * also bounds the failed reads in a row while polling.
   */
  follow?: Omit<FollowOptions, "signal"> | undefined;
}

/**
 * Waits until run id has ended (succeeded, failed or canceled) and returns it,
 * whatever its status: a failed run does not reject; look at its status and
 * error.
 *
 * It follows the run's event stream (see followRun) rather than asking over and
 * over, and reads the run once the final event arrived. When the server refuses
 * the stream, or it fails follow.maxFailures times in a row, waitRun polls the
 * run every pollIntervalMs instead. Reads that fail for a reason that may pass
 * (see isRetryable) are tried again, waiting at least a 503's Retry-After.
 *
 * Rejects with CairnProblemError when the server refuses (404 for an unknown
 * run, 401, 403), and with the signal's reason (or a TimeoutError) when it aborts.
 */
export async function waitRun(client: CairnClient, id: string, options: WaitRunOptions = {}): Promise<Run> {
  const signals = [options.signal, options.timeoutMs !== undefined ? AbortSignal.timeout(options.timeoutMs) : undefined].filter(
    (s): s is AbortSignal => s !== undefined,
  );
  const signal = signals.length > 0 ? AbortSignal.any(signals) : undefined;
  const follow_ = { ...options.follow, signal };
  const pollInterval = positive(options.pollIntervalMs, 1000);

  let run: Run | undefined;
  try {
    run = await readRun(client, id, signal);
    if (terminalRunStatuses.includes(run.status)) {
      return run;
    }
  } catch (err) {
    if (signal?.aborted) {
      throw signal.reason;
    }
    if (!isRetryable(err)) {
      throw err;
    }
  }
  try {
    // The events until now do not matter: start after them.
    for await (const _ of follow(client, id, run?.revision ?? 0, follow_, true)) {
      // Only the end of the stream matters.
    }
  } catch (err) {
    if (signal?.aborted) {
      throw signal.reason;
    }
    if (!isRetryable(err) && !(err instanceof StreamFailedError)) {
      throw err;
    }
    // Refused (5xx) or failing: poll.
  }
  return pollRun(client, id, pollInterval, follow_);
}

/** Reads run id until it has ended, every pollInterval, backing off after failures. */
async function pollRun(client: CairnClient, id: string, pollInterval: number, options: FollowOptions): Promise<Run> {
  const signal = options.signal;
  const minBackoff = positive(options.minBackoffMs, 200);
  const maxBackoff = Math.max(positive(options.maxBackoffMs, 5000), minBackoff);
  const maxFailures = positive(options.maxFailures, 10);
  let backoff = minBackoff;
  let failures = 0;
  for (;;) {
    let delayMs: number;
    try {
      const run = await readRun(client, id, signal);
      if (terminalRunStatuses.includes(run.status)) {
        return run;
      }
      failures = 0;
      backoff = minBackoff;
      delayMs = pollInterval;
    } catch (err) {
      if (signal?.aborted) {
        throw signal.reason;
      }
      if (!isRetryable(err)) {
        throw err;
      }
      failures++;
      if (failures >= maxFailures) {
        throw new Error(`wait for run ${id}: reading the run failed ${failures} times in a row: ${describe(err)}`, { cause: err });
      }
      const retryAfter = err instanceof CairnProblemError ? (err.retryAfterMs ?? 0) : 0;
      delayMs = Math.max(jitter(backoff), retryAfter);
      backoff = Math.min(backoff * 2, maxBackoff);
    }
    await sleep(delayMs, signal);
  }
}

async function readRun(client: CairnClient, id: string, signal: AbortSignal | undefined): Promise<Run> {
  return unwrap(`get run ${id}`, await client.GET("/v1/runs/{id}", { params: { path: { id } }, ...(signal ? { signal } : {}) }));
}

/** v when it is a positive number, else def. */
function positive(v: number | undefined, def: number): number {
  return v !== undefined && v > 0 ? v : def;
}

/** ms ±20%, so that clients dropped together do not come back together. */
function jitter(ms: number): number {
  return ms * (0.8 + 0.4 * Math.random());
}

/** Waits ms, or rejects with the signal's reason when it aborts first. */
function sleep(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const done = () => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    };
    const timer = setTimeout(done, ms);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

function describe(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

// Async iterators over the paginated lists of the API.
import { type CairnClient, type operations, type Run, type RunEvent, unwrap, type Version, type Workflow } from "./base.js";

/** The query of GET /v1/runs: workflow and status filters, cursor, page size. */
export type ListRunsQuery = NonNullable<operations["listRuns"]["parameters"]["query"]>;
/** The query of GET /v1/workflows: cursor, page size. */
export type ListWorkflowsQuery = NonNullable<operations["listWorkflows"]["parameters"]["query"]>;
/** The query of GET /v1/workflows/{name}/versions: cursor, page size. */
export type ListVersionsQuery = NonNullable<operations["listVersions"]["parameters"]["query"]>;
/** The query of GET /v1/runs/{id}/events: cursor, page size. */
export type ListEventsQuery = NonNullable<operations["listEvents"]["parameters"]["query"]>;

/** Options of the list iterators. */
export interface ListOptions {
  /** Stops the listing when aborted: the iteration throws the signal's reason. */
  signal?: AbortSignal | undefined;
}

// The lists are keyset-paginated: a page has items and, unless it is the last,
// a next_cursor. The iterators below follow the cursors and yield every item,
// fetching a page when the loop needs one: breaking out fetches no more. The
// query's limit is the page size (default: the server's), its cursor where the
// listing starts. An error answer is thrown as a CairnProblemError.

/**
 * Yields the runs of GET /v1/runs, newest first, filtered by query.workflow and
 * query.status.
 *
 * @example
 * for await (const run of listRuns(cairn, { status: "failed" })) {
 *   console.log(run.id, run.workflow);
 * }
 */
export function listRuns(client: CairnClient, query: ListRunsQuery = {}, options: ListOptions = {}): AsyncGenerator<Run, void, undefined> {
  return paginate(query.cursor, async (cursor) =>
    unwrap("list runs", await client.GET("/v1/runs", { params: { query: { ...query, ...cursorParam(cursor) } }, ...signalOf(options) })),
  );
}

/** Yields the workflows of GET /v1/workflows, by name. */
export function listWorkflows(client: CairnClient, query: ListWorkflowsQuery = {}, options: ListOptions = {}): AsyncGenerator<Workflow, void, undefined> {
  return paginate(query.cursor, async (cursor) =>
    unwrap("list workflows", await client.GET("/v1/workflows", { params: { query: { ...query, ...cursorParam(cursor) } }, ...signalOf(options) })),
  );
}

/** Yields the versions of workflow name, newest first. */
export function listVersions(
  client: CairnClient,
  name: string,
  query: ListVersionsQuery = {},
  options: ListOptions = {},
): AsyncGenerator<Version, void, undefined> {
  return paginate(query.cursor, async (cursor) =>
    unwrap(
      `list versions of ${name}`,
      await client.GET("/v1/workflows/{name}/versions", {
        params: { path: { name }, query: { ...query, ...cursorParam(cursor) } },
        ...signalOf(options),
      }),
    ),
  );
}

/**
 * Yields the events of run id that exist now, in seq order. To follow the events
 * the run goes on making, see followRun.
 */
export function listEvents(client: CairnClient, id: string, query: ListEventsQuery = {}, options: ListOptions = {}): AsyncGenerator<RunEvent, void, undefined> {
  return paginate(query.cursor, async (cursor) =>
    unwrap(
      `list events of run ${id}`,
      await client.GET("/v1/runs/{id}/events", { params: { path: { id }, query: { ...query, ...cursorParam(cursor) } }, ...signalOf(options) }),
    ),
  );
}

/**
 * Yields the items of the pages fetch returns, from the cursor first until a page
 * without a next cursor. A page that brings back the cursor it was asked with ends
 * the listing too: a server bug must not make the loop endless.
 */
async function* paginate<T>(
  first: string | undefined,
  fetch: (cursor: string | undefined) => Promise<{ items: T[] | null; next_cursor?: string | undefined }>,
): AsyncGenerator<T, void, undefined> {
  let cursor = first;
  for (;;) {
    const page = await fetch(cursor);
    yield* page.items ?? [];
    const next = page.next_cursor;
    if (!next || next === cursor) {
      return;
    }
    cursor = next;
  }
}

function cursorParam(cursor: string | undefined): { cursor?: string } {
  return cursor ? { cursor } : {};
}

function signalOf(options: ListOptions): { signal?: AbortSignal } {
  return options.signal ? { signal: options.signal } : {};
}

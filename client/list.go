package client

import (
	"context"
	"fmt"
	"iter"

	"github.com/google/uuid"
)

// The lists of the API are keyset-paginated: a page has items and, unless it is
// the last, a next_cursor to ask for the next one with. The iterators below follow
// the cursors: Runs, Workflows, Versions and Events yield every item, the …Pages
// iterators every page (the parsed answer, with its raw Body, for callers that pass
// the API's JSON on).
//
// Each iterator fetches a page when the loop needs one: breaking out of the loop
// fetches no more. The params' Limit is the page size (nil: the server's default)
// and their Cursor where the listing starts (nil: the beginning); the params are
// copied, not changed. On an error the iterator yields it once, with a zero item,
// and stops. ctx bounds every request of the loop.

// RunPages iterates over the pages of GET /v1/runs (newest run first), filtered by
// p's Workflow and Status.
func (c *Client) RunPages(ctx context.Context, p *ListRunsParams) iter.Seq2[*ListRunsResponse, error] {
	params := copyParams(p)
	return pages(ctx, "list runs", params.Cursor, func(cursor *string) (*ListRunsResponse, *string, error) {
		params.Cursor = cursor
		resp, err := c.ListRunsWithResponse(ctx, &params)
		if err != nil {
			return nil, nil, err
		}
		if resp.JSON200 == nil {
			return nil, nil, unexpectedAnswer(resp.StatusCode())
		}
		return resp, resp.JSON200.NextCursor, nil
	})
}

// Runs iterates over the runs of GET /v1/runs (newest first), filtered by p's
// Workflow and Status. See RunPages.
func (c *Client) Runs(ctx context.Context, p *ListRunsParams) iter.Seq2[Run, error] {
	return items(c.RunPages(ctx, p), func(r *ListRunsResponse) *[]Run { return r.JSON200.Items })
}

// WorkflowPages iterates over the pages of GET /v1/workflows (by name).
func (c *Client) WorkflowPages(ctx context.Context, p *ListWorkflowsParams) iter.Seq2[*ListWorkflowsResponse, error] {
	params := copyParams(p)
	return pages(ctx, "list workflows", params.Cursor, func(cursor *string) (*ListWorkflowsResponse, *string, error) {
		params.Cursor = cursor
		resp, err := c.ListWorkflowsWithResponse(ctx, &params)
		if err != nil {
			return nil, nil, err
		}
		if resp.JSON200 == nil {
			return nil, nil, unexpectedAnswer(resp.StatusCode())
		}
		return resp, resp.JSON200.NextCursor, nil
	})
}

// Workflows iterates over the workflows of GET /v1/workflows (by name). See
// WorkflowPages.
func (c *Client) Workflows(ctx context.Context, p *ListWorkflowsParams) iter.Seq2[Workflow, error] {
	return items(c.WorkflowPages(ctx, p), func(r *ListWorkflowsResponse) *[]Workflow { return r.JSON200.Items })
}

// AliasPages iterates over the pages of GET /v1/workflows/{name}/aliases (by
// alias name).
func (c *Client) AliasPages(ctx context.Context, name string, p *ListAliasesParams) iter.Seq2[*ListAliasesResponse, error] {
	params := copyParams(p)
	return pages(ctx, "list aliases of "+name, params.Cursor, func(cursor *string) (*ListAliasesResponse, *string, error) {
		params.Cursor = cursor
		resp, err := c.ListAliasesWithResponse(ctx, name, &params)
		if err != nil {
			return nil, nil, err
		}
		if resp.JSON200 == nil {
			return nil, nil, unexpectedAnswer(resp.StatusCode())
		}
		return resp, resp.JSON200.NextCursor, nil
	})
}

// VersionPages iterates over the pages of GET /v1/workflows/{name}/versions (newest
// first).
func (c *Client) VersionPages(ctx context.Context, name string, p *ListVersionsParams) iter.Seq2[*ListVersionsResponse, error] {
	params := copyParams(p)
	return pages(ctx, "list versions of "+name, params.Cursor, func(cursor *string) (*ListVersionsResponse, *string, error) {
		params.Cursor = cursor
		resp, err := c.ListVersionsWithResponse(ctx, name, &params)
		if err != nil {
			return nil, nil, err
		}
		if resp.JSON200 == nil {
			return nil, nil, unexpectedAnswer(resp.StatusCode())
		}
		return resp, resp.JSON200.NextCursor, nil
	})
}

// Versions iterates over the versions of workflow name (newest first). See
// VersionPages.
func (c *Client) Versions(ctx context.Context, name string, p *ListVersionsParams) iter.Seq2[Version, error] {
	return items(c.VersionPages(ctx, name, p), func(r *ListVersionsResponse) *[]Version { return r.JSON200.Items })
}

// EventPages iterates over the pages of GET /v1/runs/{id}/events (in seq order).
func (c *Client) EventPages(ctx context.Context, id uuid.UUID, p *ListEventsParams) iter.Seq2[*ListEventsResponse, error] {
	params := copyParams(p)
	return pages(ctx, fmt.Sprintf("list events of run %s", id), params.Cursor, func(cursor *string) (*ListEventsResponse, *string, error) {
		params.Cursor = cursor
		resp, err := c.ListEventsWithResponse(ctx, id, &params)
		if err != nil {
			return nil, nil, err
		}
		if resp.JSON200 == nil {
			return nil, nil, unexpectedAnswer(resp.StatusCode())
		}
		return resp, resp.JSON200.NextCursor, nil
	})
}

// Events iterates over the events of run id that exist now, in seq order. To
// follow the events the run goes on making, see FollowRun. See EventPages.
func (c *Client) Events(ctx context.Context, id uuid.UUID, p *ListEventsParams) iter.Seq2[Event, error] {
	return items(c.EventPages(ctx, id, p), func(r *ListEventsResponse) *[]Event { return r.JSON200.Items })
}

// copyParams returns *p, or the zero params for nil.
func copyParams[P any](p *P) P {
	var out P
	if p != nil {
		out = *p
	}
	return out
}

// pages yields the pages fetch returns, from the cursor first (nil: the first
// page) until a page without a next cursor, or the first error. A page that brings
// the cursor it was asked with back ends the listing too (a server bug must not
// make the loop endless).
func pages[R any](ctx context.Context, op string, first *string, fetch func(cursor *string) (*R, *string, error)) iter.Seq2[*R, error] {
	return func(yield func(*R, error) bool) {
		cursor := first
		for {
			if err := ctx.Err(); err != nil {
				yield(nil, fmt.Errorf("%s: %w", op, err))
				return
			}
			page, next, err := fetch(cursor)
			if err != nil {
				yield(nil, fmt.Errorf("%s: %w", op, err))
				return
			}
			if !yield(page, nil) {
				return
			}
			if next == nil || *next == "" || (cursor != nil && *next == *cursor) {
				return
			}
			cursor = next
		}
	}
}

// items flattens pages into their items.
func items[R, T any](pages iter.Seq2[*R, error], itemsOf func(*R) *[]T) iter.Seq2[T, error] {
	return func(yield func(T, error) bool) {
		for page, err := range pages {
			if err != nil {
				var zero T
				yield(zero, err)
				return
			}
			if list := itemsOf(page); list != nil {
				for _, it := range *list {
					if !yield(it, nil) {
						return
					}
				}
			}
		}
	}
}

// SecretPages iterates over the pages of GET /v1/secrets (by name; admin).
func (c *Client) SecretPages(ctx context.Context, p *ListSecretsParams) iter.Seq2[*ListSecretsResponse, error] {
	params := copyParams(p)
	return pages(ctx, "list secrets", params.Cursor, func(cursor *string) (*ListSecretsResponse, *string, error) {
		params.Cursor = cursor
		resp, err := c.ListSecretsWithResponse(ctx, &params)
		if err != nil {
			return nil, nil, err
		}
		if resp.JSON200 == nil {
			return nil, nil, unexpectedAnswer(resp.StatusCode())
		}
		return resp, resp.JSON200.NextCursor, nil
	})
}

// SchedulePages iterates over the pages of GET /v1/schedules (by id).
func (c *Client) SchedulePages(ctx context.Context, p *ListSchedulesParams) iter.Seq2[*ListSchedulesResponse, error] {
	params := copyParams(p)
	return pages(ctx, "list schedules", params.Cursor, func(cursor *string) (*ListSchedulesResponse, *string, error) {
		params.Cursor = cursor
		resp, err := c.ListSchedulesWithResponse(ctx, &params)
		if err != nil {
			return nil, nil, err
		}
		if resp.JSON200 == nil {
			return nil, nil, unexpectedAnswer(resp.StatusCode())
		}
		return resp, resp.JSON200.NextCursor, nil
	})
}

// ReceivedEventPages iterates over the pages of GET /v1/events (newest first).
func (c *Client) ReceivedEventPages(ctx context.Context, p *ListReceivedEventsParams) iter.Seq2[*ListReceivedEventsResponse, error] {
	params := copyParams(p)
	return pages(ctx, "list events", params.Cursor, func(cursor *string) (*ListReceivedEventsResponse, *string, error) {
		params.Cursor = cursor
		resp, err := c.ListReceivedEventsWithResponse(ctx, &params)
		if err != nil {
			return nil, nil, err
		}
		if resp.JSON200 == nil {
			return nil, nil, unexpectedAnswer(resp.StatusCode())
		}
		return resp, resp.JSON200.NextCursor, nil
	})
}

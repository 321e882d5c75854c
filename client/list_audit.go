package client

import (
	"context"
	"iter"
)

// TokenPages iterates over the pages of GET /v1/tokens (newest first; admin).
func (c *Client) TokenPages(ctx context.Context, p *ListTokensParams) iter.Seq2[*ListTokensResponse, error] {
	params := copyParams(p)
	return pages(ctx, "list tokens", params.Cursor, func(cursor *string) (*ListTokensResponse, *string, error) {
		params.Cursor = cursor
		resp, err := c.ListTokensWithResponse(ctx, &params)
		if err != nil {
			return nil, nil, err
		}
		if resp.JSON200 == nil {
			return nil, nil, unexpectedAnswer(resp.StatusCode())
		}
		return resp, resp.JSON200.NextCursor, nil
	})
}

// AuditPages iterates over the pages of GET /v1/audit (newest first; admin),
// filtered by p's Since, Actor and Action.
func (c *Client) AuditPages(ctx context.Context, p *ListAuditParams) iter.Seq2[*ListAuditResponse, error] {
	params := copyParams(p)
	return pages(ctx, "list the audit log", params.Cursor, func(cursor *string) (*ListAuditResponse, *string, error) {
		params.Cursor = cursor
		resp, err := c.ListAuditWithResponse(ctx, &params)
		if err != nil {
			return nil, nil, err
		}
		if resp.JSON200 == nil {
			return nil, nil, unexpectedAnswer(resp.StatusCode())
		}
		return resp, resp.JSON200.NextCursor, nil
	})
}

// NamespacePages iterates over the pages of GET /v1/namespaces, by name.
func (c *Client) NamespacePages(ctx context.Context, p *ListNamespacesParams) iter.Seq2[*ListNamespacesResponse, error] {
	params := copyParams(p)
	return pages(ctx, "list namespaces", params.Cursor, func(cursor *string) (*ListNamespacesResponse, *string, error) {
		params.Cursor = cursor
		resp, err := c.ListNamespacesWithResponse(ctx, &params)
		if err != nil {
			return nil, nil, err
		}
		if resp.JSON200 == nil {
			return nil, nil, unexpectedAnswer(resp.StatusCode())
		}
		return resp, resp.JSON200.NextCursor, nil
	})
}

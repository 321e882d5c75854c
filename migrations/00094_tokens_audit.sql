-- cairn-phase: expand
-- cairn-locks: SHARE on api_tokens, audit_log (the indexes of new, empty tables)
-- cairn-online: yes
-- +goose Up
-- Managed API tokens (POST /v1/tokens; catalog/token.go, docs/security.md): a
-- token's value is never stored, only its SHA-256 (token_hash). A revoked token
-- keeps its row (revoked_at), so that a request with it is told it was revoked
-- and the list shows who revoked it. last_used_at is written at most once a
-- minute per token (catalog.Store.TokenLookup). namespace is reserved for
-- namespaces (NULL: every namespace); nothing reads it yet.
CREATE TABLE api_tokens (
    id           uuid        PRIMARY KEY,
    name         text        NOT NULL CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9._@-]{0,62}$'),
    role         text        NOT NULL CHECK (role IN ('viewer', 'operator', 'admin')),
    namespace    text,
    token_hash   bytea       NOT NULL UNIQUE CHECK (length(token_hash) = 32),
    created_at   timestamptz NOT NULL DEFAULT now(),
    created_by   text        NOT NULL,
    expires_at   timestamptz,
    revoked_at   timestamptz,
    revoked_by   text,
    last_used_at timestamptz
);
CREATE INDEX api_tokens_created_at_idx ON api_tokens (created_at, id);

-- The audit log (catalog/audit.go, docs/security.md "Audit log"): one row per
-- write made through the API (and per UI login), inserted in the transaction of
-- the write itself, so that a write that rolls back leaves none; a refused write
-- (a 4xx problem) has a row of its own with outcome 'failed' and the problem's
-- code. seq orders the list and its cursor.
CREATE TABLE audit_log (
    seq        bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at         timestamptz NOT NULL DEFAULT now(),
    actor      text        NOT NULL,
    role       text        NOT NULL,
    namespace  text,
    action     text        NOT NULL,
    target     text        NOT NULL DEFAULT '',
    request_id text        NOT NULL DEFAULT '',
    outcome    text        NOT NULL CHECK (outcome IN ('ok', 'failed')),
    code       text        NOT NULL DEFAULT ''
);
CREATE INDEX audit_log_at_idx ON audit_log (at);
CREATE INDEX audit_log_actor_idx ON audit_log (actor, seq);
CREATE INDEX audit_log_action_idx ON audit_log (action, seq);

-- +goose Down
DROP TABLE audit_log;
DROP TABLE api_tokens;

-- +goose Up
-- The running steps of a concurrency key (its slots in use) are counted by the
-- claim (its hint, sqlClaimableLimits, and cairn_conc_usage), GET /v1/limits and
-- the blocked_by of a waiting step. steps_conc_running_idx (conc_name, conc_key)
-- WHERE status = 'running' served them, but steps_lease_expiry_idx
-- (lease_expires_at) WHERE status = 'running' matches the same queries, and when
-- the table's statistics were taken with no step running (an ANALYZE after a
-- burst of new runs, the usual case after an idle spell) PostgreSQL estimates both
-- empty and took the expiry index, reading every running step at each count: the
-- throughput scenario's round with a limit on every step read 158.5 buffers a step
-- after an ANALYZE, 111 without (its count 28 buffers a key against 4). The index
-- is now on (status = 'running') IS TRUE, which those queries write and which no
-- other index's predicate matches, so they use it whatever the statistics say.
DROP INDEX steps_conc_running_idx;
CREATE INDEX steps_conc_running_idx ON steps (conc_name, conc_key)
    WHERE (status = 'running') IS TRUE AND conc_name IS NOT NULL;

-- cairn_conc_usage: as in 00037, counting by the index above.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION cairn_conc_usage(p_names text[], p_keys text[],
                                            OUT name text, OUT key text, OUT running integer, OUT override integer)
RETURNS SETOF record LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM count(pg_advisory_xact_lock(x.id)) FROM (
        SELECT DISTINCT hashtextextended(u.n || chr(31) || u.k, 16) AS id
        FROM unnest(p_names, p_keys) AS u(n, k)
        ORDER BY 1
    ) x;
    RETURN QUERY
    SELECT u.n, u.k,
           (SELECT count(*) FROM steps r
            WHERE (r.status = 'running') IS TRUE AND r.conc_name = u.n AND r.conc_key = u.k)::integer,
           (SELECT l.concurrency FROM limits l WHERE l.name = u.n)
    FROM (SELECT DISTINCT n, k FROM unnest(p_names, p_keys) AS u(n, k)) u;
END $$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION cairn_conc_usage(p_names text[], p_keys text[],
                                            OUT name text, OUT key text, OUT running integer, OUT override integer)
RETURNS SETOF record LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM count(pg_advisory_xact_lock(x.id)) FROM (
        SELECT DISTINCT hashtextextended(u.n || chr(31) || u.k, 16) AS id
        FROM unnest(p_names, p_keys) AS u(n, k)
        ORDER BY 1
    ) x;
    RETURN QUERY
    SELECT u.n, u.k,
           (SELECT count(*) FROM steps r
            WHERE r.status = 'running' AND r.conc_name = u.n AND r.conc_key = u.k)::integer,
           (SELECT l.concurrency FROM limits l WHERE l.name = u.n)
    FROM (SELECT DISTINCT n, k FROM unnest(p_names, p_keys) AS u(n, k)) u;
END $$;
-- +goose StatementEnd
DROP INDEX steps_conc_running_idx;
CREATE INDEX steps_conc_running_idx ON steps (conc_name, conc_key)
    WHERE status = 'running' AND conc_name IS NOT NULL;

-- +goose Up
-- cairn_limit_lock takes the transaction-level advisory locks of limit keys
-- (p_names[i], p_keys[i]) in the order of their lock ids. It is the one home of
-- a key's lock id: the claim's rate limits (catalog's sqlClaimKeyLock) and
-- cairn_conc_usage each wrote the formula before, and a claimer that computed
-- another id than its peers for the same key would start steps over the limit.
-- Every claimer takes its concurrency keys first (cairn_conc_usage), then its
-- rate keys (a rate key's name carries a prefix of its own), each set in the
-- order of the ids: no two claimers wait for each other in a circle.
-- PL/pgSQL, not SQL: its statement's plan is kept for the session.
-- +goose StatementBegin
CREATE FUNCTION cairn_limit_lock(p_names text[], p_keys text[])
RETURNS bigint LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_locked bigint;
BEGIN
    SELECT count(pg_advisory_xact_lock(x.id)) INTO v_locked FROM (
        SELECT DISTINCT hashtextextended(u.n || chr(31) || u.k, 16) AS id
        FROM unnest(p_names, p_keys) AS u(n, k)
        ORDER BY 1
    ) x;
    RETURN v_locked;
END $$;
-- +goose StatementEnd

-- cairn_conc_usage: as in 00039, its locks taken by cairn_limit_lock.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION cairn_conc_usage(p_names text[], p_keys text[],
                                            OUT name text, OUT key text, OUT running integer, OUT override integer)
RETURNS SETOF record LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM cairn_limit_lock(p_names, p_keys);
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
            WHERE (r.status = 'running') IS TRUE AND r.conc_name = u.n AND r.conc_key = u.k)::integer,
           (SELECT l.concurrency FROM limits l WHERE l.name = u.n)
    FROM (SELECT DISTINCT n, k FROM unnest(p_names, p_keys) AS u(n, k)) u;
END $$;
-- +goose StatementEnd
DROP FUNCTION cairn_limit_lock(text[], text[]);

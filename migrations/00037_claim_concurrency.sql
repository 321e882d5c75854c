-- +goose Up
-- cairn_conc_usage lets the claim in one statement (catalog's sqlClaimAlone) start
-- steps with a concurrency limit, which took a transaction of six statements
-- before (candidates, the keys' locks, their usage, the claim, the keys' turns):
-- it takes the transaction-level locks of the keys given (the ids and order of
-- catalog's sqlClaimKeyLock, so that every claimer locks keys alike), then
-- counts each key's running steps and gives the limit set at run time (limits),
-- if any. It is VOLATILE PL/pgSQL on purpose: its count runs in a snapshot taken
-- after the locks (each statement of a volatile function takes its own), so it
-- sees every claim of these keys committed before, as the claim transaction's
-- separate usage statement (sqlClaimKeyUsage) does. A count in the calling
-- statement's own snapshot, taken before the locks, would miss a claim that
-- committed while it waited for one and start one step too many.
-- +goose StatementBegin
CREATE FUNCTION cairn_conc_usage(p_names text[], p_keys text[],
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

-- +goose Down
DROP FUNCTION cairn_conc_usage(text[], text[]);

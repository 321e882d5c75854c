-- [from 00040_limit_key_lock.sql]
-- cairn_limit_lock takes the transaction-level advisory locks of limit keys
-- (p_names[i], p_keys[i]) in the order of their lock ids. It is the one home of
-- a key's lock id: the claim's rate limits (catalog's sqlClaimKeyLock) and
-- cairn_conc_usage each wrote the formula before, and a claimer that computed
-- another id than its peers for the same key would start steps over the limit.
-- Every claimer takes its concurrency keys first (cairn_conc_usage), then its
-- rate keys (a rate key's name carries a prefix of its own), each set in the
-- order of the ids: no two claimers wait for each other in a circle.
-- PL/pgSQL, not SQL: its statement's plan is kept for the session.
CREATE OR REPLACE FUNCTION cairn_limit_lock(p_names text[], p_keys text[])
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

-- [from 00040_limit_key_lock.sql]
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
--
-- cairn_conc_usage: as in 00039, its locks taken by cairn_limit_lock.
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

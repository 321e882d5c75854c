-- Flow control: concurrency and rate limits per key. A concurrency slot is the
-- running step itself (its conc_name, conc_key and conc_limit): nothing else counts
-- slots, so nothing can leak one; the claim takes a slot in the statement that
-- makes the step running, and whatever ends the lease (finish, suspend, sweep,
-- cancel) frees it in its own transaction. The claim
-- (catalog/lease.go, catalog/flow.go) serializes the claimers of one key with a
-- transaction-level advisory lock on (name, key), taken here in a fixed order. Queue
-- timeouts are in steps.sql (cairn_queue_timeout_next), deadlines in run_control.sql,
-- the flow settings of map instances and handlers in triggers.sql
-- (steps_flow_inherit).

-- cairn_limit_lock takes the transaction-level advisory locks of limit keys
-- (p_names[i], p_keys[i]) in the order of their lock ids. It is the one home of a
-- key's lock id: a claimer that computed another id than its peers for the same key
-- would start steps over the limit. Every claimer takes its concurrency keys first
-- (cairn_conc_usage), with the running_steps quotas of its candidates' namespaces
-- among them when it has some (cairn_claim_usage: one set), then its rate keys (a
-- rate key's name carries a prefix of its own; catalog's sqlClaimKeyLock), each set
-- in the order of the ids: no two claimers wait for each other in a circle. The
-- runs_per_minute lock of a namespace (cairn_run_quota) is a creation's, never a
-- claimer's. PL/pgSQL, not SQL: its statement's plan
-- is kept for the session.
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

-- cairn_conc_usage lets the claim in one statement (catalog's sqlClaimAlone) start
-- steps with a concurrency limit: it takes the transaction-level locks of the keys
-- given (cairn_limit_lock, so that every claimer locks keys alike), then counts each
-- key's running steps and gives the limit set at run time (limits), if any. It is
-- VOLATILE PL/pgSQL on purpose: its count runs in a snapshot taken after the locks
-- (each statement of a volatile function takes its own), so it sees every claim of
-- these keys committed before, as the claim transaction's separate usage statement
-- (sqlClaimKeyUsage) does. A count in the calling statement's own snapshot, taken
-- before the locks, would miss a claim that committed while it waited for one and
-- start one step too many.
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

-- cairn_claim_usage is cairn_conc_usage for the claims of this release, which also
-- bound the running steps of a namespace by its running_steps quota (docs/flow.md,
-- "Quotas"; catalog/quota.go). p_quotas are the quota_ns of the candidates; those
-- of namespaces without the quota are left out. The locks of the concurrency keys
-- and those of the quotas, (quota 0x1e running_steps, namespace), are taken
-- together, in the order of their ids (cairn_limit_lock: one set, before the rate
-- keys'), then each key's running steps and each namespace's are counted in a
-- snapshot after them (steps_quota_running_idx): the quota's slot is the running
-- step itself, as a concurrency slot is, so nothing can leak one. A quota's row has
-- the namespace as name, a NULL key, and the quota as override (NULL when it was
-- cleared since p_quotas were read).
CREATE OR REPLACE FUNCTION cairn_claim_usage(p_names text[], p_keys text[], p_quotas text[],
                                             OUT name text, OUT key text, OUT running integer, OUT override integer)
RETURNS SETOF record LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_ns text[];
BEGIN
    SELECT coalesce(array_agg(DISTINCT n.name), '{}') INTO v_ns FROM namespaces n
    WHERE n.name = ANY (p_quotas) AND n.running_steps IS NOT NULL;
    PERFORM cairn_limit_lock(p_names || array_fill(('quota' || chr(30) || 'running_steps')::text, ARRAY[cardinality(v_ns)]),
                             p_keys || v_ns);
    RETURN QUERY
    SELECT u.n, u.k,
           (SELECT count(*) FROM steps r
            WHERE (r.status = 'running') IS TRUE AND r.conc_name = u.n AND r.conc_key = u.k)::integer,
           (SELECT l.concurrency FROM limits l WHERE l.name = u.n)
    FROM (SELECT DISTINCT n, k FROM unnest(p_names, p_keys) AS u(n, k)) u
    UNION ALL
    SELECT q.ns, NULL::text,
           (SELECT count(*) FROM steps r
            WHERE (r.status = 'running') IS TRUE AND r.quota_ns IS NOT NULL AND r.quota_ns = q.ns)::integer,
           (SELECT n.running_steps FROM namespaces n WHERE n.name = q.ns)
    FROM unnest(v_ns) AS q(ns);
END $$;

-- Namespaces (migration 00089, api/namespace.go). An object of a namespace other
-- than default is keyed "namespace/name"; one of default by its bare name.

-- cairn_namespace is the namespace of a qualified name (a workflow's, and so a
-- run's: runs.workflow): the part before '/', or 'default' when there is none.
CREATE OR REPLACE FUNCTION cairn_namespace(p_name text)
RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN strpos(p_name, '/') > 0 THEN split_part(p_name, '/', 1) ELSE 'default' END
$$;

-- cairn_run_quota refuses a new run of workflow p_workflow over its namespace's
-- runs_per_minute quota (docs/flow.md, "Quotas"): CA429, its message naming the
-- quota and the namespace, its DETAIL a JSON object of them with retry_after, the
-- seconds until a run may be created again (catalog.QuotaError). Whatever creates a run calls it in the transaction
-- that creates it (sqlRunCreate, for a workflow of a namespace other than
-- default; cairn_run_rerun), and true means go on. The creations of one namespace
-- are serialized from here to their commit by the advisory lock of (quota 0x1e
-- runs_per_minute, namespace) (cairn_limit_lock), taken after the workflow's row
-- (FOR KEY SHARE, as every creation takes it first: the lock order of
-- run_control.sql) and before the run's rows; the count, in a snapshot after the
-- lock (a volatile function's statement), sees every run of the namespace created
-- before: the runs themselves are the count (runs_namespace_created_idx), no
-- counter. A namespace without the quota costs one read of its row.
CREATE OR REPLACE FUNCTION cairn_run_quota(p_workflow text)
RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_ns    text := cairn_namespace(p_workflow);
    v_limit integer;
    v_n     integer;
    v_edge  timestamptz;
BEGIN
    SELECT n.runs_per_minute INTO v_limit FROM namespaces n WHERE n.name = v_ns;
    IF v_limit IS NULL THEN
        RETURN true;
    END IF;
    PERFORM 1 FROM workflows w WHERE w.name = p_workflow FOR KEY SHARE;
    PERFORM cairn_limit_lock(ARRAY['quota' || chr(30) || 'runs_per_minute'], ARRAY[v_ns]);
    SELECT count(*), min(x.created_at) INTO v_n, v_edge FROM (
        SELECT r.created_at FROM runs r
        WHERE strpos(r.workflow, '/') > 0 AND cairn_namespace(r.workflow) = v_ns
          AND r.created_at > clock_timestamp() - interval '1 minute'
        ORDER BY r.created_at DESC
        LIMIT v_limit) x;
    IF v_n >= v_limit THEN
        -- The window has room again when the oldest of its last v_limit runs leaves it.
        RAISE EXCEPTION USING ERRCODE = 'CA429',
            MESSAGE = format('namespace %s is over its quota of %s runs per minute', v_ns, v_limit),
            DETAIL = json_build_object('namespace', v_ns, 'quota', 'runs_per_minute', 'limit', v_limit,
                'retry_after', greatest(ceil(extract(epoch FROM v_edge + interval '1 minute' - clock_timestamp())), 1))::text;
    END IF;
    RETURN true;
END $$;

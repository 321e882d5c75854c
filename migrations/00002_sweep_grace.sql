-- +goose Up

-- cairn_sweep(limit, grace) replaces cairn_sweep(limit): no lease is swept until
-- p_grace after the database itself started.
--
-- Why the database's start and not a dispatcher's memory: while PostgreSQL is down
-- no dispatcher can renew its leases, so every lease runs out during a long enough
-- outage although its owner is alive and its attempt goes on. A dispatcher that saw
-- the outage waits before sweeping (runtime), but a server started just after the
-- database came back has seen no error of its own, and its first sweep would take
-- every step from the servers that lived through the outage: their completions are
-- then refused and steps with one attempt fail. pg_postmaster_start_time() is the
-- one memory every dispatcher shares. During the grace (two lease TTLs, chosen by
-- the caller) owners renew their leases and report their outcomes; a dispatcher
-- that died during the outage has its steps swept when the grace ends, a little
-- later than without an outage and never earlier than its lease.
-- +goose StatementBegin
CREATE FUNCTION cairn_sweep(p_limit integer, p_grace interval)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    r record;
    n integer := 0;
BEGIN
    IF now() < pg_postmaster_start_time() + p_grace THEN
        RETURN 0;
    END IF;
    FOR r IN
        SELECT run_id, key, lease_token FROM steps
        WHERE status = 'running' AND lease_expires_at < now()
        ORDER BY lease_expires_at
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    LOOP
        PERFORM cairn_step_finish(r.run_id, r.key, r.lease_token, 'interrupted', NULL,
            jsonb_build_object('message', 'lease expired: the dispatcher holding the step stopped or lost the database',
                               'code', 'lease_expired'),
            true, now(), NULL);
        n := n + 1;
    END LOOP;
    RETURN n;
END $$;
-- +goose StatementEnd

DROP FUNCTION cairn_sweep(integer);

-- +goose Down
-- The function of 00001, as it was.
-- +goose StatementBegin
CREATE FUNCTION cairn_sweep(p_limit integer)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    r record;
    n integer := 0;
BEGIN
    FOR r IN
        SELECT run_id, key, lease_token FROM steps
        WHERE status = 'running' AND lease_expires_at < now()
        ORDER BY lease_expires_at
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    LOOP
        PERFORM cairn_step_finish(r.run_id, r.key, r.lease_token, 'interrupted', NULL,
            jsonb_build_object('message', 'lease expired: the dispatcher holding the step stopped or lost the database',
                               'code', 'lease_expired'),
            true, now(), NULL);
        n := n + 1;
    END LOOP;
    RETURN n;
END $$;
-- +goose StatementEnd

DROP FUNCTION cairn_sweep(integer, interval);

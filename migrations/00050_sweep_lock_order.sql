-- +goose Up
-- cairn_sweep_next returns one expired lease (cairn_sweep's rule: a dead owner's
-- at its expiry, a live owner's a grace past it; nothing within the grace after
-- the database's start) in the lock order of 00042: the step is locked without
-- waiting (SKIP LOCKED), then the run's shared advisory locks and its
-- ancestors' are tried without waiting (cairn_runs_try_share): a run that is
-- being paused, canceled or retried is left to the next round. So the sweeper
-- never waits where it could meet a run's controller or a finisher in a circle.
-- It returns 1 when it swept a lease, 0 when none is due, -1 when the due ones
-- it found were busy. The caller makes one transaction of each call
-- (catalog.StepSweep): one run's locks at a time.
-- +goose StatementBegin
CREATE FUNCTION cairn_sweep_next(p_grace interval)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    r      record;
    v_busy boolean := false;
BEGIN
    IF now() < pg_postmaster_start_time() + p_grace THEN
        RETURN 0;
    END IF;
    FOR r IN
        SELECT s.run_id, s.key, s.lease_token FROM steps s
        WHERE s.status = 'running' AND s.lease_expires_at < now()
          AND (s.lease_expires_at < now() - p_grace
               OR NOT EXISTS (SELECT 1 FROM dispatchers d
                              WHERE d.id = s.lease_owner AND d.lease_until > now()))
        ORDER BY s.lease_expires_at
        LIMIT 16
        FOR UPDATE OF s SKIP LOCKED
    LOOP
        IF cairn_runs_try_share(r.run_id) THEN
            PERFORM cairn_step_finish(r.run_id, r.key, r.lease_token, 'interrupted', NULL,
                jsonb_build_object('message', 'lease expired: the dispatcher holding the step stopped or lost the database',
                                   'code', 'lease_expired'),
                true, now(), NULL);
            RETURN 1;
        END IF;
        v_busy := true;
    END LOOP;
    RETURN CASE WHEN v_busy THEN -1 ELSE 0 END;
END $$;
-- +goose StatementEnd

-- cairn_sweep (00041) took many runs' locks in one transaction, in the order of
-- the leases' expiry: catalog.StepSweep calls cairn_sweep_next instead.
DROP FUNCTION cairn_sweep(integer, interval);

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION cairn_sweep(p_limit integer, p_grace interval)
 RETURNS integer
 LANGUAGE plpgsql
AS $$
DECLARE
    r record;
    n integer := 0;
BEGIN
    IF now() < pg_postmaster_start_time() + p_grace THEN
        RETURN 0;
    END IF;
    FOR r IN
        SELECT s.run_id, s.key, s.lease_token FROM steps s
        WHERE s.status = 'running' AND s.lease_expires_at < now()
          AND (s.lease_expires_at < now() - p_grace
               OR NOT EXISTS (SELECT 1 FROM dispatchers d
                              WHERE d.id = s.lease_owner AND d.lease_until > now()))
        ORDER BY s.lease_expires_at
        LIMIT p_limit
        FOR UPDATE OF s SKIP LOCKED
    LOOP
        PERFORM cairn_step_finish(r.run_id, r.key, r.lease_token, 'interrupted', NULL,
            jsonb_build_object('message', 'lease expired: the dispatcher holding the step stopped or lost the database',
                               'code', 'lease_expired'),
            true, now(), NULL);
        n := n + 1;
    END LOOP;
    RETURN n;
END $$

;
-- +goose StatementEnd

DROP FUNCTION cairn_sweep_next(interval);

-- +goose Up
-- Flow control leftovers (issue 16): fair order between the keys of one limit, and
-- rate limits changed at run time.
--
-- limit_keys: when each key of a concurrency limit last had a step claimed
-- (-infinity: not yet). The claim orders the ready steps of one priority by their
-- key's turn (the later of the step's ready_at and its key's served_at), so that the
-- key served least recently goes first: round robin between keys, and one key's
-- backlog of old steps cannot hold back another key's new ones. A row is made with
-- a run's steps, written by the claim under the key's advisory lock (no new
-- contention), and removed by the claim when the key has no ready step left.
CREATE TABLE limit_keys (
    name      text        NOT NULL,
    key       text        NOT NULL,
    served_at timestamptz NOT NULL,
    PRIMARY KEY (name, key)
);
-- The keys whose turn comes first.
CREATE INDEX limit_keys_served_idx ON limit_keys (served_at);
-- The first claimable steps of each key, in the claim's order: the heads the claim
-- looks at per key.
CREATE INDEX steps_conc_head_idx ON steps (conc_name, conc_key, priority DESC, ready_at)
    WHERE status = 'ready' AND NOT held AND conc_name IS NOT NULL;

-- A rate limit changed at run time (PUT /v1/limits/{name} {"rate_limit", "per"}):
-- rate_limit tokens per rate_per_s seconds for every step whose rate_limit names it,
-- until cleared (DELETE /v1/limits/{name}). A row may now override the rate alone:
-- concurrency becomes optional.
ALTER TABLE limits ALTER COLUMN concurrency DROP NOT NULL;
ALTER TABLE limits ADD COLUMN rate_limit integer CHECK (rate_limit BETWEEN 1 AND 100000);
ALTER TABLE limits ADD COLUMN rate_per_s double precision CHECK (rate_per_s >= 0.001 AND rate_per_s <= 86400);
ALTER TABLE limits ADD CONSTRAINT limits_rate_check CHECK ((rate_limit IS NULL) = (rate_per_s IS NULL));
ALTER TABLE limits ADD CONSTRAINT limits_some_check CHECK (concurrency IS NOT NULL OR rate_limit IS NOT NULL);

-- Flow settings of the failure handlers and map instances. A map instance takes the
-- flow settings of its map step (its limits and key, priority, runs_on,
-- queue_timeout); a compensation or an on_failure step takes its own, else the
-- manifest's defaults, its limit keys evaluated when the run is created, as every
-- step's are (runs.handler_flow, key → settings as sqlFlowApply takes them; the
-- run's priority, when given at its start, already in). Both are filled in by a
-- trigger as the rows are inserted, whatever function inserts them.
ALTER TABLE runs ADD COLUMN handler_flow jsonb;
-- The handlers of a version that have flow settings (their definitions):
-- creating a run reads these, never the definition.
ALTER TABLE workflow_versions ADD COLUMN flow_handlers jsonb
    GENERATED ALWAYS AS (
        jsonb_path_query_array(definition,
            '$.on_failure[*] ? (exists(@.concurrency) || exists(@.rate_limit) || exists(@.priority) || exists(@.runs_on)
                                || exists(@.queue_timeout))')
        || jsonb_path_query_array(definition,
            '$.steps[*].compensate ? (exists(@.concurrency) || exists(@.rate_limit) || exists(@.priority)
                                      || exists(@.runs_on) || exists(@.queue_timeout))')) STORED;

-- +goose StatementBegin
CREATE FUNCTION cairn_step_flow_inherit()
RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    f jsonb;
BEGIN
    IF NEW.map_parent IS NOT NULL THEN
        SELECT p.conc_name, p.conc_key, p.conc_limit, p.rate_name, p.rate_key, p.rate_limit, p.rate_per_s,
               p.priority, p.runs_on, p.queue_timeout_s
        INTO NEW.conc_name, NEW.conc_key, NEW.conc_limit, NEW.rate_name, NEW.rate_key, NEW.rate_limit,
             NEW.rate_per_s, NEW.priority, NEW.runs_on, NEW.queue_timeout_s
        FROM steps p WHERE p.run_id = NEW.run_id AND p.key = NEW.map_parent;
        RETURN NEW;
    END IF;
    SELECT r.handler_flow -> NEW.key INTO f FROM runs r WHERE r.id = NEW.run_id;
    IF f IS NOT NULL THEN
        NEW.conc_name := f ->> 'n';
        NEW.conc_key := f ->> 'k';
        NEW.conc_limit := (f ->> 'l')::integer;
        NEW.rate_name := f ->> 'rn';
        NEW.rate_key := f ->> 'rk';
        NEW.rate_limit := (f ->> 'rl')::integer;
        NEW.rate_per_s := (f ->> 'rp')::float8;
        NEW.priority := coalesce((f ->> 'p')::smallint, NEW.priority);
        NEW.runs_on := CASE WHEN f ? 't' THEN ARRAY(SELECT jsonb_array_elements_text(f -> 't')) END;
        NEW.queue_timeout_s := (f ->> 'q')::float8;
    END IF;
    RETURN NEW;
END $$;
-- +goose StatementEnd
CREATE TRIGGER steps_flow_inherit BEFORE INSERT ON steps
    FOR EACH ROW WHEN (NEW.map_parent IS NOT NULL OR NEW.phase <> 'main')
    EXECUTE FUNCTION cairn_step_flow_inherit();

-- +goose Down
DROP TRIGGER steps_flow_inherit ON steps;
DROP FUNCTION cairn_step_flow_inherit();
ALTER TABLE workflow_versions DROP COLUMN flow_handlers;
ALTER TABLE runs DROP COLUMN handler_flow;
DELETE FROM limits WHERE concurrency IS NULL;
ALTER TABLE limits DROP CONSTRAINT limits_some_check;
ALTER TABLE limits DROP CONSTRAINT limits_rate_check;
ALTER TABLE limits DROP COLUMN rate_per_s;
ALTER TABLE limits DROP COLUMN rate_limit;
ALTER TABLE limits ALTER COLUMN concurrency SET NOT NULL;
DROP INDEX steps_conc_head_idx;
DROP TABLE limit_keys;

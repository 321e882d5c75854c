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

-- +goose Down
DELETE FROM limits WHERE concurrency IS NULL;
ALTER TABLE limits DROP CONSTRAINT limits_some_check;
ALTER TABLE limits DROP CONSTRAINT limits_rate_check;
ALTER TABLE limits DROP COLUMN rate_per_s;
ALTER TABLE limits DROP COLUMN rate_limit;
ALTER TABLE limits ALTER COLUMN concurrency SET NOT NULL;
DROP INDEX steps_conc_head_idx;
DROP TABLE limit_keys;

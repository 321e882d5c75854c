-- cairn-phase: expand
-- cairn-locks: ACCESS EXCLUSIVE on workflows, secrets, limits (small tables: their name checks, loosened); SHARE UPDATE EXCLUSIVE on received_events (its name and id checks loosened: added NOT VALID, then validated); SHARE on workflow_versions (a unique index of its few rows); ACCESS EXCLUSIVE on ui_sessions (a column with a constant default: no rewrite)
-- cairn-online: yes
-- +goose Up
-- Namespaces (docs/security.md, "Namespaces"). An object of namespace N other
-- than default is keyed "N/name" wherever it is keyed by name (workflows and so
-- their versions, aliases, runs and schedules; secrets; limits; received events
-- and the event names a definition waits for or is triggered by); an object of
-- default keeps its bare name, so nothing that exists changes. A name of the API
-- never holds '/': the API qualifies names as they come in and strips them as
-- they go out (api/namespace.go); an object reached by its ID (a run, an
-- operation, a token) is checked against the caller's namespace there.
CREATE TABLE namespaces (
    name            text        PRIMARY KEY CHECK (name ~ '^[a-z0-9][a-z0-9-]{0,30}$'),
    created_at      timestamptz NOT NULL DEFAULT now(),
    created_by      text        NOT NULL,
    -- Quotas: NULL is none. Each is checked in the transaction that creates or
    -- claims, against the rows themselves (running steps, runs created): no
    -- counter a crash could leave behind.
    running_steps   integer     CHECK (running_steps >= 1),
    runs_per_minute integer     CHECK (runs_per_minute >= 1),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    updated_by      text        NOT NULL
);
INSERT INTO namespaces (name, created_by, updated_by) VALUES ('default', 'migration', 'migration');

ALTER TABLE workflows DROP CONSTRAINT workflows_name_check,
    ADD CONSTRAINT workflows_name_check CHECK (name ~ '^([a-z0-9][a-z0-9-]{0,30}/)?[a-z0-9][a-z0-9-]{0,62}$');
ALTER TABLE secrets DROP CONSTRAINT secrets_name_check,
    ADD CONSTRAINT secrets_name_check CHECK (name ~ '^([a-z0-9][a-z0-9-]{0,30}/)?[a-z0-9][a-z0-9_-]{0,62}$');
ALTER TABLE limits DROP CONSTRAINT limits_name_check,
    ADD CONSTRAINT limits_name_check CHECK (name ~ '^([a-z0-9][a-z0-9-]{0,30}/)?[a-z0-9][a-z0-9_.-]{0,62}$');
ALTER TABLE received_events DROP CONSTRAINT received_events_name_check,
    ADD CONSTRAINT received_events_name_check CHECK (name ~ '^([a-z0-9][a-z0-9-]{0,30}/)?[a-z0-9][a-z0-9_.-]{0,62}$') NOT VALID;
ALTER TABLE received_events VALIDATE CONSTRAINT received_events_name_check;
-- An event's id is qualified as its name is: room for "namespace/".
ALTER TABLE received_events DROP CONSTRAINT received_events_id_check,
    ADD CONSTRAINT received_events_id_check CHECK (length(id) BETWEEN 1 AND 232) NOT VALID;
ALTER TABLE received_events VALIDATE CONSTRAINT received_events_id_check;

-- A session of the web UI started by single sign-on keeps the namespace its
-- role was given in ('': every namespace); a token's session asks its token.
ALTER TABLE ui_sessions ADD COLUMN namespace text NOT NULL DEFAULT '';

-- The same bundle deployed in two namespaces is two versions (of two workflows):
-- a digest is unique per workflow. Within one namespace a bundle names its
-- workflow, so this is the old rule there.
CREATE UNIQUE INDEX workflow_versions_digest_workflow_key ON workflow_versions (bundle_digest, workflow);
ALTER TABLE workflow_versions DROP CONSTRAINT workflow_versions_bundle_digest_key;

-- +goose Down
ALTER TABLE ui_sessions DROP COLUMN namespace;
ALTER TABLE received_events DROP CONSTRAINT received_events_id_check,
    ADD CONSTRAINT received_events_id_check CHECK (length(id) >= 1 AND length(id) <= 200) NOT VALID;
ALTER TABLE workflow_versions ADD CONSTRAINT workflow_versions_bundle_digest_key UNIQUE (bundle_digest);
DROP INDEX workflow_versions_digest_workflow_key;
ALTER TABLE received_events DROP CONSTRAINT received_events_name_check,
    ADD CONSTRAINT received_events_name_check CHECK (name ~ '^[a-z0-9][a-z0-9_.-]{0,62}$');
ALTER TABLE limits DROP CONSTRAINT limits_name_check,
    ADD CONSTRAINT limits_name_check CHECK (name ~ '^[a-z0-9][a-z0-9_.-]{0,62}$');
ALTER TABLE secrets DROP CONSTRAINT secrets_name_check,
    ADD CONSTRAINT secrets_name_check CHECK (name ~ '^[a-z0-9][a-z0-9_-]{0,62}$');
ALTER TABLE workflows DROP CONSTRAINT workflows_name_check,
    ADD CONSTRAINT workflows_name_check CHECK (name ~ '^[a-z0-9][a-z0-9-]{0,62}$');
DROP TABLE namespaces;

-- +goose Up
-- Secrets (PUT /v1/secrets/{name}): write-only values, encrypted at rest by the
-- servers (AES-256-GCM, package secrets) before they reach the catalog, which only
-- ever holds ciphertext. Every PUT makes a new version; the newest is the one in
-- use. Each version records the id of the key that sealed it, so that a key can be
-- rotated: versions sealed with an old key stay readable while that key is
-- configured as an old key, and a new PUT seals with the current one.
CREATE TABLE secrets (
    name           text        PRIMARY KEY CHECK (name ~ '^[a-z0-9][a-z0-9_-]{0,62}$'),
    -- The newest version; versions count from 1.
    latest_version integer     NOT NULL CHECK (latest_version >= 1),
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE secret_versions (
    name       text        NOT NULL REFERENCES secrets (name) ON DELETE CASCADE,
    version    integer     NOT NULL CHECK (version >= 1),
    -- The key that sealed it (package secrets: a short hash of the key, never the key).
    key_id     text        NOT NULL,
    -- nonce || AES-256-GCM ciphertext and tag; the secret's name is the additional
    -- data, so a value moved to another name does not open.
    sealed     bytea       NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    created_by text        NOT NULL,
    PRIMARY KEY (name, version)
);

-- cairn_secret_put records the next version of a secret and returns its number and
-- time.
-- The upsert of the secret's row takes its lock, so concurrent PUTs of one name get
-- consecutive versions, none lost and none shared.
-- +goose StatementBegin
CREATE FUNCTION cairn_secret_put(p_name text, p_key_id text, p_sealed bytea, p_actor text)
RETURNS TABLE (version integer, created_at timestamptz) LANGUAGE plpgsql AS $$
DECLARE
    v integer;
BEGIN
    IF p_name !~ '^[a-z0-9][a-z0-9_-]{0,62}$' THEN
        RAISE EXCEPTION USING ERRCODE = 'CA422',
            MESSAGE = format('secret name %L must be 1 to 63 lower-case letters, digits, ''_'' and ''-'', starting with a letter or digit', p_name);
    END IF;
    INSERT INTO secrets AS s (name, latest_version) VALUES (p_name, 1)
    ON CONFLICT (name) DO UPDATE SET latest_version = s.latest_version + 1, updated_at = now()
    RETURNING s.latest_version INTO v;
    RETURN QUERY
    INSERT INTO secret_versions AS sv (name, version, key_id, sealed, created_by)
    VALUES (p_name, v, p_key_id, p_sealed, p_actor)
    RETURNING sv.version, sv.created_at;
END;
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION cairn_secret_put(text, text, bytea, text);
DROP TABLE secret_versions;
DROP TABLE secrets;

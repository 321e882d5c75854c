-- Secrets: sealed values, versioned. Go caller: catalog/secret.go.

-- cairn_secret_put records the next version of a secret and returns its number and
-- time. The upsert of the secret's row takes its lock, so concurrent PUTs of one
-- name get consecutive versions, none lost and none shared. The name of a secret
-- of a namespace other than default is "namespace/name" (namespaces.sql).
CREATE OR REPLACE FUNCTION cairn_secret_put(p_name text, p_key_id text, p_sealed bytea, p_actor text)
RETURNS TABLE (version integer, created_at timestamptz) LANGUAGE plpgsql AS $$
DECLARE
    v integer;
BEGIN
    IF p_name !~ '^([a-z0-9][a-z0-9-]{0,30}/)?[a-z0-9][a-z0-9_-]{0,62}$' THEN
        RAISE EXCEPTION USING ERRCODE = 'CA422',
            MESSAGE = format('secret name %L must be 1 to 63 lower-case letters, digits, ''_'' and ''-'', starting with a letter or digit',
                             regexp_replace(p_name, '^[a-z0-9][a-z0-9-]{0,30}/', ''));
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

-- Namespaces (migration 00089, api/namespace.go). An object of a namespace other
-- than default is keyed "namespace/name"; one of default by its bare name.

-- cairn_namespace is the namespace of a qualified name (a workflow's, and so a
-- run's: runs.workflow): the part before '/', or 'default' when there is none.
CREATE OR REPLACE FUNCTION cairn_namespace(p_name text)
RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN strpos(p_name, '/') > 0 THEN split_part(p_name, '/', 1) ELSE 'default' END
$$;

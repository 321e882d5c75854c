-- Aliases: named pointers to a workflow's versions (latest, stable, …), with their
-- history of changes. Go callers: catalog/alias.go, and run creation
-- (catalog/run.go, catalog/retry.go) through cairn_alias_version.

-- cairn_alias_version returns the version that alias p_alias of workflow p_workflow
-- names, or NULL. It is the one place that resolves an alias; statements use it
-- where they take a version (run creation; retry and rerun onto an alias).
CREATE OR REPLACE FUNCTION cairn_alias_version(p_workflow text, p_alias text)
RETURNS integer LANGUAGE sql STABLE AS $$
    SELECT version FROM workflow_aliases WHERE workflow = p_workflow AND alias = p_alias
$$;

-- cairn_alias_set points alias p_alias of p_workflow at p_version (creating the alias
-- if need be) and records the change (p_kind deploy or promote) with p_actor. Changes
-- of one workflow's aliases are serialized by the workflow's row lock (which a deploy
-- holds too), so none is lost and each records the version its alias named before.
-- An alias that names p_version already is left as it is: no change, false back.
-- Raises CA404 when the workflow does not exist and CA422 when the version does not.
CREATE OR REPLACE FUNCTION cairn_alias_set(p_workflow text, p_alias text, p_version integer, p_kind text, p_actor text)
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    v_cur  integer;
    v_head bigint;
    v_id   bigint;
BEGIN
    PERFORM 1 FROM workflows WHERE name = p_workflow FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'workflow % not found', p_workflow USING ERRCODE = 'CA404';
    END IF;
    PERFORM 1 FROM workflow_versions WHERE workflow = p_workflow AND version = p_version;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'workflow % has no version %', p_workflow, p_version USING ERRCODE = 'CA422';
    END IF;
    SELECT version, head INTO v_cur, v_head FROM workflow_aliases
    WHERE workflow = p_workflow AND alias = p_alias;
    IF v_cur = p_version THEN
        RETURN false;
    END IF;
    INSERT INTO alias_changes (workflow, alias, version, previous_version, kind, actor, parent)
    VALUES (p_workflow, p_alias, p_version, v_cur, p_kind, p_actor, v_head)
    RETURNING id INTO v_id;
    INSERT INTO workflow_aliases (workflow, alias, version, head, updated_at, updated_by)
    VALUES (p_workflow, p_alias, p_version, v_id, now(), p_actor)
    ON CONFLICT (workflow, alias) DO UPDATE
    SET version = EXCLUDED.version, head = EXCLUDED.head, updated_at = now(), updated_by = EXCLUDED.updated_by;
    RETURN true;
END $$;

-- cairn_alias_rollback moves alias p_alias of p_workflow back to the version it named
-- before the change that set its current one (the parent of its head), records the
-- rollback with p_actor, and returns that version. Raises CA404 when the workflow or
-- the alias does not exist and CAA09 when the alias has nothing to go back to (its
-- current version is the first it named, or every earlier one was rolled back).
CREATE OR REPLACE FUNCTION cairn_alias_rollback(p_workflow text, p_alias text, p_actor text)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    v_cur     integer;
    v_parent  bigint;
    v_version integer;
BEGIN
    PERFORM 1 FROM workflows WHERE name = p_workflow FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'workflow % not found', p_workflow USING ERRCODE = 'CA404';
    END IF;
    SELECT a.version, c.parent INTO v_cur, v_parent
    FROM workflow_aliases a JOIN alias_changes c ON c.id = a.head
    WHERE a.workflow = p_workflow AND a.alias = p_alias;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'workflow % has no alias %', p_workflow, p_alias USING ERRCODE = 'CA404';
    END IF;
    IF v_parent IS NULL THEN
        RAISE EXCEPTION 'alias % of workflow % has no earlier version to roll back to: it names version %, the first version in its history that was not rolled back',
            p_alias, p_workflow, v_cur USING ERRCODE = 'CAA09';
    END IF;
    SELECT version INTO v_version FROM alias_changes WHERE id = v_parent;
    INSERT INTO alias_changes (workflow, alias, version, previous_version, kind, actor, restores)
    VALUES (p_workflow, p_alias, v_version, v_cur, 'rollback', p_actor, v_parent);
    UPDATE workflow_aliases SET version = v_version, head = v_parent, updated_at = now(), updated_by = p_actor
    WHERE workflow = p_workflow AND alias = p_alias;
    RETURN v_version;
END $$;

-- cairn-phase: expand
-- cairn-locks: ACCESS EXCLUSIVE on steps (a nullable column without a default: the catalog only), namespaces (a check on its few rows)
-- cairn-online: yes
-- +goose Up
-- Quotas per namespace (docs/flow.md, "Quotas"; catalog/quota.go). A step's
-- quota_ns is the namespace whose running_steps quota bounds it: its run's
-- (cairn_namespace(runs.workflow)), set when the step is inserted (the run's
-- creation, a rerun, a retry's relayout; a map instance and a failure handler
-- inherit it: steps_flow_inherit), and NULL in default, which takes no quota: so
-- a claim of a default step reads nothing more than before, and a quota set on a
-- namespace binds its steps already ready at once (no step has to be marked). The
-- running steps of a namespace are counted by steps_quota_running_idx (00096):
-- no counter, so nothing a crash leaves behind. No step of a namespace other than
-- default exists before this migration (namespaces came in 00089, of the same
-- release): nothing to fill in.
ALTER TABLE steps ADD COLUMN quota_ns text;

-- default is the operator's namespace: no quota binds it (its steps carry no
-- quota_ns). Bound a workflow there with a concurrency limit.
ALTER TABLE namespaces ADD CONSTRAINT namespaces_default_quota_check
    CHECK (name <> 'default' OR (running_steps IS NULL AND runs_per_minute IS NULL));

-- +goose Down
ALTER TABLE namespaces DROP CONSTRAINT namespaces_default_quota_check;
ALTER TABLE steps DROP COLUMN quota_ns;

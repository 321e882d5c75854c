-- cairn-phase: contract
-- cairn-locks: SHARE UPDATE EXCLUSIVE on blob_digests (a comment)
-- cairn-online: yes
-- Large payloads are written once under keys of their own ("<kind>/u/<hex>",
-- migration 00087) only once this migration is applied: a server of an earlier
-- release reads a payload at its content address alone, and could not read one
-- written so. It is a contract migration, applied once no server of the
-- previous release is left (docs/operations.md, "Upgrades"); until then, servers
-- of this release write large payloads at their content address, as before
-- (catalog.Store.BlobIndex).
-- +goose Up
COMMENT ON TABLE blob_digests IS 'Which object holds which content: large payloads written once under keys of their own (every server reads them: migration 00099).';

-- +goose Down
COMMENT ON TABLE blob_digests IS NULL;

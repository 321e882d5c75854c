-- cairn-phase: expand
-- cairn-locks: SHARE on blob_digests (the index of a new, empty table)
-- cairn-online: yes
-- Large payloads written once (docs/operations.md, "Storage"): an S3 Put of
-- large content streams it to a key of its own, "<kind>/u/<hex>", as it
-- hashes it, instead of spooling it or copying it to its content address, and
-- records here which object holds which content, so that equal content is
-- stored once (blobstore.PutOptions.Index, catalog/blob_index.go). A record is
-- a hint: the writer checks that the object exists before it names it; the
-- collector drops the records of the objects it deletes.
-- +goose Up
CREATE TABLE blob_digests (
    address     text        PRIMARY KEY, -- the content address "<kind>/sha256/<hex>"
    blob_key    text        NOT NULL,    -- the object holding it, "<kind>/u/<hex>"
    recorded_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX blob_digests_blob_key_idx ON blob_digests (blob_key);

-- +goose Down
DROP TABLE blob_digests;

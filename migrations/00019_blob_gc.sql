-- +goose Up
-- Blob garbage collection (issue 18): the collector (runtime.Collector) deletes
-- the objects of kinds payloads, logs and bundles that no catalog row names and
-- that are older than its grace period. The protocol that keeps it from deleting
-- an object a writer is about to name is described in catalog/blob_gc.go.

-- A writer claims a key (catalog.Store.BlobClaim) before its Put looks whether
-- the object is stored, and writes the row naming it within the grace period;
-- the collector keeps every object claimed within the grace period, and deletes
-- claims older than it.
CREATE TABLE blob_claims (
    blob_key   text        PRIMARY KEY,
    claimed_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX blob_claims_claimed_at_idx ON blob_claims (claimed_at);

-- The objects an archived run's archive names (outputs, checkpoints, payloads,
-- logs), written by the reaper with its archived_runs row: the collector keeps
-- them as long as the archive, which is never collected.
CREATE TABLE archived_blobs (
    blob_key text NOT NULL,
    run_id   uuid NOT NULL,
    PRIMARY KEY (blob_key, run_id)
);

-- One collector pass at a time across servers: a lease, and when the last
-- completed pass ended (dry or not), so that the servers share one interval.
CREATE TABLE blob_gc (
    id          boolean     PRIMARY KEY DEFAULT true CHECK (id),
    owner       text,
    expires_at  timestamptz NOT NULL DEFAULT '-infinity',
    finished_at timestamptz NOT NULL DEFAULT '-infinity'
);
INSERT INTO blob_gc DEFAULT VALUES;

-- +goose Down
DROP TABLE blob_gc;
DROP TABLE archived_blobs;
DROP TABLE blob_claims;

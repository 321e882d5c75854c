-- cairn-phase: expand
-- cairn-locks: ACCESS EXCLUSIVE on dispatchers (brief: a column without a default, no rewrite)
-- cairn-online: yes
-- Rolling upgrades (docs/operations.md, "Upgrades"). dispatchers.version is the
-- binary each live dispatcher runs (`cairn servers`); a dispatcher of a release
-- before it leaves it NULL. schema_phases records the phase of every migration
-- applied (`cairn migrate up` writes it): a server whose binary does not know a
-- migration applied to its database starts when every such migration is an
-- expand one, and names the one that is not otherwise (catalog/schema.go).
-- +goose Up
ALTER TABLE dispatchers ADD COLUMN version text;
CREATE TABLE schema_phases (
    version bigint PRIMARY KEY,
    name    text   NOT NULL,
    phase   text   NOT NULL CHECK (phase IN ('expand', 'contract'))
);

-- +goose Down
DROP TABLE schema_phases;
ALTER TABLE dispatchers DROP COLUMN version;

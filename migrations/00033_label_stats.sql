-- +goose Up
-- Statistics of the label pairs of runs, for the planner's estimate of a label
-- filter (cairn_label_pairs(labels) @> …, the runs' list and search). PostgreSQL
-- does not use the statistics of a partial index's expression (runs_labels_idx is
-- partial), so it estimated every label at its default of 0.5 % of the runs: a
-- label of one tenant in a thousand, with status succeeded, was listed by walking
-- the runs backwards by id and filtering (480–520 ms a page over 1,000,000 runs,
-- the benchmark's list scenario) instead of reading its 1,000 runs from the index
-- (8 ms). The ANALYZE fills them at once; autovacuum keeps them.
CREATE STATISTICS runs_label_pairs_stats ON (cairn_label_pairs(labels)) FROM runs;
ANALYZE runs;

-- +goose Down
DROP STATISTICS runs_label_pairs_stats;

-- Other ids a manager gives a unit: Slurm 26.05's SLUID of a job, which
-- the exporter labels a job by (sluid) when the job's cgroup is named by
-- it and its numeric id is not known there. A series naming the unit by
-- its alias only is counted into the unit (cluster, kind, unit_id).

-- +goose Up
CREATE TABLE unit_aliases (
    cluster TEXT NOT NULL,
    kind    TEXT NOT NULL,
    alias   TEXT NOT NULL,
    unit_id TEXT NOT NULL,
    PRIMARY KEY (cluster, kind, alias)
);

-- +goose Down
DROP TABLE unit_aliases;

-- The units store's first schema (SQLite). Times are Unix milliseconds,
-- 0 when unknown. See internal/units/store for what each table is for.

-- +goose Up
CREATE TABLE units (
    ref        INTEGER PRIMARY KEY,
    cluster    TEXT    NOT NULL,
    kind       TEXT    NOT NULL,
    unit_id    TEXT    NOT NULL,
    name       TEXT    NOT NULL DEFAULT '',
    usr        TEXT    NOT NULL DEFAULT '',
    grp        TEXT    NOT NULL DEFAULT '',
    project    TEXT    NOT NULL DEFAULT '',
    part       TEXT    NOT NULL DEFAULT '',
    nodes      TEXT    NOT NULL DEFAULT '',
    state      TEXT    NOT NULL DEFAULT '',
    submit_ms  INTEGER NOT NULL DEFAULT 0,
    start_ms   INTEGER NOT NULL DEFAULT 0,
    end_ms     INTEGER NOT NULL DEFAULT 0,
    alloc_cpus INTEGER NOT NULL DEFAULT 0,
    alloc_mem  INTEGER NOT NULL DEFAULT 0,
    alloc_gpus INTEGER NOT NULL DEFAULT 0,
    exit_code  INTEGER,
    status     TEXT    NOT NULL,
    updated_ms INTEGER NOT NULL,
    meta       TEXT    NOT NULL DEFAULT '',
    first_ms   INTEGER NOT NULL DEFAULT 0,
    last_ms    INTEGER NOT NULL DEFAULT 0,
    cpu_s      REAL    NOT NULL DEFAULT 0,
    io_read    REAL    NOT NULL DEFAULT 0,
    io_write   REAL    NOT NULL DEFAULT 0,
    net_sent   REAL    NOT NULL DEFAULT 0,
    net_recv   REAL    NOT NULL DEFAULT 0,
    energy     TEXT    NOT NULL DEFAULT '',
    emissions  TEXT    NOT NULL DEFAULT ''
);
CREATE UNIQUE INDEX units_key ON units (cluster, kind, unit_id);
CREATE INDEX units_id ON units (unit_id);
CREATE INDEX units_user_start ON units (usr, start_ms);
CREATE INDEX units_project_start ON units (project, start_ms);
CREATE INDEX units_start ON units (start_ms);
CREATE INDEX units_open ON units (status) WHERE status <> 'final';

CREATE TABLE unit_series (
    ref     INTEGER PRIMARY KEY,
    last_ms INTEGER NOT NULL,
    state   TEXT    NOT NULL
);

CREATE TABLE usage_daily (
    usr       TEXT    NOT NULL,
    day       INTEGER NOT NULL,
    project   TEXT    NOT NULL,
    cluster   TEXT    NOT NULL,
    kind      TEXT    NOT NULL,
    units     INTEGER NOT NULL DEFAULT 0,
    wall_s    REAL    NOT NULL DEFAULT 0,
    cpu_s     REAL    NOT NULL DEFAULT 0,
    gpu_s     REAL    NOT NULL DEFAULT 0,
    io_read   REAL    NOT NULL DEFAULT 0,
    io_write  REAL    NOT NULL DEFAULT 0,
    net_sent  REAL    NOT NULL DEFAULT 0,
    net_recv  REAL    NOT NULL DEFAULT 0,
    w_power   REAL    NOT NULL DEFAULT 0,
    w_cpus    REAL    NOT NULL DEFAULT 0,
    w_eff     REAL    NOT NULL DEFAULT 0,
    w_eff_cpu REAL    NOT NULL DEFAULT 0,
    energy    TEXT    NOT NULL DEFAULT '',
    emissions TEXT    NOT NULL DEFAULT '',
    PRIMARY KEY (usr, day, project, cluster, kind)
);
CREATE INDEX usage_daily_project ON usage_daily (project, day);
CREATE INDEX usage_daily_day ON usage_daily (day);

CREATE TABLE members (
    cluster TEXT NOT NULL,
    usr     TEXT NOT NULL,
    project TEXT NOT NULL,
    PRIMARY KEY (cluster, usr, project)
);
CREATE INDEX members_project ON members (cluster, project, usr);

CREATE TABLE cursors (
    name TEXT    PRIMARY KEY,
    ms   INTEGER NOT NULL
);

-- +goose Down
DROP TABLE cursors;
DROP TABLE members;
DROP TABLE usage_daily;
DROP TABLE unit_series;
DROP TABLE units;

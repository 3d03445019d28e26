-- Seconds a unit held GPUs none of its processes used, summed over the
-- GPUs (the exporters' wattrace_gpu_allocation_idle_seconds_total), per
-- unit and in the daily rollup. Units counted before stay at 0.

-- +goose Up
ALTER TABLE units ADD COLUMN gpu_idle_s REAL NOT NULL DEFAULT 0;
ALTER TABLE usage_daily ADD COLUMN gpu_idle_s REAL NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE usage_daily DROP COLUMN gpu_idle_s;
ALTER TABLE units DROP COLUMN gpu_idle_s;

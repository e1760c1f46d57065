-- Two indexes that other indexes now answer, dropped: every insert and
-- every status change (claim, completion, retry) wrote an entry into each.
-- - boxcar_jobs_created (created_at, id): the unfiltered jobs list reads
--   one range of boxcar_jobs_status_created per status, each in
--   (created_at, id) order, and merges at most five pages.
-- - boxcar_jobs_running_type (job_type) of running jobs: the guards' reads
--   of a type's running jobs are the (job_type, 'running') range of
--   boxcar_jobs_type_created.
DROP INDEX IF EXISTS boxcar_jobs_created;
DROP INDEX IF EXISTS boxcar_jobs_running_type;

-- Claims skip a flow parent while it has live children (an anti-join per
-- candidate). As on Postgres: boxcar_jobs_finished, which serves pruning
-- and retention (`finished_at < …`), holds only finished jobs, so no plan
-- for live jobs can read every live job's entry through it (and claims and
-- retries no longer update it); boxcar_jobs_live_children answers the
-- anti-join from live children alone.
DROP INDEX IF EXISTS boxcar_jobs_finished;
CREATE INDEX IF NOT EXISTS boxcar_jobs_finished
    ON boxcar_jobs (status, finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS boxcar_jobs_live_children
    ON boxcar_jobs (parent_id)
    WHERE parent_id IS NOT NULL AND status IN ('pending', 'running');

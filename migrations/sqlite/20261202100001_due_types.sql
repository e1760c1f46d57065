-- Which job types have pending work, and when the earliest is due: one
-- index probe per type (min(run_at) of its pending jobs), so a host asks
-- for all its types in one cheap statement however large the backlog.
CREATE INDEX IF NOT EXISTS boxcar_jobs_due
    ON boxcar_jobs (job_type, run_at) WHERE status = 'pending';

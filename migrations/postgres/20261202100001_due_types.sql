-- Which job types have pending work, and when the earliest is due: one
-- index probe per type (min(run_at) of its pending jobs), so a host asks
-- for all its types in one cheap statement however large the backlog.
CREATE INDEX IF NOT EXISTS jobs_due
    ON jobs (job_type, run_at) WHERE status = 'pending';

-- Wake idle workers: one notification per inserting statement and job
-- type, carrying the type, so a host claims only for the types that got
-- work (identical notifications of one transaction are folded into one).
CREATE OR REPLACE FUNCTION notify_jobs_inserted() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    inserted_type TEXT;
BEGIN
    FOR inserted_type IN SELECT DISTINCT job_type FROM inserted_rows LOOP
        PERFORM pg_notify(TG_TABLE_SCHEMA || '_jobs_inserted', inserted_type);
    END LOOP;
    RETURN NULL;
END;
$$;

DROP TRIGGER IF EXISTS jobs_inserted ON jobs;
CREATE TRIGGER jobs_inserted AFTER INSERT ON jobs
    REFERENCING NEW TABLE AS inserted_rows
    FOR EACH STATEMENT EXECUTE FUNCTION notify_jobs_inserted();

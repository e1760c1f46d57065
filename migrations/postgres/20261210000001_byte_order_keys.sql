-- The key columns every jobs index holds (id, job_type, status) and the
-- history tables' job_id compare byte by byte (collation "C") instead of
-- by the database's collation.
--
-- Every insert and every status change (claim, completion, retry) adds an
-- entry to each of the jobs indexes, and each entry's place is found by
-- comparing keys: under a libc collation (even C.UTF-8) a text comparison
-- of unequal values is a strcoll call. Jobs of one batch share job_type,
-- status and created_at, so most comparisons fall through to their ids.
-- Measured on the server (pgbench, 1,000-row inserts into a copy of the
-- jobs table): 10 % less time per insert. The order of ids is unchanged for
-- the ids boxcar makes (UUIDv7 text: lowercase hex and hyphens), and
-- queries that sorted ids byte by byte already did so with COLLATE "C".
--
-- A collation change is not a table rewrite, but every index on these
-- columns is rebuilt. The finished trigger reads status, so it is dropped
-- and made again as it was.
DROP TRIGGER IF EXISTS jobs_finished ON jobs;
ALTER TABLE jobs
    ALTER COLUMN id TYPE text COLLATE "C",
    ALTER COLUMN job_type TYPE text COLLATE "C",
    ALTER COLUMN status TYPE text COLLATE "C";
CREATE TRIGGER jobs_finished AFTER UPDATE OF status ON jobs
    FOR EACH ROW WHEN (NEW.status IN ('failed', 'cancelled')
                       AND OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION notify_jobs_finished();
ALTER TABLE job_attempts ALTER COLUMN job_id TYPE text COLLATE "C";
ALTER TABLE job_logs ALTER COLUMN job_id TYPE text COLLATE "C";

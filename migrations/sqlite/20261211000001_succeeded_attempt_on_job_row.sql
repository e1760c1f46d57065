-- A succeeded attempt is kept on its job's row instead of in
-- boxcar_job_attempts.
--
-- Almost every job ends with one attempt that succeeds, and recording it
-- was a third row write per job (after the claim's and the completion's
-- updates): a table row and an index entry in boxcar_job_attempts, and
-- the JSON the completion bound to describe it, parsed by the writer.
-- The completion now writes that attempt's worker and figures into these
-- columns of the row it updates anyway. The attempt history of a job is
-- its boxcar_job_attempts rows (retried, failed, cancelled, lost, …
-- attempts) followed by the job row's own attempt when the job succeeded
-- and `finished_by` is set. Jobs that succeeded before this migration keep
-- their attempt in boxcar_job_attempts and have `finished_by` empty, so no
-- attempt is shown twice.
ALTER TABLE boxcar_jobs ADD COLUMN finished_by TEXT;
ALTER TABLE boxcar_jobs ADD COLUMN wall_ms INTEGER;
ALTER TABLE boxcar_jobs ADD COLUMN peak_memory_bytes INTEGER;
ALTER TABLE boxcar_jobs ADD COLUMN fuel INTEGER;
ALTER TABLE boxcar_jobs ADD COLUMN log_bytes INTEGER;
ALTER TABLE boxcar_jobs ADD COLUMN result_bytes INTEGER;
ALTER TABLE boxcar_jobs ADD COLUMN http_requests INTEGER;
ALTER TABLE boxcar_jobs ADD COLUMN http_bytes INTEGER;
ALTER TABLE boxcar_jobs ADD COLUMN enqueues INTEGER;

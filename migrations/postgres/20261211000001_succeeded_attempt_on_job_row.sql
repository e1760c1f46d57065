-- A succeeded attempt is kept on its job's row instead of in job_attempts.
--
-- Almost every job ends with one attempt that succeeds, and recording it
-- was a third row write per job (after the claim's and the completion's
-- updates): a heap tuple and two index entries in job_attempts, plus the
-- JSON the completion bound to describe it. The completion now writes
-- that attempt's worker and figures into these columns of the row it
-- updates anyway. The attempt history of a job is its job_attempts rows
-- (retried, failed, cancelled, lost, … attempts) followed by the job row's
-- own attempt when the job succeeded and `finished_by` is set. Jobs that
-- succeeded before this migration keep their attempt in job_attempts and
-- have `finished_by` empty, so no attempt is shown twice.
ALTER TABLE jobs
    ADD COLUMN IF NOT EXISTS finished_by       TEXT,
    ADD COLUMN IF NOT EXISTS wall_ms           BIGINT,
    ADD COLUMN IF NOT EXISTS peak_memory_bytes BIGINT,
    ADD COLUMN IF NOT EXISTS fuel              BIGINT,
    ADD COLUMN IF NOT EXISTS log_bytes         BIGINT,
    ADD COLUMN IF NOT EXISTS result_bytes      BIGINT,
    ADD COLUMN IF NOT EXISTS http_requests     BIGINT,
    ADD COLUMN IF NOT EXISTS http_bytes        BIGINT,
    ADD COLUMN IF NOT EXISTS enqueues          BIGINT;

-- Every finished attempt of a job, written in the transaction of the
-- job's own transition, and the log lines its handler wrote. Rows are
-- deleted with their job (prune).
CREATE TABLE IF NOT EXISTS job_attempts (
    id                BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id            TEXT NOT NULL,
    attempt           INTEGER NOT NULL,
    worker            TEXT,
    digest            TEXT,
    started_at        TIMESTAMPTZ,
    finished_at       TIMESTAMPTZ NOT NULL,
    outcome           TEXT NOT NULL,
    error             TEXT,
    error_code        TEXT,
    error_details     TEXT,
    wall_ms           BIGINT,
    peak_memory_bytes BIGINT,
    fuel              BIGINT,
    log_bytes         BIGINT,
    result_bytes      BIGINT,
    http_requests     BIGINT,
    http_bytes        BIGINT,
    enqueues          BIGINT
);
CREATE INDEX IF NOT EXISTS job_attempts_job ON job_attempts (job_id, id);

CREATE TABLE IF NOT EXISTS job_logs (
    id      BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id  TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    seq     INTEGER NOT NULL,
    at      TIMESTAMPTZ NOT NULL,
    level   TEXT NOT NULL,
    message TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS job_logs_job ON job_logs (job_id, id);

-- Which host serves which job type, with the job defaults of the manifest
-- it serves it with. Each host rewrites its own rows on every deploy and
-- undeploy and as its heartbeat (seen_at); deployed_at moves only when the
-- version or the defaults change. Times are milliseconds since the epoch.
CREATE TABLE IF NOT EXISTS boxcar_deployed_types (
    job_type     TEXT NOT NULL,
    host         TEXT NOT NULL,
    version      TEXT NOT NULL,
    max_attempts INTEGER CHECK (max_attempts IS NULL OR max_attempts > 0),
    deployed_at  INTEGER NOT NULL,
    seen_at      INTEGER NOT NULL,
    PRIMARY KEY (job_type, host)
);
-- Every insert without an attempt budget reads the newest deploy of its
-- type: this index answers it without a sort.
CREATE INDEX IF NOT EXISTS boxcar_deployed_types_newest
    ON boxcar_deployed_types (job_type, deployed_at, host);

-- boxcar schema for Postgres. Applied with search_path set to the store's
-- schema (default `boxcar`); nothing here names the schema, so one database
-- can hold several isolated boxcar schemas.
CREATE TABLE IF NOT EXISTS jobs (
    id               TEXT PRIMARY KEY,
    job_type         TEXT NOT NULL,
    payload          TEXT NOT NULL,
    scope_type       TEXT,
    scope_id         TEXT,
    status           TEXT NOT NULL DEFAULT 'pending'
                     CHECK (status IN ('pending', 'running', 'succeeded', 'failed', 'cancelled')),
    priority         INTEGER NOT NULL DEFAULT 0,
    run_at           TIMESTAMPTZ NOT NULL DEFAULT now(),
    attempts         INTEGER NOT NULL DEFAULT 0,
    max_attempts     INTEGER NOT NULL DEFAULT 3 CHECK (max_attempts > 0),
    last_error       TEXT,
    dedupe_key       TEXT,
    lease_owner      TEXT,
    lease_expires_at TIMESTAMPTZ,
    started_at       TIMESTAMPTZ,
    finished_at      TIMESTAMPTZ,
    result           TEXT,
    progress         TEXT,
    parent_id        TEXT,
    schedule_id      TEXT,
    expires_at       TIMESTAMPTZ,
    handler_version  TEXT,
    created_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at       TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE UNIQUE INDEX IF NOT EXISTS jobs_dedupe_live
    ON jobs (dedupe_key)
    WHERE dedupe_key IS NOT NULL AND status IN ('pending', 'running');
CREATE INDEX IF NOT EXISTS jobs_claim
    ON jobs (job_type, priority, run_at, id) WHERE status = 'pending';
CREATE INDEX IF NOT EXISTS jobs_lease
    ON jobs (lease_expires_at) WHERE status = 'running';
CREATE INDEX IF NOT EXISTS jobs_running_type
    ON jobs (job_type) WHERE status = 'running';
CREATE INDEX IF NOT EXISTS jobs_scope
    ON jobs (scope_type, scope_id, status);
CREATE INDEX IF NOT EXISTS jobs_parent
    ON jobs (parent_id) WHERE parent_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS jobs_finished
    ON jobs (status, finished_at);
CREATE INDEX IF NOT EXISTS jobs_created
    ON jobs (created_at, id);

CREATE TABLE IF NOT EXISTS job_guards (
    key          TEXT PRIMARY KEY,
    seq          BIGINT NOT NULL DEFAULT 0,
    window_start TIMESTAMPTZ,
    spent        BIGINT NOT NULL DEFAULT 0
);

CREATE TABLE IF NOT EXISTS schedules (
    id          TEXT PRIMARY KEY,
    job_type    TEXT NOT NULL,
    payload     TEXT NOT NULL,
    every_ms    BIGINT,
    cron        TEXT,
    tz          TEXT,
    immediately BOOLEAN NOT NULL DEFAULT false,
    start_at    TIMESTAMPTZ,
    end_at      TIMESTAMPTZ,
    next_run_at TIMESTAMPTZ,
    last_run_at TIMESTAMPTZ,
    owner       TEXT,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    CHECK ((every_ms IS NULL) <> (cron IS NULL))
);

CREATE TABLE IF NOT EXISTS handler_events (
    id       BIGSERIAL PRIMARY KEY,
    at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    job_type TEXT,
    file     TEXT,
    digest   TEXT,
    kind     TEXT NOT NULL CHECK (kind IN ('deployed', 'rejected', 'removed')),
    reason   TEXT
);

-- Wake idle workers: one notification per inserting statement, on a
-- channel named after the schema.
CREATE OR REPLACE FUNCTION notify_jobs_inserted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify(TG_TABLE_SCHEMA || '_jobs_inserted', '');
    RETURN NULL;
END;
$$;

DROP TRIGGER IF EXISTS jobs_inserted ON jobs;
CREATE TRIGGER jobs_inserted AFTER INSERT ON jobs
    FOR EACH STATEMENT EXECUTE FUNCTION notify_jobs_inserted();

-- Wake waiters: one notification per job reaching a terminal status.
CREATE OR REPLACE FUNCTION notify_jobs_finished() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify(TG_TABLE_SCHEMA || '_jobs_finished', NEW.id);
    RETURN NULL;
END;
$$;

DROP TRIGGER IF EXISTS jobs_finished ON jobs;
CREATE TRIGGER jobs_finished AFTER UPDATE OF status ON jobs
    FOR EACH ROW WHEN (NEW.status IN ('succeeded', 'failed', 'cancelled')
                       AND OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION notify_jobs_finished();

-- Enqueue from any language inside your own transaction:
--   SELECT * FROM boxcar.add_job('email.send', '{"to":"a@b.c"}');
-- Returns the job id and whether a live job with the same dedupe key
-- already existed. The payload must be a JSON object.
CREATE OR REPLACE FUNCTION add_job(
    job_type     TEXT,
    payload      JSONB,
    scope_type   TEXT DEFAULT NULL,
    scope_id     TEXT DEFAULT NULL,
    dedupe_key   TEXT DEFAULT NULL,
    max_attempts INTEGER DEFAULT 3,
    run_at       TIMESTAMPTZ DEFAULT NULL,
    priority     INTEGER DEFAULT 0,
    expires_at   TIMESTAMPTZ DEFAULT NULL
) RETURNS TABLE (id TEXT, deduplicated BOOLEAN)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    new_id TEXT := gen_random_uuid()::text;
    got    TEXT;
BEGIN
    IF job_type IS NULL OR job_type = '' THEN
        RAISE EXCEPTION 'boxcar.add_job: job_type must be non-empty';
    END IF;
    IF payload IS NULL OR jsonb_typeof(payload) <> 'object' THEN
        RAISE EXCEPTION 'boxcar.add_job(%): payload must be a JSON object', job_type;
    END IF;
    IF dedupe_key = '' THEN
        RAISE EXCEPTION 'boxcar.add_job(%): dedupe_key must be non-empty or NULL', job_type;
    END IF;
    IF (scope_type IS NULL) <> (scope_id IS NULL) OR scope_type = '' OR scope_id = '' THEN
        RAISE EXCEPTION 'boxcar.add_job(%): scope_type and scope_id must both be non-empty or both NULL', job_type;
    END IF;
    IF max_attempts IS NULL OR max_attempts < 1 THEN
        RAISE EXCEPTION 'boxcar.add_job(%): max_attempts must be a positive integer', job_type;
    END IF;
    LOOP
        INSERT INTO jobs AS j (id, job_type, payload, scope_type, scope_id, dedupe_key,
                               max_attempts, run_at, priority, expires_at)
        VALUES (new_id, add_job.job_type, add_job.payload::text, add_job.scope_type,
                add_job.scope_id, add_job.dedupe_key, add_job.max_attempts,
                COALESCE(add_job.run_at, now()), add_job.priority, add_job.expires_at)
        ON CONFLICT DO NOTHING
        RETURNING j.id INTO got;
        IF got IS NOT NULL THEN
            RETURN QUERY SELECT got, false;
            RETURN;
        END IF;
        SELECT j.id INTO got FROM jobs j
         WHERE j.dedupe_key = add_job.dedupe_key AND j.status IN ('pending', 'running');
        IF got IS NOT NULL THEN
            RETURN QUERY SELECT got, true;
            RETURN;
        END IF;
    END LOOP;
END;
$$;

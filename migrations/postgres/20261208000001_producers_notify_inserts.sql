-- Producers send the insert wake-up themselves; the statement trigger that
-- sent it is dropped. It read the inserted job types back from a
-- transition table in a PL/pgSQL query on every inserting statement: for a
-- one-row insert that query and the row capture cost ≈ 25 µs of a
-- ≈ 0.3 ms insert. boxcar's insert now names its types in the same
-- statement (`pg_notify` over the types it inserted) and add_job notifies
-- for the job it inserted (not for a deduplicated one). A row inserted by
-- hand, outside both, wakes no one: workers find it at their next poll.
DROP TRIGGER IF EXISTS jobs_inserted ON jobs;
DROP FUNCTION IF EXISTS notify_jobs_inserted();

CREATE OR REPLACE FUNCTION add_job(
    job_type     TEXT,
    payload      JSONB,
    scope_type   TEXT DEFAULT NULL,
    scope_id     TEXT DEFAULT NULL,
    dedupe_key   TEXT DEFAULT NULL,
    max_attempts INTEGER DEFAULT NULL,
    run_at       TIMESTAMPTZ DEFAULT NULL,
    priority     INTEGER DEFAULT 0,
    expires_at   TIMESTAMPTZ DEFAULT NULL,
    traceparent  TEXT DEFAULT NULL
) RETURNS TABLE (id TEXT, deduplicated BOOLEAN)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    new_id   TEXT := gen_random_uuid()::text;
    got      TEXT;
    control  CONSTANT TEXT := '[\x01-\x1f\x7f-\x9f]';
    budget   INTEGER;
BEGIN
    IF job_type IS NULL OR btrim(job_type) = '' THEN
        RAISE EXCEPTION 'boxcar.add_job: job_type must be non-empty';
    END IF;
    IF octet_length(job_type) > 255 THEN
        RAISE EXCEPTION 'boxcar.add_job: job_type is % bytes, over the 255-byte limit',
            octet_length(job_type);
    END IF;
    IF job_type ~ control THEN
        RAISE EXCEPTION 'boxcar.add_job: job_type contains a control character (NUL, escape, line break, ...); use printable text';
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
    IF octet_length(scope_type) > 255 THEN
        RAISE EXCEPTION 'boxcar.add_job(%): scope_type is % bytes, over the 255-byte limit',
            job_type, octet_length(scope_type);
    END IF;
    IF octet_length(scope_id) > 1024 THEN
        RAISE EXCEPTION 'boxcar.add_job(%): scope_id is % bytes, over the 1024-byte limit',
            job_type, octet_length(scope_id);
    END IF;
    IF octet_length(dedupe_key) > 1024 THEN
        RAISE EXCEPTION 'boxcar.add_job(%): dedupe_key is % bytes, over the 1024-byte limit',
            job_type, octet_length(dedupe_key);
    END IF;
    IF scope_type ~ control OR scope_id ~ control OR dedupe_key ~ control THEN
        RAISE EXCEPTION 'boxcar.add_job(%): scope_type, scope_id and dedupe_key must not contain a control character (NUL, escape, line break, ...); use printable text', job_type;
    END IF;
    IF left(dedupe_key, 7) = 'boxcar:' THEN
        RAISE EXCEPTION 'boxcar.add_job(%): dedupe keys beginning with `boxcar:` are reserved for the host (jobs enqueued by running handlers); choose another key', job_type;
    END IF;
    IF max_attempts < 1 THEN
        RAISE EXCEPTION 'boxcar.add_job(%): max_attempts must be a positive integer or NULL (the type''s default)', job_type;
    END IF;
    IF traceparent IS NOT NULL AND (
           traceparent !~ '^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$'
        OR substr(traceparent, 4, 32) = repeat('0', 32)
        OR substr(traceparent, 37, 16) = repeat('0', 16)) THEN
        RAISE EXCEPTION 'boxcar.add_job(%): traceparent is not a W3C trace context; expected 00-<32 hex trace id>-<16 hex parent id>-<2 hex flags> in lower case, ids not all zeros', job_type;
    END IF;
    budget := COALESCE(
        add_job.max_attempts,
        (SELECT d.max_attempts FROM deployed_types d WHERE d.job_type = add_job.job_type
          ORDER BY d.deployed_at DESC, d.host DESC LIMIT 1),
        3);
    LOOP
        INSERT INTO jobs AS j (id, job_type, payload, scope_type, scope_id, dedupe_key,
                               max_attempts, run_at, priority, expires_at, traceparent)
        VALUES (new_id, add_job.job_type, add_job.payload::text, add_job.scope_type,
                add_job.scope_id, add_job.dedupe_key, budget,
                COALESCE(add_job.run_at, now()), add_job.priority, add_job.expires_at,
                add_job.traceparent)
        ON CONFLICT DO NOTHING
        RETURNING j.id INTO got;
        IF got IS NOT NULL THEN
            PERFORM pg_notify(current_schema() || '_jobs_inserted', add_job.job_type);
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

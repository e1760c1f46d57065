-- A job carries its producer's W3C trace context (`traceparent`), so its
-- runs are traced as children of the producer's span. add_job takes it as a
-- last, optional argument and refuses a malformed one (version 00:
-- 00-<32 hex>-<16 hex>-<2 hex>, lower case, trace and parent ids not all
-- zeros). The previous add_job is dropped, not overloaded, so a call that
-- omits traceparent still resolves to exactly one function.
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS traceparent TEXT;

DROP FUNCTION IF EXISTS add_job(TEXT, JSONB, TEXT, TEXT, TEXT, INTEGER, TIMESTAMPTZ, INTEGER, TIMESTAMPTZ);

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

-- The scheduler asks for due schedules only (next_run_at <= now), so a
-- fleet with thousands of schedules reads the handful that are due.
CREATE INDEX IF NOT EXISTS boxcar_schedules_due ON boxcar_schedules (next_run_at)
    WHERE next_run_at IS NOT NULL;

-- A handler's terminal error may carry a machine-readable code and JSON
-- details (SPEC §9, issue 6); waiters read them back intact.
ALTER TABLE boxcar_jobs ADD COLUMN error_code TEXT;
ALTER TABLE boxcar_jobs ADD COLUMN error_details TEXT;

-- A handler's terminal error may carry a machine-readable code and JSON
-- details (SPEC §9, issue 6); waiters read them back intact.
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS error_code TEXT;
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS error_details TEXT;

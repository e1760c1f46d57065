-- The jobs list pages in (created_at, id) order after a keyset cursor.
-- Each filter it offers reads its page from index ranges whose equality
-- prefix is fixed, already in that order, and stops at the page's end:
-- none uses boxcar_jobs_created; parent and scope use their indexes,
-- widened here by the sort key (the scope index keeps status before it,
-- so a scope cancel still reads only the scope's live jobs; unscoped jobs,
-- which no scope query reads, stay out of it, so their status changes do
-- not touch it); status alone
-- and type (with or without status, one range per type and status) get
-- one new index each.
DROP INDEX IF EXISTS boxcar_jobs_parent;
CREATE INDEX IF NOT EXISTS boxcar_jobs_parent
    ON boxcar_jobs (parent_id, created_at, id) WHERE parent_id IS NOT NULL;
DROP INDEX IF EXISTS boxcar_jobs_scope;
CREATE INDEX IF NOT EXISTS boxcar_jobs_scope
    ON boxcar_jobs (scope_type, scope_id, status, created_at, id)
    WHERE scope_type IS NOT NULL;
CREATE INDEX IF NOT EXISTS boxcar_jobs_status_created
    ON boxcar_jobs (status, created_at, id);
CREATE INDEX IF NOT EXISTS boxcar_jobs_type_created
    ON boxcar_jobs (job_type, status, created_at, id);

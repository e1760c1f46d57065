-- Claims skip a flow parent while it has live children: an anti-join
-- `NOT EXISTS (child with parent_id = j.id AND status IN ('pending',
-- 'running'))` per candidate. Without table statistics (autovacuum off, or
-- behind after a burst) the planner answered it with a bitmap AND of
-- jobs_parent and jobs_finished's `status IN (…)` range — every live
-- job's entry, dead ones included, once per candidate: a claim took 5 s
-- with 100,000 dead rows, longer than the leases it handed out, and the
-- unguarded types stopped making progress (the 30-minute chaos run).
--
-- jobs_finished serves pruning and retention (`finished_at < …`), which
-- only read finished jobs: it now holds only those, so a plan for live
-- jobs can no longer wander into it (and claims and retries, which keep
-- `finished_at` empty, no longer update it).
-- jobs_live_children answers the anti-join exactly, from live children
-- alone.
DROP INDEX IF EXISTS jobs_finished;
CREATE INDEX IF NOT EXISTS jobs_finished
    ON jobs (status, finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS jobs_live_children
    ON jobs (parent_id)
    WHERE parent_id IS NOT NULL AND status IN ('pending', 'running');

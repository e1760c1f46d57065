-- Successes are announced by the statement that completes them; the
-- per-row trigger announces only failures and cancellations.
--
-- The engine completes jobs in batches (one UPDATE for many jobs); the
-- trigger ran a PL/pgSQL function and sent one notification per job of
-- each batch, and every host relayed each of them. The completing
-- statement now sends one notification per hundred jobs it completed,
-- their ids separated by spaces, on the same channel. Failures,
-- expiries and cancellations (many statements, each for few jobs) keep
-- the trigger. A job set to 'succeeded' by hand wakes no waiter: waiters
-- read their job again at least every 100 ms anyway.
DROP TRIGGER IF EXISTS jobs_finished ON jobs;
CREATE TRIGGER jobs_finished AFTER UPDATE OF status ON jobs
    FOR EACH ROW WHEN (NEW.status IN ('failed', 'cancelled')
                       AND OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION notify_jobs_finished();

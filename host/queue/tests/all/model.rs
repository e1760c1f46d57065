//! A checked model of the claim protocol: claims, leases, the fence on
//! every write after a claim, and the rescue of expired leases, explored
//! exhaustively (breadth first, every reachable state) by the `stateright`
//! model checker.
//!
//! # What is modelled
//! - The job row as the stores keep it: status, `lease_owner`, `attempts`
//!   (against `max_attempts`), and whether the lease is still live. Each
//!   step is one conditional write of the real stores:
//!   - `Claim` is the claim's `UPDATE … WHERE status = 'pending'`: running,
//!     owned by the worker, `attempts + 1`, a live lease;
//!   - `Renew` is `Dialect::renew` (fenced, and only on a live lease);
//!   - `Complete`, `Retry`, `GiveBack` (a retry that does not consume the
//!     attempt), `Fail` and `Release` are the batched completion,
//!     `Dialect::retry`, `Dialect::fail` and `Dialect::release`, each
//!     fenced on `status = 'running' AND lease_owner = worker AND attempts
//!     = the claim's attempt` — the fence;
//!   - `Expire` is time passing beyond `lease_expires_at` while the
//!     holder is paused, slow, cut off or dead;
//!   - `Rescue` is the rescue policy: an expired lease goes back to
//!     pending with the attempt kept, or fails when no attempt is left.
//! - Workers (three) that claim any pending job, also one they still run
//!   an older claim of (the case the attempt in the fence exists for), run
//!   several jobs at once, write each run's one outcome (or a renewal),
//!   crash (their runs vanish; the worker comes back under the same id and
//!   claims again), and pause: a paused run is one whose lease expires
//!   before it writes, and that writes late.
//! - The engine's choice between a retry and a failure: a consuming retry
//!   of the last attempt is a failure.
//!
//! # What is abstracted
//! - Time: a lease is live or expired; `Expire` may happen at any moment,
//!   which covers every length of pause, renewal interval and clock skew.
//! - Payloads, results, backoff delays (a pending job is due at once),
//!   guards (scopes, pools, rates), priorities, cancels, flows, progress
//!   writes (fenced exactly like a renewal without the live-lease check),
//!   the reconcile pass (it only aborts local runs, which a crash covers),
//!   the admin retry of failed jobs (it resets `attempts` to 0 and is out
//!   of the engine's protocol), and batching (a batch is one write per
//!   row).
//! - Ghost state that no store keeps, for the properties: whether each run
//!   still holds the job's current claim, whether a stale write ever
//!   landed or was refused, and how often each job succeeded.
//!
//! # Properties
//! - fence safety: a write from a run whose claim ended (its lease expired
//!   and the job was rescued, re-claimed — by any worker, itself included —
//!   finished or released) never lands;
//! - one claim holder: at most one run per job passes the fence, so a job
//!   never runs under two live leases that could both write;
//! - the owner is never refused: the run holding the current claim always
//!   passes the fence (the fence is not too strict);
//! - no stuck job: every running job has a live lease or can be rescued,
//!   and every path that ends, ends with every job finished (`eventually`;
//!   stateright checks it on terminating paths, not around cycles);
//! - a job succeeds at most once;
//! - reachability (`sometimes`): a stale write is refused, and every job
//!   succeeds.
//!
//! With `fence_on_attempt: false` the fence is the owner alone, as it was:
//! the checker then finds a worker that re-claimed a job completing the new
//! claim with its old run's outcome.
//!
//! Run it with `cargo test -p boxcar-queue --test all -- model`.

use std::time::{Duration, Instant};

use stateright::{Checker, Model, Property};

/// Jobs in the model.
const JOBS: usize = 2;
/// Workers in the model.
const WORKERS: u8 = 3;
/// Every job's attempt budget.
const MAX_ATTEMPTS: u8 = 2;

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
enum Status {
    Pending,
    Running,
    Succeeded,
    Failed,
}

/// A job row as the store keeps it (plus one ghost counter).
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct Row {
    status: Status,
    lease_owner: Option<u8>,
    attempts: u8,
    lease_live: bool,
    /// Ghost: completions that landed.
    successes: u8,
}

/// One run a worker holds: the claim it was started by.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
struct Run {
    worker: u8,
    job: usize,
    /// The claim's attempt (what the run passes to its fenced writes).
    attempt: u8,
    /// Ghost: the run still holds the job's current claim.
    current: bool,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct World {
    rows: Vec<Row>,
    /// Runs in flight, sorted (so equal sets are equal states).
    runs: Vec<Run>,
    /// Ghost: a write of a run that no longer held its claim landed.
    stale_write_landed: bool,
    /// Ghost: a write of a run that no longer held its claim was refused.
    stale_write_refused: bool,
    /// Ghost: a write of the current claim's run was refused.
    owner_refused: bool,
}

/// A run's write after its claim.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
enum Write {
    Renew,
    Complete,
    Retry,
    GiveBack,
    Fail,
    Release,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
enum Step {
    Claim { worker: u8, job: usize },
    Write { run: Run, write: Write },
    Crash { worker: u8 },
    Expire { job: usize },
    Rescue { job: usize },
}

/// The protocol under check.
#[derive(Clone, Debug)]
struct ClaimProtocol {
    /// The fence includes the claim's attempt (the real protocol); `false`
    /// fences on the owner alone.
    fence_on_attempt: bool,
}

impl ClaimProtocol {
    /// Whether `run`'s fenced write matches `row`.
    fn fence(&self, row: &Row, run: &Run) -> bool {
        row.status == Status::Running
            && row.lease_owner == Some(run.worker)
            && (!self.fence_on_attempt || row.attempts == run.attempt)
    }

    /// The write's effect on its row when the fence held.
    fn apply(write: Write, row: &mut Row) {
        let clear_lease = |row: &mut Row| {
            row.lease_owner = None;
            row.lease_live = false;
        };
        match write {
            Write::Renew => {}
            Write::Complete => {
                row.status = Status::Succeeded;
                row.successes += 1;
                clear_lease(row);
            }
            Write::Retry => {
                row.status = Status::Pending;
                clear_lease(row);
            }
            Write::GiveBack | Write::Release => {
                row.status = Status::Pending;
                row.attempts = row.attempts.saturating_sub(1);
                clear_lease(row);
            }
            Write::Fail => {
                row.status = Status::Failed;
                clear_lease(row);
            }
        }
    }
}

/// Every run of `job` no longer holds the current claim.
fn end_claims(world: &mut World, job: usize) {
    for run in world.runs.iter_mut().filter(|r| r.job == job) {
        run.current = false;
    }
}

fn finished(row: &Row) -> bool {
    matches!(row.status, Status::Succeeded | Status::Failed)
}

impl Model for ClaimProtocol {
    type State = World;
    type Action = Step;

    fn init_states(&self) -> Vec<World> {
        let row = Row {
            status: Status::Pending,
            lease_owner: None,
            attempts: 0,
            lease_live: false,
            successes: 0,
        };
        vec![World {
            rows: vec![row; JOBS],
            runs: Vec::new(),
            stale_write_landed: false,
            stale_write_refused: false,
            owner_refused: false,
        }]
    }

    fn actions(&self, world: &World, actions: &mut Vec<Step>) {
        for (job, row) in world.rows.iter().enumerate() {
            match row.status {
                Status::Pending => {
                    for worker in 0..WORKERS {
                        actions.push(Step::Claim { worker, job });
                    }
                }
                Status::Running if row.lease_live => actions.push(Step::Expire { job }),
                Status::Running => actions.push(Step::Rescue { job }),
                Status::Succeeded | Status::Failed => {}
            }
        }
        for run in &world.runs {
            let mut writes = vec![
                Write::Renew,
                Write::Complete,
                Write::GiveBack,
                Write::Fail,
                Write::Release,
            ];
            // The engine fails a consuming retry of the last attempt.
            if run.attempt < MAX_ATTEMPTS {
                writes.push(Write::Retry);
            }
            for write in writes {
                actions.push(Step::Write {
                    run: run.clone(),
                    write,
                });
            }
        }
        let mut crashing: Vec<u8> = world.runs.iter().map(|r| r.worker).collect();
        crashing.dedup();
        for worker in crashing {
            actions.push(Step::Crash { worker });
        }
    }

    fn next_state(&self, world: &World, step: Step) -> Option<World> {
        let mut next = world.clone();
        match step {
            Step::Claim { worker, job } => {
                let row = &mut next.rows[job];
                row.status = Status::Running;
                row.lease_owner = Some(worker);
                row.attempts += 1;
                row.lease_live = true;
                let attempt = row.attempts;
                end_claims(&mut next, job);
                next.runs.push(Run {
                    worker,
                    job,
                    attempt,
                    current: true,
                });
            }
            Step::Write { run, write } => {
                let at = next.runs.iter().position(|r| *r == run)?;
                let row = &next.rows[run.job];
                let held = self.fence(row, &run) && (write != Write::Renew || row.lease_live);
                if held {
                    next.stale_write_landed |= !run.current;
                    Self::apply(write, &mut next.rows[run.job]);
                } else {
                    next.stale_write_refused |= !run.current;
                    next.owner_refused |= run.current && write != Write::Renew;
                }
                if held && write == Write::Renew {
                    next.runs.sort();
                    return Some(next);
                }
                // The run ends: it wrote its outcome, or (a refused
                // renewal) it aborts as having lost its lease.
                next.runs.remove(at);
                if held {
                    end_claims(&mut next, run.job);
                }
            }
            Step::Crash { worker } => next.runs.retain(|r| r.worker != worker),
            Step::Expire { job } => next.rows[job].lease_live = false,
            Step::Rescue { job } => {
                let row = &mut next.rows[job];
                row.status = if row.attempts < MAX_ATTEMPTS {
                    Status::Pending
                } else {
                    Status::Failed
                };
                row.lease_owner = None;
                end_claims(&mut next, job);
            }
        }
        next.runs.sort();
        Some(next)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(
                "fence safety: a stale write never lands",
                |_: &Self, w: &World| !w.stale_write_landed,
            ),
            Property::always("one claim holder per job", |m: &Self, w: &World| {
                w.rows.iter().enumerate().all(|(job, row)| {
                    let holders = w.runs.iter().filter(|r| r.job == job && m.fence(row, r));
                    holders.count() <= 1
                })
            }),
            Property::always("the owner is never refused", |_: &Self, w: &World| {
                !w.owner_refused
            }),
            Property::always(
                "no job stuck running without a live lease",
                |_: &Self, w: &World| {
                    w.rows
                        .iter()
                        .all(|row| row.status != Status::Running || row.lease_owner.is_some())
                },
            ),
            Property::always("a job succeeds at most once", |_: &Self, w: &World| {
                w.rows.iter().all(|row| row.successes <= 1)
            }),
            Property::eventually("every job finishes", |_: &Self, w: &World| {
                w.rows.iter().all(finished)
            }),
            Property::sometimes("a stale write is refused", |_: &Self, w: &World| {
                w.stale_write_refused
            }),
            Property::sometimes("every job succeeds", |_: &Self, w: &World| {
                w.rows.iter().all(|row| row.status == Status::Succeeded)
            }),
        ]
    }
}

#[test]
fn the_claim_protocol_keeps_its_properties_in_every_reachable_state() {
    let started = Instant::now();
    let checker = ClaimProtocol {
        fence_on_attempt: true,
    }
    .checker()
    .threads(2)
    .spawn_bfs()
    .join();
    checker.assert_properties();
    assert!(checker.is_done(), "every reachable state was visited");
    let elapsed = started.elapsed();
    eprintln!(
        "claim protocol model: {} workers, {JOBS} jobs, {MAX_ATTEMPTS} attempts each: {} unique states, depth {}, {elapsed:?}",
        WORKERS,
        checker.unique_state_count(),
        checker.max_depth()
    );
    assert!(
        checker.unique_state_count() > 1000,
        "the model explores the protocol, not a handful of states"
    );
    assert!(elapsed < Duration::from_secs(60), "took {elapsed:?}");
}

#[test]
fn an_owner_only_fence_lets_a_reclaiming_worker_complete_with_its_old_run() {
    let checker = ClaimProtocol {
        fence_on_attempt: false,
    }
    .checker()
    .spawn_bfs()
    .join();
    let path = checker
        .discovery("fence safety: a stale write never lands")
        .expect("the checker finds the stale write an owner-only fence lets through");
    let steps = path.into_actions();
    let claims_of_the_job = steps
        .iter()
        .filter(|s| matches!(s, Step::Claim { .. }))
        .count();
    assert!(
        claims_of_the_job >= 2,
        "the counterexample re-claims the job: {steps:?}"
    );
    assert!(
        checker.discovery("one claim holder per job").is_some(),
        "two runs of one worker both pass an owner-only fence"
    );
}

//! Policy once, stores thin: the decisions every store makes — which due
//! job a guarded claim admits ([`guards`]), what becomes of a job whose
//! lease expired ([`rescue`]), how declared schedules change the stored
//! ones ([`schedules`]) — written once here, over small traits of
//! primitive queries that each backend implements.
//!
//! Why primitives and not SQL generated from one description: a decision
//! must run *inside* the store's transaction, because that transaction is
//! what makes it safe across processes — SQLite's `BEGIN IMMEDIATE` holds
//! the database write lock from the first read to the commit, Postgres
//! holds the guard rows (locked in sorted key order) and the candidate rows
//! (`FOR UPDATE SKIP LOCKED`) until the commit. So each policy is a generic
//! `async fn` over a trait that the backend's transaction handle
//! implements: the backend opens and commits the transaction, and in
//! between the policy asks primitive questions ("is this scope busy?",
//! "which of these types hold live leases?", "claim this one row") that are
//! one short statement each. Generated SQL would have to encode the
//! decision's control flow (stop at the first full pool, skip a busy scope
//! but try the next, spend the rate budget only when the claim took) in two
//! dialects, and the memory store could not share it at all; with
//! primitives the memory store implements the same traits over its state
//! (under its one mutex) and runs the very same decision code.
//!
//! The traits use `impl Future + Send` returns, so a policy instantiated
//! with a concrete backend is a plain, unboxed future that stays `Send`.

mod guard_cache;
pub(crate) mod guards;
pub(crate) mod rescue;
pub(crate) mod schedules;

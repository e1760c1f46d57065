//! Parameters and rows of the deployed-types methods of the
//! [`JobStore`](super::JobStore) port: which host serves which job type,
//! with the job defaults of the manifest it serves it with.
//!
//! A row per (job type, host). A host writes its whole served set at once
//! ([`RecordDeployedTypes`]) on every deploy and undeploy and as its
//! heartbeat, so the table is state, not history: a type deployed once stays
//! in it however many other handler events follow. What "known" means
//! (some host seen recently) is decided above the store, in
//! `crate::deployed`.
//!
//! # Job defaults are resolved at enqueue
//!
//! A job's attempt budget is fixed when its row is written, by one rule
//! every producer follows: the producer's own `max_attempts`; else the
//! manifest of the type as the enqueueing process serves it (a host
//! enqueueing for itself); else the `max_attempts` of the type's newest
//! deploy in this table (latest `deployed_at`, ties to the greater host),
//! which the store reads inside the insert statement itself; else the
//! producer's default (`QueueOptions::default_max_attempts`, 3). The
//! Postgres SQL function `add_job` applies the same subquery with the
//! built-in default 3, so the Rust API, `boxcar enqueue`, the HTTP API of
//! any host, the scheduler, a running handler's enqueues and SQL producers
//! make the same job.
//!
//! Why at enqueue and not at claim: the row then holds its real budget from
//! the start, so everything that reads `max_attempts` — inspection
//! (`attempts/max_attempts`), the handler's "last try" check, the rescue of
//! an expired lease on whichever host runs it, retry-failed — keeps reading
//! one column, with no "not yet resolved" state and no second lookup on the
//! engine's paths; and the SQL function can follow the rule with the same
//! subquery, in the caller's transaction. The lookup costs no round trip
//! (it is part of the insert) and uses the table's primary key. The price:
//! a manifest's new `max_attempts` applies to jobs enqueued after its
//! deploy (as an explicit value would), and a job enqueued before its type
//! was ever deployed, or after every row of it was forgotten, gets the
//! producer's default. A producer on the memory store sees only the rows
//! recorded in that store (tests that record none get the registry's or
//! the queue's default).
//!
//! Invariants every store keeps:
//! - `record_deployed_types` is one transaction: the host's rows become
//!   exactly `types` (new ones inserted, dropped ones deleted, the rest
//!   refreshed); `seen_at` is the store's now for every row written;
//!   `deployed_at` moves only when a row is new or its version or defaults
//!   changed, so a heartbeat never makes a deploy look newer; rows of any
//!   host not seen for `forget_after` are deleted.
//! - Times are the store's clock (the database's `now()` on Postgres).

use std::time::Duration;

use chrono::{DateTime, Utc};

/// One job type a host serves, with its manifest's job defaults.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeployedType {
    /// The job type.
    pub job_type: String,
    /// The handler version serving it (the module digest).
    pub version: String,
    /// The manifest's `max_attempts`, when it sets one.
    pub max_attempts: Option<u32>,
}

/// Make the stored rows of `host` equal to `types` (deploy, undeploy and
/// heartbeat are all this one write).
#[derive(Clone, Debug)]
pub struct RecordDeployedTypes {
    /// The host (its worker id).
    pub host: String,
    /// Everything the host serves now.
    pub types: Vec<DeployedType>,
    /// Rows of any host not seen for this long are deleted (hosts that
    /// stopped without undeploying).
    pub forget_after: Duration,
}

/// One stored row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeployedTypeRecord {
    /// The host serving it.
    pub host: String,
    /// What it serves, with which defaults.
    pub deployed: DeployedType,
    /// When this host started serving this version with these defaults.
    pub deployed_at: DateTime<Utc>,
    /// The host's last record of it (deploy or heartbeat).
    pub seen_at: DateTime<Utc>,
}

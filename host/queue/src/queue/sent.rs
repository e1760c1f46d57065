//! What an enqueue keeps of its batch while the store owns it: the job
//! types to wake afterwards, and which type named each parent (to word a
//! refused parent). Taken before the batch moves, so it is never copied.

use std::collections::BTreeSet;

use super::QueueError;
use crate::store::{InsertJob, StoreError};
use crate::validate::EnqueueError;

/// The types and parents of a batch sent to the store.
pub(super) struct Sent {
    pub(super) types: Vec<String>,
    parents: Vec<(String, String)>,
}

impl Sent {
    pub(super) fn of(jobs: &[InsertJob]) -> Self {
        let types: BTreeSet<&str> = jobs.iter().map(|j| j.job_type.as_str()).collect();
        let parents = jobs
            .iter()
            .filter_map(|j| Some((j.parent_id.clone()?, j.job_type.clone())))
            .collect();
        Self {
            types: types.into_iter().map(str::to_string).collect(),
            parents,
        }
    }

    /// The store's error, a missing parent worded with the type naming it.
    pub(super) fn error(&self, e: StoreError) -> QueueError {
        match e {
            StoreError::UnknownParent(p) => QueueError::Enqueue(EnqueueError::UnknownParent {
                job_type: self
                    .parents
                    .iter()
                    .find(|(parent, _)| *parent == p)
                    .map(|(_, job_type)| job_type.clone())
                    .unwrap_or_default(),
                parent_id: p,
            }),
            other => QueueError::Store(other),
        }
    }
}

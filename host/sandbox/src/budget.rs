//! Per-handler shares of the instance pool.
//!
//! Every handler that runs jobs reserves the instances it may use at once
//! (its concurrency); the reservations together never exceed the pool, so
//! one handler cannot take the instances another was promised. Without
//! pooling there is no fixed pool and every reservation fits.
//!
//! Invariants: a handler holds at most one reservation (a new one replaces
//! it, checked against the others only); the sum of reservations is at most
//! the capacity; a replacement that is not kept puts the previous one back.

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
};

use crate::SandboxError;

/// The reservations against a pool of `capacity` instances.
pub(crate) struct PoolBudget {
    /// `None` without pooling: nothing to run out of.
    capacity: Option<u32>,
    reserved: Mutex<BTreeMap<String, u32>>,
}

impl PoolBudget {
    pub(crate) fn new(capacity: Option<u32>) -> Self {
        Self {
            capacity,
            reserved: Mutex::default(),
        }
    }

    /// Reserves `instances` for `handler`, replacing what it held, which is
    /// returned.
    pub(crate) fn reserve(
        &self,
        handler: &str,
        instances: u32,
    ) -> Result<Option<u32>, SandboxError> {
        let mut reserved = self.reserved.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(capacity) = self.capacity {
            let others: u64 = reserved
                .iter()
                .filter(|(name, _)| name.as_str() != handler)
                .map(|(_, n)| u64::from(*n))
                .sum();
            let free = u64::from(capacity).saturating_sub(others);
            if u64::from(instances) > free {
                return Err(SandboxError::PoolFull {
                    handler: handler.to_string(),
                    asked: instances,
                    free: u32::try_from(free).unwrap_or(u32::MAX),
                    capacity,
                });
            }
        }
        Ok(reserved.insert(handler.to_string(), instances))
    }

    /// Sets `handler`'s reservation back to `previous` (none: freed).
    fn restore(&self, handler: &str, previous: Option<u32>) {
        let mut reserved = self.reserved.lock().unwrap_or_else(|p| p.into_inner());
        match previous {
            Some(n) => reserved.insert(handler.to_string(), n),
            None => reserved.remove(handler),
        };
    }

    /// Frees what `handler` reserved, if anything.
    pub(crate) fn release(&self, handler: &str) {
        self.restore(handler, None);
    }

    /// Instances reserved by all handlers.
    pub(crate) fn reserved(&self) -> u64 {
        self.reserved
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .map(|n| u64::from(*n))
            .sum()
    }
}

/// A reservation made by
/// [`Sandbox::reserve_instances`](crate::Sandbox::reserve_instances).
/// Dropping it without [`InstanceReservation::keep`] puts back what the
/// handler had reserved before (e.g. when its deploy fails afterwards).
#[must_use = "dropping the reservation undoes it; call keep()"]
pub struct InstanceReservation {
    budget: Arc<PoolBudget>,
    handler: String,
    previous: Option<Option<u32>>,
}

impl InstanceReservation {
    pub(crate) fn new(budget: Arc<PoolBudget>, handler: &str, previous: Option<u32>) -> Self {
        Self {
            budget,
            handler: handler.to_string(),
            previous: Some(previous),
        }
    }

    /// Keeps the reservation until the handler is released or reserves
    /// again.
    pub fn keep(mut self) {
        self.previous = None;
    }
}

impl Drop for InstanceReservation {
    fn drop(&mut self) {
        if let Some(previous) = self.previous.take() {
            self.budget.restore(&self.handler, previous);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_fit_the_pool_and_replace_per_handler() {
        let budget = PoolBudget::new(Some(4));
        assert_eq!(budget.reserve("a", 2).ok(), Some(None));
        assert!(budget.reserve("b", 2).is_ok());
        let refused = budget.reserve("c", 1).expect_err("pool is full");
        let text = refused.to_string();
        assert!(
            text.contains("pool_instances") && text.contains("concurrency"),
            "{text}"
        );
        assert!(budget.reserve("b", 1).is_ok(), "a replacement counts once");
        assert!(budget.reserve("c", 1).is_ok());
        assert!(budget.reserve("a", 3).is_err());
        budget.release("a");
        assert!(budget.reserve("d", 2).is_ok());
        assert_eq!(budget.reserved(), 4);
    }

    #[test]
    fn a_reservation_not_kept_puts_the_previous_back() {
        let budget = Arc::new(PoolBudget::new(Some(10)));
        let previous = budget.reserve("a", 2).expect("fits");
        InstanceReservation::new(Arc::clone(&budget), "a", previous).keep();
        let previous = budget.reserve("a", 8).expect("fits");
        drop(InstanceReservation::new(Arc::clone(&budget), "a", previous));
        assert_eq!(budget.reserved(), 2);
        let previous = budget.reserve("b", 3).expect("fits");
        drop(InstanceReservation::new(Arc::clone(&budget), "b", previous));
        assert_eq!(budget.reserved(), 2, "a new handler's reservation is freed");
    }

    #[test]
    fn without_a_pool_everything_fits() {
        let budget = PoolBudget::new(None);
        assert!(budget.reserve("a", u32::MAX).is_ok());
        assert!(budget.reserve("b", u32::MAX).is_ok());
    }
}

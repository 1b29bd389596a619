//! [`PolicySlot`]: the admission policy of a dynamic handler's stage, replaceable
//! while the stage runs (a configuration reload changes a target or the policy
//! without rebuilding the stage, so no queued or running request is lost).
//!
//! A stage is built with its policy fixed; the slot is that policy and delegates
//! every call to the policy it holds now. An empty slot admits everything and says
//! `none` (the admin view shows admission off). A new policy starts from its own
//! initial state (its rate, its limit), as it would at start.

use std::sync::Arc;
use std::time::Instant;

use parking_lot::RwLock;
use seda::admission::{AdmissionPolicy, AdmissionState, Completion, Offer};

/// See the module docs.
#[derive(Debug, Default)]
pub(crate) struct PolicySlot {
    inner: RwLock<Option<Arc<dyn AdmissionPolicy>>>,
}

impl PolicySlot {
    pub(crate) fn new(policy: Option<Arc<dyn AdmissionPolicy>>) -> Self {
        PolicySlot {
            inner: RwLock::new(policy),
        }
    }

    /// Puts `policy` in the slot; decisions from now on are its.
    pub(crate) fn replace(&self, policy: Option<Arc<dyn AdmissionPolicy>>) {
        *self.inner.write() = policy;
    }

    fn current(&self) -> Option<Arc<dyn AdmissionPolicy>> {
        self.inner.read().clone()
    }
}

impl AdmissionPolicy for PolicySlot {
    fn name(&self) -> &'static str {
        self.inner.read().as_ref().map_or("none", |p| p.name())
    }

    fn admit(&self, offer: &Offer) -> bool {
        match &*self.inner.read() {
            Some(p) => p.admit(offer),
            None => true,
        }
    }

    fn on_complete(&self, done: &Completion) {
        if let Some(p) = &*self.inner.read() {
            p.on_complete(done);
        }
    }

    fn on_tick(&self, now: Instant) {
        // Not under the lock: a tick may take a while, and a reload must not wait.
        if let Some(p) = self.current() {
            p.on_tick(now);
        }
    }

    fn state(&self) -> AdmissionState {
        match self.current() {
            Some(p) => p.state(),
            None => AdmissionState::named("none"),
        }
    }
}

#[cfg(test)]
mod tests {
    use seda::admission::QueueThreshold;

    use super::*;

    fn offer(queue_len: usize) -> Offer {
        Offer {
            class: 0,
            queue_len,
            in_flight: queue_len,
            capacity: 1000,
            now: Instant::now(),
        }
    }

    #[test]
    fn an_empty_slot_admits_and_a_replaced_policy_decides() {
        let slot = PolicySlot::new(None);
        assert!(slot.admit(&offer(500)));
        assert_eq!(slot.state().policy, "none");
        slot.replace(Some(Arc::new(QueueThreshold::new(10))));
        assert!(!slot.admit(&offer(500)), "the new policy refuses");
        assert!(slot.admit(&offer(5)));
        assert_eq!(slot.name(), "queue-threshold");
        slot.replace(None);
        assert!(slot.admit(&offer(500)));
    }
}

//! The figures of the open-files check a `max_connections` must pass (how they are
//! found: `descriptors.rs`). A leaf: the configuration's error type names it.

use std::fmt;

/// How the open-files limit is shared (`descriptors.rs`): the figures of the check a
/// `max_connections` must pass.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct DescriptorBudget {
    /// The open-files limit (`ulimit -n`, raised to the hard limit at start).
    pub limit: u64,
    /// Descriptors open once the listeners were bound.
    pub held: u64,
    /// Descriptors kept free beside the connections.
    pub reserve: u64,
    /// The `max_connections` asked for (per listener).
    pub wanted: u64,
    /// Listeners that each take up to `wanted` connections (2 with a TLS listener).
    pub listeners: u64,
}

impl DescriptorBudget {
    /// Connections the limit leaves room for, all listeners together.
    pub fn connections(&self) -> u64 {
        self.limit
            .saturating_sub(self.held)
            .saturating_sub(self.reserve)
    }

    /// The largest `max_connections` that fits (per listener).
    pub fn per_listener(&self) -> u64 {
        self.connections() / self.listeners.max(1)
    }

    /// Whether `wanted` connections on each listener fit.
    pub fn fits(&self) -> bool {
        self.wanted <= self.per_listener()
    }

    /// The smallest limit under which `wanted` connections on each listener fit.
    pub fn limit_needed(&self) -> u64 {
        self.held
            .saturating_add(self.reserve)
            .saturating_add(self.wanted.saturating_mul(self.listeners.max(1)))
    }
}

impl fmt::Display for DescriptorBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let per = if self.listeners > 1 {
            format!(" on each of {} listeners", self.listeners)
        } else {
            String::new()
        };
        write!(
            f,
            "max_connections {}{per} needs more open files than this process may have: \
             the limit is {} (`ulimit -n`), the server holds {} descriptors (listeners, \
             event loops) and keeps {} free (files it opens, its admin listener, proxied \
             connections, refusals at the cap), which leaves room for {} connections; \
             raise `ulimit -n` to at least {} or lower max_connections to {}",
            self.wanted,
            self.limit,
            self.held,
            self.reserve,
            self.connections(),
            self.limit_needed(),
            self.per_listener()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_says_what_fits_and_what_to_change() {
        let b = DescriptorBudget {
            limit: 256,
            held: 11,
            reserve: 90,
            wanted: 256,
            listeners: 1,
        };
        assert_eq!(b.connections(), 155);
        assert!(!b.fits());
        assert_eq!(b.limit_needed(), 357);
        let text = b.to_string();
        for part in ["256", "11", "90", "155", "357", "ulimit -n"] {
            assert!(text.contains(part), "{part}: {text}");
        }
        assert!(
            DescriptorBudget {
                wanted: 155,
                ..b.clone()
            }
            .fits()
        );
        // Two listeners share the room: 77 each.
        let two = DescriptorBudget {
            wanted: 78,
            listeners: 2,
            ..b.clone()
        };
        assert_eq!(two.per_listener(), 77);
        assert!(!two.fits());
        assert_eq!(two.limit_needed(), 11 + 90 + 156);
        assert!(two.to_string().contains("on each of 2 listeners"), "{two}");
        assert!(two.to_string().contains("max_connections to 77"), "{two}");
        let none = DescriptorBudget { limit: 50, ..b };
        assert_eq!(none.connections(), 0);
    }
}

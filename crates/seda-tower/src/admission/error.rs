//! The error a refused request gets.

use std::fmt;
use std::time::Duration;

use seda::Class;

/// Which check refused a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Refusal {
    /// The admission policy said no (no token in the class's bucket, concurrency
    /// limit reached, standing queue).
    Policy,
    /// The layer's hard cap on requests in flight was reached
    /// ([`AdmissionBuilder::max_in_flight`](super::AdmissionBuilder::max_in_flight)).
    InFlightLimit,
}

/// A request refused by admission control: the service is overloaded for its class.
///
/// It carries the class, which check refused it, and the hint for the client's
/// `Retry-After`. For services whose error type is `From<Overloaded>` (a
/// `tower::BoxError` is), [`RejectWithError`](super::RejectWithError) returns it as the
/// error; it can be found again with `err.downcast_ref::<Overloaded>()`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Overloaded {
    class: Class,
    refusal: Refusal,
    retry_after: Duration,
}

impl Overloaded {
    pub(crate) fn new(class: Class, refusal: Refusal, retry_after: Duration) -> Self {
        Self {
            class,
            refusal,
            retry_after,
        }
    }

    /// Class of the refused request.
    pub fn class(&self) -> Class {
        self.class
    }

    /// Which check refused it.
    pub fn refusal(&self) -> Refusal {
        self.refusal
    }

    /// Whether the admission policy refused it.
    pub fn is_policy(&self) -> bool {
        self.refusal == Refusal::Policy
    }

    /// Whether the layer's cap on requests in flight refused it.
    pub fn is_in_flight_limit(&self) -> bool {
        self.refusal == Refusal::InFlightLimit
    }

    /// How long the client should wait before retrying (the layer's setting).
    pub fn retry_after(&self) -> Duration {
        self.retry_after
    }

    /// [`retry_after`](Self::retry_after) in whole seconds, rounded up, as the
    /// `Retry-After` header's `delay-seconds` (RFC 9110 10.2.3) carries it.
    pub fn retry_after_secs(&self) -> u64 {
        let d = self.retry_after;
        d.as_secs() + u64::from(d.subsec_nanos() > 0)
    }
}

impl fmt::Display for Overloaded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let by = match self.refusal {
            Refusal::Policy => "admission policy",
            Refusal::InFlightLimit => "in-flight limit",
        };
        write!(
            f,
            "service overloaded: request of class {} refused by the {by}; retry after {} s",
            self.class,
            self.retry_after_secs()
        )
    }
}

impl std::error::Error for Overloaded {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_rounds_up_to_whole_seconds() {
        let o = |ms| Overloaded::new(0, Refusal::Policy, Duration::from_millis(ms));
        assert_eq!(o(0).retry_after_secs(), 0);
        assert_eq!(o(1).retry_after_secs(), 1);
        assert_eq!(o(1000).retry_after_secs(), 1);
        assert_eq!(o(1500).retry_after_secs(), 2);
    }

    #[test]
    fn message_names_class_and_check() {
        let o = Overloaded::new(3, Refusal::InFlightLimit, Duration::from_secs(2));
        let msg = o.to_string();
        assert!(
            msg.contains("class 3") && msg.contains("in-flight limit"),
            "{msg}"
        );
        assert!(o.is_in_flight_limit() && !o.is_policy());
    }
}

//! The admission middleware, in tower's module shape: `layer` (the layer, its builder
//! and the contract), `service`, `future` (the permit-holding response future), `error`
//! (`Overloaded`); plus `classify` (request -> class), `reject` (refusal -> 503 or
//! error), `gate` (shared state, permits, lazy ticks) and `handle` (stats, tickers).

mod classify;
mod error;
mod future;
mod gate;
mod handle;
mod layer;
mod reject;
mod service;

pub use classify::{Born, ClassExtension, ClassHeader, Classify, RequestClass, SingleClass};
pub use error::{Overloaded, Refusal};
pub use future::ResponseFuture;
pub use handle::{AdmissionHandle, AdmissionStats, Ticker};
pub use layer::{AdmissionBuilder, AdmissionLayer};
pub use reject::{Reject, RejectWithError, ServiceUnavailable, service_unavailable};
pub use service::Admission;

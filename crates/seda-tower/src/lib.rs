//! # seda-tower: SEDA's adaptive admission control as a tower `Layer`
//!
//! [`AdmissionLayer`] puts one of `seda`'s admission policies in front of any
//! [`tower_service::Service`], an axum router or a hyper service: the USITS'03
//! response-time controller that holds the 90th-percentile response time near a
//! target by admitting fewer requests (section 3.2), its multiclass form with a target
//! per class that cuts lower classes first (section 3.3), or CoDel, gradient and AIMD
//! concurrency limits. A refused request never reaches the inner service: an HTTP
//! service answers it with `503 Service Unavailable` and `Retry-After`
//! ([`ServiceUnavailable`]), any other service fails it with [`Overloaded`]
//! ([`RejectWithError`]).
//!
//! ```
//! use std::time::Duration;
//! use seda::admission::MulticlassPolicy;
//! use seda::admission::MulticlassConfig;
//! use seda_tower::{AdmissionLayer, ClassHeader, ServiceUnavailable};
//!
//! // p90 under 500 ms for class 0, under 200 ms for class 1 (e.g. logged-in users).
//! let cfg = MulticlassConfig::with_target(Duration::from_millis(500))
//!     .class_target(1, Duration::from_millis(200));
//! let layer = AdmissionLayer::builder(MulticlassPolicy::new(cfg).unwrap())
//!     .classify(ClassHeader::new("x-class").max_class(1))
//!     .reject_with(ServiceUnavailable)
//!     .build();
//! let stats = layer.handle(); // admitted, refused, in flight, the policy's state
//! // axum: Router::new().route(...).layer(layer)
//! # let _ = (layer, stats);
//! ```
//!
//! With axum, `Router::layer` puts every route under one controller (one stage), a
//! layer per route gives each its own. With hyper 1, build the tower service and adapt
//! it with `hyper_util::service::TowerToHyperService`. `examples/axum.rs` runs a slow
//! route with two classes under load.
//!
//! The contract (what is measured, when a request is refused, what happens on drop
//! and in `poll_ready`, how the policy's clock is driven without a runtime) is in the
//! docs of [`AdmissionLayer`].

#![forbid(unsafe_code)]

mod admission;

pub use admission::{
    Admission, AdmissionBuilder, AdmissionHandle, AdmissionLayer, AdmissionStats, Born,
    ClassExtension, ClassHeader, Classify, Overloaded, Refusal, Reject, RejectWithError,
    RequestClass, ResponseFuture, ServiceUnavailable, SingleClass, Ticker, service_unavailable,
};

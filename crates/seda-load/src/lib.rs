//! Load generation for SEDA.
//!
//! - [`fileset`]: SPECweb99-style file sets and their manifest; [`dist`]: the
//!   popularity model (Zipf over directories, class mix 35/50/14/1, Zipf in a class).
//! - [`client`]: the event-driven HTTP load generator (closed and open loop, load
//!   schedules), producing a [`LoadReport`].
//! - [`metrics`]: response-time histograms, CDFs, Jain's fairness index.
//! - [`testserver`]: a fixed-delay HTTP server to validate the generator against.
//! - [`arashi`]: emulated mail readers against the Arashi mail service (a Markov
//!   model of a mail reader, `seda load arashi`).
//! - [`gnutella`]: simulated Gnutella 0.6 peers against a router (`seda load
//!   gnutella`), with their own small wire codec.
//!
//! Every fallible function returns a [`LoadError`] (thiserror): a setting out of
//! range, an argument that does not parse, an I/O or JSON failure with its cause.
//!
//! The experiments that use this load (`seda experiment`) are in `seda-experiments`.
//! This crate depends on no crate of the workspace: it talks to the servers it
//! measures over the wire only.
#![forbid(unsafe_code)]

pub mod arashi;
pub mod client;
pub mod dist;
mod error;
pub mod fileset;
pub mod gnutella;
pub mod http;
pub mod metrics;
pub mod report;
pub mod schedule;
mod setters;
pub mod testserver;

pub use client::{LoadConfig, Mode, Progress, RequestMix, parse_url};
pub use error::LoadError;
pub use report::{LoadReport, PhaseSummary, TimePoint};
pub use schedule::{Phase, Schedule};

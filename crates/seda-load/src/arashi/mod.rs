//! Emulated mail readers against Arashi (USITS'03 4.1), `seda load arashi`:
//! closed-loop users that follow a Markov model of mail-reader behaviour
//! ([`markov`]), think 20 ms between requests, and after a rejection wait 5 s and log
//! in again ([`run`]); per request type: completions, rejections, p90
//! ([`ArashiReport`]).
//!
//! The schedules (steady, spike) and the response-time histograms are the crate's
//! own; the client is a blocking one per user ([`http`]) because a mail reader reads
//! its pages (message ids, CSRF token) where the HTTP load generator counts and
//! drops bytes. What the service's pages and accounts look like from the wire is in
//! [`request`].

pub mod http;
pub mod markov;
mod report;
pub mod request;
mod run;
mod user;

pub use http::{HttpClient, HttpResponse, form_encode};
pub use markov::{MarkovModel, PAPER_TABLE};
pub use report::{ArashiReport, Phase, RunShape, Sample, Second, Stats, TypeStats};
pub use request::RequestType;
pub use run::{ArashiLoadConfig, LoadProgress, UserGroup, run};
pub use user::{Done, Outcome, SEARCH_WORDS, User};

//! Emulated mail readers (USITS'03 4.1): closed-loop users that follow a Markov
//! model of mail-reader behaviour ([`markov`]), think 20 ms between requests, and
//! after a rejection wait 5 s and log in again ([`run`]); per request type:
//! completions, rejections, p90 ([`ArashiReport`]).
//!
//! `seda-load` provides the schedules (steady, spike), the response-time histograms
//! and the plots; the client here is a blocking one per user because a mail reader
//! reads its pages (message ids, CSRF token) where `seda-load`'s counts and drops
//! bytes.

pub mod http;
pub mod markov;
mod report;
mod run;
mod user;

pub use http::{HttpClient, HttpResponse, form_encode};
pub use markov::{MarkovModel, PAPER_TABLE};
pub use report::{ArashiReport, Phase, RunShape, Sample, Second, Stats, TypeStats};
pub use run::{ArashiLoadConfig, LoadProgress, UserGroup, run};
pub use user::{Done, Outcome, SEARCH_WORDS, User};

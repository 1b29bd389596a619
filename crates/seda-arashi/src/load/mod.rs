//! Emulated mail readers (USITS'03 4.1): closed-loop users following a Markov model
//! of mail-reader behaviour.

pub mod http;

pub use http::{HttpClient, HttpResponse, form_encode};

//! # seda-http: Haboob, the staged HTTP/1.1 server (SEDA, SOSP'01 section 5.1)
#![forbid(unsafe_code)]

pub mod proto;

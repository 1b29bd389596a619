//! # seda-io: asynchronous socket and file stages (work in progress)
#![forbid(unsafe_code)]

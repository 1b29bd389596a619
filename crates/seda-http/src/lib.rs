//! # seda-http: Haboob, the staged HTTP/1.1 server (SEDA, SOSP'01 section 5.1)
#![forbid(unsafe_code)]

mod cache;
mod handler;
pub mod proto;

pub use cache::{FileInfo, FileKey, PageCache, PageCacheStats, PathCache, Target};
pub use handler::{
    Classifier, Handler, HandlerContext, HandlerRegistration, OverloadAction, Request, Response,
};

//! Helpers shared by the runtime's integration tests.
#![allow(dead_code)]

use std::time::{Duration, Instant};

use seda::ThreadModel;

/// Both thread models, for tests that must hold in each.
pub const MODELS: [ThreadModel; 2] = [ThreadModel::PerStage, ThreadModel::Shared];

/// Polls `cond` every millisecond until it holds or `limit` passes; returns whether
/// it held.
pub fn eventually(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    cond()
}

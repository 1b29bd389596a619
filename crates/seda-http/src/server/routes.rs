//! The route table of dynamic handlers: which handler's stage a path belongs to.

use std::sync::Arc;

use parking_lot::RwLock;

use super::events::Route;
use crate::proto;

/// The dynamic handlers by prefix, longest first.
#[derive(Debug, Default)]
pub(crate) struct Routes(RwLock<Vec<Arc<Route>>>);

impl Routes {
    /// The handler whose prefix matches the raw (encoded) path, if any.
    pub(crate) fn find(&self, raw_path: &[u8]) -> Option<Arc<Route>> {
        let routes = self.0.read();
        if routes.is_empty() {
            return None;
        }
        // Most paths have no escape: match them as they are.
        let decoded;
        let path = if raw_path.contains(&b'%') {
            decoded = proto::percent_decode(raw_path)?;
            String::from_utf8_lossy(&decoded)
        } else {
            String::from_utf8_lossy(raw_path)
        };
        routes.iter().find(|r| r.reg.matches(&path)).cloned()
    }

    pub(crate) fn has_prefix(&self, prefix: &str) -> bool {
        self.0.read().iter().any(|r| r.reg.prefix() == prefix)
    }

    pub(crate) fn add(&self, route: Route) {
        let mut routes = self.0.write();
        routes.push(Arc::new(route));
        routes.sort_by_key(|r| std::cmp::Reverse(r.reg.prefix().len()));
    }

    pub(crate) fn qualities(&self) -> Vec<(String, Option<f64>)> {
        self.0
            .read()
            .iter()
            .map(|r| (r.reg.stage_name(), r.reg.handler.quality()))
            .collect()
    }

    /// Every route, longest prefix first.
    pub(crate) fn all(&self) -> Vec<Arc<Route>> {
        self.0.read().clone()
    }

    /// Puts `new` where `old` is (a reload's new registration for the same stage).
    /// Requests that found `old` before keep it until they are submitted.
    pub(crate) fn replace(&self, old: &Arc<Route>, new: Route) {
        let mut routes = self.0.write();
        if let Some(slot) = routes.iter_mut().find(|r| Arc::ptr_eq(r, old)) {
            *slot = Arc::new(new);
        }
    }

    pub(crate) fn clear(&self) {
        self.0.write().clear();
    }
}

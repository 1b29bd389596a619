//! Query routing tables at the router: the tables peers send us (leaves', and
//! ultrapeers' for last-hop filtering), their memory budget, and the union of our
//! leaves' tables that we send ultrapeers which ask for it.
//!
//! # Invariants
//! - `used` is the sum of [`TableReceiver::bytes`] over the peers' receivers and
//!   never passes `memory` after a RESET is accepted: a RESET that would pass it is
//!   refused before any table is allocated, and the peer is dropped.
//! - Our table goes to an ultrapeer as RESET + PATCH the first time, then as
//!   incremental PATCH sequences against what it was last sent; it is recomputed
//!   at most once per `update_every`.

use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;

use super::peer::{Peer, Snapshot};
use crate::config::QrpConfig;
use crate::events::Role;
use crate::proto::qrp::{Progress, QrpMsg, RouteTable, TableReceiver, patch_payloads};
use crate::stats::Count;

/// Most bytes of compressed entries per PATCH message we send.
const PATCH_DATA: usize = 4096;

/// Why a peer's QRP message ends its connection (Bye code 413, reason).
#[derive(Debug)]
pub(crate) struct Refused {
    pub(crate) reason: String,
    pub(crate) count: Count,
}

#[derive(Debug)]
struct State {
    /// Bytes all receivers hold.
    used: usize,
    /// The union of our leaves' tables.
    ours: Arc<RouteTable>,
    /// Whether a leaf's table changed since `ours` was computed.
    dirty: bool,
    /// When `ours` may be recomputed next.
    next_update: Option<Instant>,
}

/// The router's query routing state.
#[derive(Debug)]
pub(crate) struct QueryRouting {
    cfg: QrpConfig,
    state: Mutex<State>,
}

impl QueryRouting {
    pub(crate) fn new(cfg: &QrpConfig) -> QueryRouting {
        QueryRouting {
            state: Mutex::new(State {
                used: 0,
                ours: Arc::new(RouteTable::new(cfg.table_bits)),
                dirty: false,
                next_update: None,
            }),
            cfg: cfg.clone(),
        }
    }

    /// Bytes the received tables hold.
    pub(crate) fn used(&self) -> usize {
        self.state.lock().used
    }

    /// Applies a QRP message `p` from `peer`. `Ok(true)`: a table completed.
    pub(crate) fn receive(&self, peer: &Peer, p: &[u8]) -> Result<bool, Refused> {
        let malformed = |reason: String| Refused {
            reason,
            count: Count::QrpMalformed,
        };
        let msg = QrpMsg::parse(p).map_err(|e| malformed(e.0))?;
        let mut st = self.state.lock();
        let mut rx = peer.qrt.write();
        let before = rx.bytes();
        if let QrpMsg::Reset { table_len, .. } = msg {
            let after = TableReceiver::bytes_after_reset(table_len);
            if st.used - before + after > self.cfg.memory {
                return Err(Refused {
                    reason: format!(
                        "QRP table of {table_len} slots over our memory limit ({} KiB)",
                        self.cfg.memory >> 10
                    ),
                    count: Count::QrpOverMemory,
                });
            }
        }
        let res = rx.apply(&msg, self.cfg.max_table_bits);
        st.used = st.used - before + rx.bytes();
        match res {
            Ok(Progress::Complete) => {
                if peer.info.role == Role::Leaf {
                    st.dirty = true;
                }
                Ok(true)
            }
            Ok(_) => Ok(false),
            Err(e) => Err(malformed(e.0)),
        }
    }

    /// A peer left: its table's memory is free again, and a leaf's table leaves
    /// our union.
    pub(crate) fn left(&self, peer: &Peer) {
        let mut st = self.state.lock();
        let mut rx = peer.qrt.write();
        st.used -= rx.bytes();
        if peer.info.role == Role::Leaf && rx.table().is_some() {
            st.dirty = true;
        }
        *rx = TableReceiver::default();
    }

    /// The QRP payloads to send now, per ultrapeer that wants our table and does
    /// not have its latest version; recomputes our table first if a leaf's changed
    /// and `update_every` has passed.
    pub(crate) fn due(&self, snap: &Snapshot, now: Instant) -> Vec<(Arc<Peer>, Vec<Vec<u8>>)> {
        let ours = {
            let mut st = self.state.lock();
            if st.dirty && st.next_update.is_none_or(|t| now >= t) {
                let mut t = RouteTable::new(self.cfg.table_bits);
                for p in snap.list.iter().filter(|p| p.info.role == Role::Leaf) {
                    if let Some(lt) = p.qrt.read().table() {
                        t.merge(lt);
                    }
                }
                st.dirty = false;
                st.next_update = Some(now + self.cfg.update_every);
                if *st.ours != t {
                    st.ours = Arc::new(t);
                }
            }
            Arc::clone(&st.ours)
        };
        let mut out = Vec::new();
        for p in snap
            .list
            .iter()
            .filter(|p| p.info.role == Role::Ultrapeer && p.info.up_qrp && !p.is_closing())
        {
            let mut sent = p.sent_qrt.lock();
            if sent.as_ref().is_some_and(|s| Arc::ptr_eq(s, &ours)) {
                continue;
            }
            let payloads = patch_payloads(&ours, sent.as_deref(), PATCH_DATA);
            *sent = Some(Arc::clone(&ours));
            out.push((Arc::clone(p), payloads));
        }
        out
    }
}

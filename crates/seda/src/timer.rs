//! Timers: enqueue an event after a delay.
//!
//! One thread per runtime sleeps until the earliest deadline. A timer's event enters
//! its stage's queue like any other (admission and capacity apply); timers pending at
//! shutdown are cancelled and counted in the shutdown report.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::{Condvar, Mutex};

/// Identifies a scheduled timer, to cancel it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TimerId(u64);

impl TimerId {
    /// A timer that never fires (scheduled after its runtime was gone).
    pub(crate) const NONE: TimerId = TimerId(u64::MAX);
}

type Fire = Box<dyn FnOnce() + Send>;

struct State {
    heap: BinaryHeap<Reverse<(Instant, u64)>>,
    tasks: HashMap<u64, Fire>,
    next: u64,
    stopped: bool,
    thread: bool,
}

pub(crate) struct Timers {
    state: Mutex<State>,
    wake: Condvar,
}

impl Timers {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Timers {
            state: Mutex::new(State {
                heap: BinaryHeap::new(),
                tasks: HashMap::new(),
                next: 0,
                stopped: false,
                thread: false,
            }),
            wake: Condvar::new(),
        })
    }

    pub(crate) fn schedule(self: &Arc<Self>, at: Instant, fire: Fire) -> TimerId {
        let mut st = self.state.lock();
        let id = st.next;
        st.next += 1;
        if st.stopped {
            // Nothing fires after shutdown; the event is dropped with the closure.
            return TimerId(id);
        }
        st.heap.push(Reverse((at, id)));
        st.tasks.insert(id, fire);
        if !st.thread {
            st.thread = true;
            let me = Arc::clone(self);
            if std::thread::Builder::new()
                .name("seda-timer".into())
                .spawn(move || me.run())
                .is_err()
            {
                st.thread = false;
                tracing::error!("cannot spawn the timer thread");
            }
        }
        drop(st);
        self.wake.notify_one();
        TimerId(id)
    }

    pub(crate) fn cancel(&self, id: TimerId) -> bool {
        self.state.lock().tasks.remove(&id.0).is_some()
    }

    pub(crate) fn pending(&self) -> usize {
        self.state.lock().tasks.len()
    }

    /// Stops the timer thread; returns how many timers were cancelled.
    pub(crate) fn stop(&self) -> usize {
        let mut st = self.state.lock();
        st.stopped = true;
        let n = st.tasks.len();
        st.tasks.clear();
        st.heap.clear();
        drop(st);
        self.wake.notify_all();
        n
    }

    fn run(self: Arc<Self>) {
        let mut st = self.state.lock();
        loop {
            if st.stopped {
                return;
            }
            let now = Instant::now();
            match st.heap.peek().copied() {
                Some(Reverse((at, id))) if at <= now => {
                    st.heap.pop();
                    if let Some(fire) = st.tasks.remove(&id) {
                        drop(st);
                        fire();
                        st = self.state.lock();
                    }
                }
                Some(Reverse((at, _))) => {
                    self.wake.wait_until(&mut st, at);
                }
                None => {
                    self.wake.wait(&mut st);
                }
            }
        }
    }
}

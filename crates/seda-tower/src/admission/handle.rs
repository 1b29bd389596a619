//! A handle on a layer's shared state: stats for dashboards, and ticks for the policy's
//! clock when no request arrives.

use std::io;
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use seda::ClassCounts;
use seda::admission::AdmissionState;
use serde::Serialize;

use super::gate::Gate;

/// What a layer has done so far, and its policy's state.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[non_exhaustive]
pub struct AdmissionStats {
    /// Admitted requests whose response future has not finished or been dropped.
    pub in_flight: usize,
    /// Requests admitted since the layer was built.
    pub admitted: u64,
    /// Requests refused since the layer was built.
    pub rejected: u64,
    /// Admitted and refused per class, for every class seen, lowest first.
    pub classes: Vec<ClassCounts>,
    /// The policy's own view (rate, smoothed p90 and target, per-class state).
    pub policy: AdmissionState,
}

/// A cheap, cloneable handle on the state shared by a layer and every service it made.
#[derive(Clone, Debug)]
pub struct AdmissionHandle {
    pub(crate) gate: Arc<Gate>,
}

impl AdmissionHandle {
    /// Counters and the policy's state now.
    pub fn stats(&self) -> AdmissionStats {
        let mut s = AdmissionStats {
            in_flight: self.gate.in_flight(),
            policy: self.gate.policy().state(),
            ..AdmissionStats::default()
        };
        for class in 0..=seda::Class::MAX {
            let (admitted, rejected) = self.gate.counts(class);
            if admitted + rejected > 0 {
                s.admitted += admitted;
                s.rejected += rejected;
                s.classes.push(ClassCounts::new(class, admitted, rejected));
            }
        }
        s
    }

    /// Admitted requests in flight now.
    pub fn in_flight(&self) -> usize {
        self.gate.in_flight()
    }

    /// Ticks the policy now if the tick interval has passed since the last tick (from
    /// any source); returns whether it ticked. Call it from a timer of your runtime to
    /// keep the policy's clock going while no request arrives, e.g. with tokio:
    ///
    /// ```no_run
    /// # async fn run() {
    /// # let layer = seda_tower::AdmissionLayer::new(seda::admission::Unbounded);
    /// let h = layer.handle();
    /// tokio::spawn(async move {
    ///     let mut every = tokio::time::interval(std::time::Duration::from_millis(50));
    ///     loop {
    ///         every.tick().await;
    ///         h.tick();
    ///     }
    /// });
    /// # }
    /// ```
    pub fn tick(&self) -> bool {
        self.gate.tick_if_due(self.gate.now())
    }

    /// Starts a thread that ticks the policy every tick interval until the returned
    /// [`Ticker`] is dropped or every layer, service and handle of this state is gone.
    /// For services without a runtime timer at hand; see [`tick`](Self::tick).
    ///
    /// # Errors
    /// If the thread cannot be spawned.
    pub fn spawn_ticker(&self) -> io::Result<Ticker> {
        let gate: Weak<Gate> = Arc::downgrade(&self.gate);
        let every = self.gate.settings.tick_interval;
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("seda-tower-ticker".into())
            .spawn(move || ticker_loop(&gate, every, &flag))?;
        Ok(Ticker {
            stop,
            thread: Some(thread),
        })
    }
}

fn ticker_loop(gate: &Weak<Gate>, every: Duration, stop: &(Mutex<bool>, Condvar)) {
    let (lock, cv) = stop;
    let mut stopped = lock.lock().unwrap_or_else(|p| p.into_inner());
    loop {
        let (guard, _) = cv
            .wait_timeout(stopped, every)
            .unwrap_or_else(|p| p.into_inner());
        stopped = guard;
        if *stopped {
            return;
        }
        let Some(gate) = gate.upgrade() else { return };
        gate.tick_if_due(gate.now());
    }
}

/// The thread started by [`AdmissionHandle::spawn_ticker`]; dropping it stops and joins
/// the thread.
#[derive(Debug)]
pub struct Ticker {
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: Option<JoinHandle<()>>,
}

impl Ticker {
    /// Whether the thread still runs (it ends by itself once the layer's state is gone).
    pub fn is_running(&self) -> bool {
        self.thread.as_ref().is_some_and(|t| !t.is_finished())
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        let (lock, cv) = &*self.stop;
        *lock.lock().unwrap_or_else(|p| p.into_inner()) = true;
        cv.notify_all();
        if let Some(t) = self.thread.take() {
            // A panicking policy's tick already reported itself; nothing to add here.
            let _ = t.join();
        }
    }
}

//! The one door through which the queue and its waiter protocol reach atomics,
//! locks and condition variables (as `tokio/src/loom` does), so that the same code
//! runs on `std`/`parking_lot` in a normal build and on `loom`'s model-checked
//! versions under `RUSTFLAGS="--cfg loom"`.
//!
//! Only the parts of the runtime that the loom models exercise go through here (the
//! stage queue, its event counts, the schedule-token handshake); the rest of the
//! crate uses `std` and `parking_lot` directly and is never built into a loom model.

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{
    AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering, fence,
};

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{
    AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering, fence,
};

/// An `UnsafeCell` with loom's closure API (`with_mut`), so the ring's slot accesses
/// are checked by loom for data races; a plain `UnsafeCell` in a normal build.
#[cfg(not(loom))]
#[derive(Debug)]
pub(crate) struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

#[cfg(not(loom))]
impl<T> UnsafeCell<T> {
    pub(crate) fn new(v: T) -> Self {
        UnsafeCell(std::cell::UnsafeCell::new(v))
    }
    #[inline]
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}

#[cfg(loom)]
pub(crate) use loom::cell::UnsafeCell;

/// Spin hint between retries of an operation another thread is about to finish
/// (a reserved slot not yet written). Under loom it yields, so the model can run
/// the other thread.
#[inline]
pub(crate) fn spin(round: &mut u32) {
    #[cfg(loom)]
    {
        let _ = round;
        loom::thread::yield_now();
    }
    #[cfg(not(loom))]
    {
        *round += 1;
        if *round < 64 {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}

#[cfg(not(loom))]
mod lock {
    use std::time::Duration;

    /// A mutex with `parking_lot`'s API (no poisoning).
    #[derive(Debug, Default)]
    pub(crate) struct Mutex<T>(parking_lot::Mutex<T>);

    pub(crate) type MutexGuard<'a, T> = parking_lot::MutexGuard<'a, T>;

    impl<T> Mutex<T> {
        pub(crate) fn new(v: T) -> Self {
            Mutex(parking_lot::Mutex::new(v))
        }
        pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
            self.0.lock()
        }
    }

    /// A condition variable over [`Mutex`].
    #[derive(Debug, Default)]
    pub(crate) struct Condvar(parking_lot::Condvar);

    impl Condvar {
        pub(crate) fn new() -> Self {
            Condvar(parking_lot::Condvar::new())
        }
        /// Waits for a notification or `timeout`; true if it timed out.
        pub(crate) fn wait_for<T>(&self, g: &mut MutexGuard<'_, T>, timeout: Duration) -> bool {
            self.0.wait_for(g, timeout).timed_out()
        }
        pub(crate) fn notify_one(&self) {
            self.0.notify_one();
        }
        pub(crate) fn notify_all(&self) {
            self.0.notify_all();
        }
    }
}

#[cfg(loom)]
mod lock {
    use std::time::Duration;

    /// loom's mutex behind `parking_lot`'s API.
    #[derive(Debug)]
    pub(crate) struct Mutex<T>(loom::sync::Mutex<T>);

    pub(crate) struct MutexGuard<'a, T>(Option<loom::sync::MutexGuard<'a, T>>);

    impl<T> std::ops::Deref for MutexGuard<'_, T> {
        type Target = T;
        fn deref(&self) -> &T {
            self.0.as_ref().expect("guard present")
        }
    }

    impl<T> std::ops::DerefMut for MutexGuard<'_, T> {
        fn deref_mut(&mut self) -> &mut T {
            self.0.as_mut().expect("guard present")
        }
    }

    impl<T: Default> Default for Mutex<T> {
        fn default() -> Self {
            Mutex::new(T::default())
        }
    }

    impl<T> Mutex<T> {
        pub(crate) fn new(v: T) -> Self {
            Mutex(loom::sync::Mutex::new(v))
        }
        pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
            MutexGuard(Some(self.0.lock().unwrap_or_else(|e| e.into_inner())))
        }
    }

    /// loom's condition variable; a timed wait may time out at any point the model
    /// chooses (it explores both outcomes).
    #[derive(Debug, Default)]
    pub(crate) struct Condvar(loom::sync::Condvar);

    impl Condvar {
        pub(crate) fn new() -> Self {
            Condvar(loom::sync::Condvar::new())
        }
        pub(crate) fn wait_for<T>(&self, g: &mut MutexGuard<'_, T>, timeout: Duration) -> bool {
            let inner = g.0.take().expect("guard present");
            let (inner, r) = self
                .0
                .wait_timeout(inner, timeout)
                .unwrap_or_else(|e| e.into_inner());
            g.0 = Some(inner);
            r.timed_out()
        }
        pub(crate) fn notify_one(&self) {
            self.0.notify_one();
        }
        pub(crate) fn notify_all(&self) {
            self.0.notify_all();
        }
    }
}

pub(crate) use lock::{Condvar, Mutex};

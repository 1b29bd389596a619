//! The bounded ring that holds a stage's uncolored events.
//!
//! A normal build uses `crossbeam_queue::ArrayQueue`, Dmitry Vyukov's bounded MPMC
//! queue (each slot has a stamp; producers and consumers claim positions with one
//! CAS on `tail`/`head`; no lock, no system call). Under `--cfg loom` it is replaced
//! by a mutex-protected `VecDeque` with the same contract: loom then checks *our*
//! protocol around the ring (the state word, the event counts, the schedule token)
//! against any linearizable bounded queue; crossbeam tests its ring itself.

#[cfg(not(loom))]
#[derive(Debug)]
pub(crate) struct Ring<T>(crossbeam_queue::ArrayQueue<T>);

#[cfg(not(loom))]
impl<T> Ring<T> {
    pub(crate) fn new(capacity: usize) -> Self {
        Ring(crossbeam_queue::ArrayQueue::new(capacity.max(1)))
    }
    pub(crate) fn push(&self, v: T) -> Result<(), T> {
        self.0.push(v)
    }
    pub(crate) fn pop(&self) -> Option<T> {
        self.0.pop()
    }
}

#[cfg(loom)]
#[derive(Debug)]
pub(crate) struct Ring<T> {
    items: crate::loom::Mutex<std::collections::VecDeque<T>>,
    capacity: usize,
}

#[cfg(loom)]
impl<T> Ring<T> {
    pub(crate) fn new(capacity: usize) -> Self {
        Ring {
            items: crate::loom::Mutex::new(std::collections::VecDeque::new()),
            capacity: capacity.max(1),
        }
    }
    pub(crate) fn push(&self, v: T) -> Result<(), T> {
        let mut q = self.items.lock();
        if q.len() >= self.capacity {
            return Err(v);
        }
        q.push_back(v);
        Ok(())
    }
    pub(crate) fn pop(&self) -> Option<T> {
        self.items.lock().pop_front()
    }
}

//! Virtual time: integer ticks of one microsecond, and the event queue.
//!
//! Events are ordered by (time, sequence number): ties break in the order events were
//! scheduled, so the simulation never depends on the host.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Virtual microseconds since the start of the run.
pub type Tick = u64;

/// Ticks per virtual second (one tick is a microsecond).
pub const TICKS_PER_SECOND: f64 = 1e6;

/// `seconds` of virtual time in ticks, rounded to the nearest microsecond; negative values
/// become 0.
pub fn ticks(seconds: f64) -> Tick {
    (seconds * TICKS_PER_SECOND).round().max(0.0) as Tick
}

/// Tick `t` in virtual seconds.
pub fn seconds(t: Tick) -> f64 {
    t as f64 / TICKS_PER_SECOND
}

/// A min-queue of events keyed by (time, insertion sequence).
#[derive(Debug)]
pub struct EventQueue<E> {
    heap: BinaryHeap<Reverse<(Tick, u64, Slot<E>)>>,
    seq: u64,
}

/// Wraps the payload so that ordering only looks at (time, sequence).
#[derive(Debug)]
struct Slot<E>(E);

impl<E> PartialEq for Slot<E> {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}
impl<E> Eq for Slot<E> {}
impl<E> PartialOrd for Slot<E> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl<E> Ord for Slot<E> {
    fn cmp(&self, _: &Self) -> std::cmp::Ordering {
        std::cmp::Ordering::Equal
    }
}

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        EventQueue { heap: BinaryHeap::new(), seq: 0 }
    }
}

impl<E> EventQueue<E> {
    /// Schedules `event` at tick `at`, after every event already scheduled at that tick.
    pub fn push(&mut self, at: Tick, event: E) {
        self.heap.push(Reverse((at, self.seq, Slot(event))));
        self.seq += 1;
    }

    /// Removes and returns the earliest event with its tick.
    pub fn pop(&mut self) -> Option<(Tick, E)> {
        self.heap.pop().map(|Reverse((t, _, Slot(e)))| (t, e))
    }

    /// The tick of the earliest event, if any.
    pub fn peek_time(&self) -> Option<Tick> {
        self.heap.peek().map(|Reverse((t, _, _))| *t)
    }

    /// Number of scheduled events.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// Whether no event is scheduled.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// Every queued event with its (time, sequence number), in the order they will pop, and
    /// the next sequence number: what [`EventQueue::from_entries`] rebuilds the queue from.
    pub fn entries(&self) -> (Vec<(Tick, u64, &E)>, u64) {
        let mut all: Vec<_> = self.heap.iter().map(|Reverse((t, s, Slot(e)))| (*t, *s, e)).collect();
        all.sort_by_key(|(t, s, _)| (*t, *s));
        (all, self.seq)
    }

    /// The queue [`EventQueue::entries`] described: the same events, popping in the same order.
    pub fn from_entries(entries: Vec<(Tick, u64, E)>, seq: u64) -> Self {
        EventQueue { heap: entries.into_iter().map(|(t, s, e)| Reverse((t, s, Slot(e)))).collect(), seq }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pops_in_time_order_and_ties_in_insertion_order() {
        let mut q = EventQueue::default();
        q.push(5, "c");
        q.push(1, "a");
        q.push(5, "d");
        q.push(1, "b");
        let order: Vec<_> = std::iter::from_fn(|| q.pop()).collect();
        assert_eq!(order, vec![(1, "a"), (1, "b"), (5, "c"), (5, "d")]);
    }

    #[test]
    fn a_queue_rebuilt_from_its_entries_pops_the_same_and_numbers_on() {
        let mut q = EventQueue::default();
        for (t, e) in [(5, "c"), (1, "a"), (5, "d"), (1, "b")] {
            q.push(t, e);
        }
        q.pop();
        let (entries, seq) = q.entries();
        let mut r = EventQueue::from_entries(entries.into_iter().map(|(t, s, e)| (t, s, *e)).collect(), seq);
        q.push(1, "x");
        r.push(1, "x");
        let a: Vec<_> = std::iter::from_fn(|| q.pop()).collect();
        let b: Vec<_> = std::iter::from_fn(|| r.pop()).collect();
        assert_eq!(a, b);
        assert_eq!(b, vec![(1, "b"), (1, "x"), (5, "c"), (5, "d")]);
    }
}

//! A lock-free multi-producer shard: any number of threads push values without taking a lock,
//! and a drain takes everything pushed so far, in push order, without ever blocking a push.
//!
//! The shard is a singly linked list of heap nodes, newest first (a Treiber stack without pop):
//! [`Shard::push`] links a new node in front of the head with one compare-and-swap, and
//! [`Shard::take_into`] detaches the whole list with one atomic swap of the head to null, then
//! reverses it to give the values back oldest first. The order is the order in which the pushes'
//! compare-and-swaps took effect, so the values of one thread come back in the order that thread
//! pushed them, as they would from a mutex-guarded `Vec`.
//!
//! Nothing is ever unlinked from a list that other threads can still reach, so there is no ABA
//! problem and no reclamation scheme: a push only compares the head's address, it never reads
//! the node behind it, and a drain owns every node of the chain it swapped out.
//!
//! With the `loom` feature the atomics and the cell holding each node's link are loom's, so the loom
//! model tests below check every interleaving and the memory ordering of the node links.

use std::fmt;
use std::marker::PhantomData;
use std::ptr;

use sync::{AtomicPtr, Ordering, UnsafeCell};

/// The atomics used here: std's, or loom's when the crate is model-checked.
mod sync {
    #[cfg(feature = "loom")]
    pub(super) use loom::{
        cell::UnsafeCell,
        sync::atomic::{AtomicPtr, Ordering},
    };
    #[cfg(not(feature = "loom"))]
    pub(super) use std::sync::atomic::{AtomicPtr, Ordering};

    /// std's `UnsafeCell` with the closure API of loom's (no cost: the closures inline away).
    #[cfg(not(feature = "loom"))]
    #[derive(Debug)]
    pub(super) struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

    #[cfg(not(feature = "loom"))]
    impl<T> UnsafeCell<T> {
        pub(super) fn new(value: T) -> Self {
            Self(std::cell::UnsafeCell::new(value))
        }

        pub(super) fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
            f(self.0.get())
        }

        pub(super) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
            f(self.0.get())
        }
    }
}

struct Node<T> {
    value: T,
    /// The node pushed before this one (null for the oldest). Written only by the pushing thread
    /// before its compare-and-swap publishes the node; read only by the drain that detached it.
    next: UnsafeCell<*mut Node<T>>,
}

/// Values pushed by any number of threads, taken out all at once in push order.
pub struct Shard<T> {
    /// The newest node, or null when the shard is empty. Every non-null value was made by
    /// `Box::into_raw` in [`Shard::push`] and is owned by the shard until a swap detaches it.
    head: AtomicPtr<Node<T>>,
    /// The shard owns the boxed nodes (and so their values) behind `head`.
    _owns: PhantomData<Box<Node<T>>>,
}

// SAFETY: a `Shard<T>` only ever moves whole `T` values between threads (in through `push`, out
// through `take_into` or `Drop`); it never hands out a reference to a value it holds. That is
// exactly what a `Mutex<Vec<T>>` does, and it is `Send + Sync` when `T: Send`.
unsafe impl<T: Send> Send for Shard<T> {}
// SAFETY: as above: `&Shard<T>` lets threads move `T`s in and out, never share a `&T`.
unsafe impl<T: Send> Sync for Shard<T> {}

impl<T> Shard<T> {
    pub fn new() -> Self {
        Self { head: AtomicPtr::new(ptr::null_mut()), _owns: PhantomData }
    }

    /// Adds `value` after every value already pushed. Lock-free: a failed compare-and-swap means
    /// another push or a drain went first, and this one tries again against the new head.
    pub fn push(&self, value: T) {
        let node = Box::into_raw(Box::new(Node { value, next: UnsafeCell::new(ptr::null_mut()) }));
        let mut head = self.head.load(Ordering::Relaxed);
        loop {
            // SAFETY: `node` is the live allocation just made by `Box::into_raw`, and no other
            // thread can reach it until the compare-and-swap below succeeds: this write is
            // exclusive. (`head` is only stored, never dereferenced: it may be freed already.)
            unsafe { (*node).next.with_mut(|next| *next = head) };
            // Release: a drain that swaps this node out (Acquire) sees its value and link, and
            // those of the nodes behind it (each later compare-and-swap on `head` continues the
            // release sequence of the earlier ones).
            match self.head.compare_exchange_weak(head, node, Ordering::Release, Ordering::Relaxed) {
                Ok(_) => return,
                Err(current) => head = current,
            }
        }
    }

    /// Moves every value pushed so far to the end of `out`, oldest first, and leaves the shard
    /// empty. Never waits: a push that lands meanwhile stays for the next drain.
    pub fn take_into(&self, out: &mut Vec<T>) {
        let start = out.len();
        out.extend(Chain(self.detach()));
        out[start..].reverse();
    }

    /// Everything pushed so far, oldest first.
    pub fn take(&self) -> Vec<T> {
        let mut out = Vec::new();
        self.take_into(&mut out);
        out
    }

    /// The whole list, newest first, no longer reachable from the shard.
    fn detach(&self) -> *mut Node<T> {
        // Acquire: pairs with the Release of every push whose node is in the chain.
        self.head.swap(ptr::null_mut(), Ordering::Acquire)
    }
}

impl<T> Default for Shard<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Drop for Shard<T> {
    fn drop(&mut self) {
        // Values never drained are dropped with their nodes.
        drop(Chain(self.detach()));
    }
}

impl<T> fmt::Debug for Shard<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // the values cannot be looked at without taking them
        f.debug_struct("Shard").finish_non_exhaustive()
    }
}

/// A detached list, newest first: yields its values one by one and frees what is left when
/// dropped (so a panic part-way through a drain leaks nothing).
struct Chain<T>(*mut Node<T>);

impl<T> Iterator for Chain<T> {
    type Item = T;

    fn next(&mut self) -> Option<T> {
        if self.0.is_null() {
            return None;
        }
        // SAFETY: every non-null pointer in a detached chain is a node made by `Box::into_raw` in
        // `push`, published by its Release compare-and-swap, which the drain's Acquire swap
        // synchronizes with. The swap made the chain unreachable from the shard, and pushes never
        // dereference the head they replace, so this chain is the only owner of its nodes; each
        // is turned back into a box exactly once, here, after which `self.0` moves past it.
        let node = unsafe { Box::from_raw(self.0) };
        // SAFETY: the link was written before the node was published and is never written again.
        self.0 = node.next.with(|next| unsafe { *next });
        Some(node.value)
    }
}

impl<T> Drop for Chain<T> {
    fn drop(&mut self) {
        for value in self.by_ref() {
            drop(value);
        }
    }
}

#[cfg(all(test, not(feature = "loom")))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;

    #[test]
    fn takes_everything_in_push_order_and_leaves_the_shard_empty() {
        let shard = Shard::new();
        for i in 0..5 {
            shard.push(i);
        }
        let mut out = vec![-1];
        shard.take_into(&mut out);
        assert_eq!(out, vec![-1, 0, 1, 2, 3, 4]);
        assert!(shard.take().is_empty());
        shard.push(9);
        assert_eq!(shard.take(), vec![9]);
    }

    struct Counted(Arc<AtomicUsize>);

    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[test]
    fn drop_frees_what_was_never_drained() {
        let drops = Arc::new(AtomicUsize::new(0));
        let shard = Shard::new();
        for _ in 0..3 {
            shard.push(Counted(drops.clone()));
        }
        drop(shard.take());
        assert_eq!(drops.load(Ordering::Relaxed), 3);
        for _ in 0..4 {
            shard.push(Counted(drops.clone()));
        }
        drop(shard);
        assert_eq!(drops.load(Ordering::Relaxed), 7);
    }

    #[test]
    fn threads_pushing_while_one_drains_lose_nothing_and_keep_each_threads_order() {
        const THREADS: usize = 4;
        const EACH: usize = 20_000;
        let shard = Arc::new(Shard::new());
        let done = Arc::new(AtomicUsize::new(0));
        let producers: Vec<_> = (0..THREADS)
            .map(|t| {
                let (shard, done) = (shard.clone(), done.clone());
                std::thread::spawn(move || {
                    for i in 0..EACH {
                        shard.push((t, i));
                    }
                    done.fetch_add(1, Ordering::Release);
                })
            })
            .collect();
        let mut next = [0; THREADS];
        let mut check = |taken: Vec<(usize, usize)>| {
            for (t, i) in taken {
                assert_eq!(i, next[t], "thread {t}");
                next[t] += 1;
            }
        };
        while done.load(Ordering::Acquire) < THREADS {
            check(shard.take());
        }
        for p in producers {
            p.join().unwrap();
        }
        check(shard.take());
        assert_eq!(next, [EACH; THREADS]);
    }
}

/// Model checks: every interleaving of two producers and a drainer, up to a bound of preemptions
/// (3 unless `LOOM_MAX_PREEMPTIONS` says otherwise; bugs of this kind show up within 2 or 3).
/// `make test-loom` runs them.
#[cfg(all(test, feature = "loom"))]
mod loom_tests {
    use super::*;
    use loom::alloc::Track;
    use loom::sync::atomic::AtomicUsize;
    use loom::sync::Arc;
    use loom::thread;

    /// Who pushed a value, and its place among that producer's pushes. Tracked: loom fails the
    /// model if one is never dropped (a node leaked).
    type Item = Track<(usize, usize)>;

    const PRODUCERS: usize = 2;
    const EACH: usize = 2;

    fn model(f: impl Fn() + Sync + Send + 'static) {
        let mut builder = loom::model::Builder::new();
        builder.preemption_bound = builder.preemption_bound.or(Some(3));
        builder.check(f);
    }

    /// Two producers push `EACH` values each while a third thread runs `drain`; when all are
    /// done, the shard (with whatever `drain` left in it) and what `drain` returned.
    fn race<R: Send + 'static>(drain: impl FnOnce(&Shard<Item>) -> R + Send + 'static) -> (Arc<Shard<Item>>, R) {
        let shard = Arc::new(Shard::new());
        let pushers: Vec<_> = (0..PRODUCERS)
            .map(|producer| {
                let shard = shard.clone();
                thread::spawn(move || {
                    for seq in 0..EACH {
                        shard.push(Track::new((producer, seq)));
                    }
                })
            })
            .collect();
        let drainer = {
            let shard = shard.clone();
            thread::spawn(move || drain(&shard))
        };
        for p in pushers {
            p.join().unwrap();
        }
        let drained = drainer.join().unwrap();
        (shard, drained)
    }

    /// Each producer's values continue where its last drained value left off: nothing lost,
    /// nothing twice, the producer's order kept within and across drains.
    fn check(next: &mut [usize; PRODUCERS], taken: &[Item]) {
        for item in taken {
            let (producer, seq) = *item.get_ref();
            assert_eq!(seq, next[producer], "producer {producer}");
            next[producer] += 1;
        }
    }

    #[test]
    fn concurrent_drains_lose_nothing_repeat_nothing_and_keep_each_producers_order() {
        model(|| {
            let (shard, drained) = race(|shard| {
                let mut taken = shard.take();
                shard.take_into(&mut taken);
                taken
            });
            let mut next = [0; PRODUCERS];
            check(&mut next, &drained);
            check(&mut next, &shard.take());
            assert_eq!(next, [EACH; PRODUCERS]);
        });
    }

    #[test]
    fn drop_frees_what_a_concurrent_drain_left() {
        model(|| {
            let (shard, ()) = race(|shard| check(&mut [0; PRODUCERS], &shard.take()));
            // the last owner drops the shard with what the drain did not take: loom's leak
            // check at the end of each execution fails the model if any value is not freed
            drop(shard);
        });
    }

    /// The buffer's row counter protocol: counted before the push makes a value drainable,
    /// uncounted after a drain took it. A drain never subtracts rows not added yet.
    #[test]
    fn counting_before_the_push_never_lets_a_drain_underflow_the_counter() {
        model(|| {
            let shard = Arc::new(Shard::new());
            let rows = Arc::new(AtomicUsize::new(0));
            let pushers: Vec<_> = (0..PRODUCERS)
                .map(|producer| {
                    let (shard, rows) = (shard.clone(), rows.clone());
                    thread::spawn(move || {
                        rows.fetch_add(1, Ordering::AcqRel);
                        shard.push(producer);
                    })
                })
                .collect();
            let drainer = {
                let (shard, rows) = (shard.clone(), rows.clone());
                thread::spawn(move || {
                    let taken = shard.take().len();
                    let before = rows.fetch_sub(taken, Ordering::AcqRel);
                    assert!(before >= taken, "the counter would wrap: {before} - {taken}");
                    taken
                })
            };
            for p in pushers {
                p.join().unwrap();
            }
            let drained = drainer.join().unwrap();
            let rest = shard.take().len();
            assert_eq!(drained + rest, PRODUCERS);
            assert_eq!(rows.fetch_sub(rest, Ordering::AcqRel), rest);
        });
    }
}

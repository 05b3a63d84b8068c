//! Contention bench of the buffer's shards: the lock-free `Shard` against a `Mutex<Vec<_>>` with
//! the same interface, in the same run, interleaved.
//!
//! 1, 2, 4, 8 and 16 threads each push `--per-thread` entries into one sharded store while one
//! more thread drains every shard every 100 us (what the worker's drain does to a buffer being
//! appended to). Two layouts: 16 shards with each thread's pushes spread over all of them (the
//! buffer's default, appends of many partitions), and 1 shard (every thread on one shard, the
//! worst case). An entry is a stand-in of the buffer's own (`Entry`: a record batch, its offsets,
//! its keys): the same size, with a heap allocation of offsets that the drainer frees.
//! Ops/s are pushes per second of wall time from the first producer's start to the last one's end;
//! the median of `--repeats` runs (5), the two stores alternating which goes first.
//!
//!     cargo run --release -p frazil-native --no-default-features --example contention -- [--json]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use _native::buffer::shard::Shard;

/// Offsets per stand-in entry (a small batch).
const OFFSETS: usize = 16;
const DRAIN_EVERY: Duration = Duration::from_micros(100);

/// The size of the buffer's `Entry` on 64-bit targets (checked below), and like it one heap
/// allocation of offsets made by the appending thread and freed by the draining one.
struct Payload {
    offsets: Vec<i64>,
    _rest: [u64; 22],
}

const _: () = assert!(std::mem::size_of::<Payload>() == 200);

impl Payload {
    fn new(first: i64) -> Self {
        Self { offsets: (first..first + OFFSETS as i64).collect(), _rest: [0; 22] }
    }
}

trait Store: Send + Sync + 'static {
    const NAME: &'static str;
    fn new(shards: usize) -> Self;
    fn push(&self, shard: usize, value: Payload);
    /// Moves everything held to the end of `out`.
    fn drain(&self, out: &mut Vec<Payload>);
}

struct LockFree(Vec<Shard<Payload>>);

impl Store for LockFree {
    const NAME: &'static str = "lock-free";

    fn new(shards: usize) -> Self {
        Self((0..shards).map(|_| Shard::new()).collect())
    }

    fn push(&self, shard: usize, value: Payload) {
        self.0[shard].push(value);
    }

    fn drain(&self, out: &mut Vec<Payload>) {
        for shard in &self.0 {
            shard.take_into(out);
        }
    }
}

/// The buffer's shards as they were: a short mutex around a `Vec` each.
struct Locked(Vec<Mutex<Vec<Payload>>>);

impl Store for Locked {
    const NAME: &'static str = "mutex";

    fn new(shards: usize) -> Self {
        Self((0..shards).map(|_| Mutex::new(Vec::new())).collect())
    }

    fn push(&self, shard: usize, value: Payload) {
        self.0[shard].lock().expect("shard lock poisoned").push(value);
    }

    fn drain(&self, out: &mut Vec<Payload>) {
        for shard in &self.0 {
            out.append(&mut shard.lock().expect("shard lock poisoned"));
        }
    }
}

/// Rows (offsets) in `drained`, which are then freed, as the buffer's drain counts and frees.
fn uncount(drained: &mut Vec<Payload>) -> usize {
    let rows = drained.iter().map(|p| p.offsets.len()).sum();
    drained.clear();
    rows
}

/// Pushes per second with `threads` producers and one drainer; checks every push was drained.
fn run<S: Store>(threads: usize, shards: usize, per_thread: usize) -> f64 {
    let store = Arc::new(S::new(shards));
    let start = Arc::new(Barrier::new(threads + 1));
    let done = Arc::new(AtomicBool::new(false));
    let drainer = {
        let (store, done) = (store.clone(), done.clone());
        thread::spawn(move || {
            let mut out = Vec::new();
            let mut rows = 0;
            while !done.load(Ordering::Acquire) {
                thread::sleep(DRAIN_EVERY);
                store.drain(&mut out);
                rows += uncount(&mut out);
            }
            rows
        })
    };
    let producers: Vec<_> = (0..threads)
        .map(|t| {
            let (store, start) = (store.clone(), start.clone());
            thread::spawn(move || {
                start.wait();
                let started = Instant::now();
                for i in 0..per_thread {
                    store.push((t + i) % shards, Payload::new(i as i64));
                }
                (started, Instant::now())
            })
        })
        .collect();
    start.wait();
    // from the first producer's start to the last one's end, as each saw them (the main thread
    // may not be scheduled again until long after the barrier)
    let spans: Vec<(Instant, Instant)> = producers.into_iter().map(|p| p.join().expect("producer panicked")).collect();
    let first = spans.iter().map(|s| s.0).min().expect("one producer at least");
    let last = spans.iter().map(|s| s.1).max().expect("one producer at least");
    let seconds = (last - first).as_secs_f64();
    done.store(true, Ordering::Release);
    let mut out = Vec::new();
    store.drain(&mut out);
    let rows = drainer.join().expect("drainer panicked") + uncount(&mut out);
    assert_eq!(rows, threads * per_thread * OFFSETS, "{} lost or repeated entries", S::NAME);
    (threads * per_thread) as f64 / seconds
}

/// The median, and (max - min) / median: how much the runs disagreed.
fn median_spread(mut xs: Vec<f64>) -> (f64, f64) {
    xs.sort_by(f64::total_cmp);
    let median = xs[xs.len() / 2];
    (median, (xs[xs.len() - 1] - xs[0]) / median)
}

fn main() {
    let mut json = false;
    let mut per_thread = 100_000;
    let mut repeats = 5;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut number = |name: &str| -> usize {
            args.next().and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("{name} takes a number"))
        };
        match arg.as_str() {
            "--json" => json = true,
            "--per-thread" => per_thread = number("--per-thread"),
            "--repeats" => repeats = number("--repeats").max(1),
            other => panic!("unknown argument {other:?}; takes --json, --per-thread N, --repeats N"),
        }
    }
    let mut rows = Vec::new();
    if !json {
        println!("{:>7}{:>8}{:>16}{:>16}{:>8}", "shards", "threads", "lock-free op/s", "mutex op/s", "ratio");
    }
    for shards in [16, 1] {
        for threads in [1, 2, 4, 8, 16] {
            let (mut free, mut locked) = (Vec::new(), Vec::new());
            for r in 0..repeats {
                if r % 2 == 0 {
                    free.push(run::<LockFree>(threads, shards, per_thread));
                    locked.push(run::<Locked>(threads, shards, per_thread));
                } else {
                    locked.push(run::<Locked>(threads, shards, per_thread));
                    free.push(run::<LockFree>(threads, shards, per_thread));
                }
            }
            let ((free, free_spread), (locked, locked_spread)) = (median_spread(free), median_spread(locked));
            if json {
                rows.push(format!(
                    r#"{{"shards": {shards}, "threads": {threads}, "per_thread": {per_thread}, "repeats": {repeats}, "lock_free_ops_per_s": {}, "mutex_ops_per_s": {}, "ratio": {:.2}, "lock_free_spread": {free_spread:.2}, "mutex_spread": {locked_spread:.2}}}"#,
                    free.round(),
                    locked.round(),
                    free / locked
                ));
            } else {
                println!("{shards:>7}{threads:>8}{:>16.0}{:>16.0}{:>7.2}x", free, locked, free / locked);
            }
        }
    }
    if json {
        println!("[{}]", rows.join(", "));
    }
}

//! Interleaved timing: operations run one of each per round, in a shuffled
//! order, so that a burst of load from another process lands on all of them
//! alike and their ratios (per round, see [`Timings::ratio`]) hold on a
//! shared, noisy machine.
//!
//! Two things an operation leaves behind are kept from the next one's time:
//! - the allocator's deferred work: glibc's `free` of a small block only
//!   puts it on a list, and the next request that its per-thread cache
//!   cannot serve sorts every block on that list. After an operation that
//!   frees a 20 MB parse tree, that is hundreds of microseconds billed to
//!   whichever operation allocates next (a 10-event view measured 156 µs
//!   after JP's parse of 10,000 events, 17 µs after itself).
//!   [`settle_allocator`] runs that sort between operations, untimed.
//! - who runs after whom: caches are cold after a large operation and warm
//!   after a small one. With a fixed cyclic order an operation always
//!   follows the same neighbour; shuffling every round gives each one every
//!   neighbour.
//!
//! Criterion measures one benchmark after another; the benches use this
//! beside it for the ratios they print, and the `quick` bench uses only
//! this.

use std::time::{Duration, Instant};

/// One operation of an interleaved comparison: its name, and a closure that
/// runs it once and returns the time of the part to measure (setup outside
/// that part is not counted).
pub type Op<'a> = (&'a str, &'a mut dyn FnMut() -> Duration);

/// The times of every operation of one interleaved run.
#[derive(Clone, Debug)]
pub struct Timings {
    /// The operations' names, in the order given.
    pub names: Vec<String>,
    /// Every time of every operation, sorted ascending.
    pub samples: Vec<Vec<Duration>>,
    /// Every time of every operation in the order of the rounds
    /// (`by_round[i][r]`: operation `i` in round `r`).
    pub by_round: Vec<Vec<Duration>>,
    /// Rounds run (each operation ran once per round).
    pub rounds: usize,
}

/// Runs `ops` once each per round (in a shuffled order, the allocator
/// settled between them) for at least
/// `min_rounds` rounds, then until `max_rounds` rounds are done or `budget`
/// is spent.
pub fn interleaved(
    min_rounds: usize,
    max_rounds: usize,
    budget: Duration,
    ops: &mut [Op<'_>],
) -> Timings {
    let names: Vec<&str> = ops.iter().map(|(n, _)| *n).collect();
    interleaved_by(&names, min_rounds, max_rounds, budget, &mut |i| {
        (ops[i].1)()
    })
}

/// Seed of the order of the operations in the rounds (fixed: two runs
/// shuffle alike).
const ORDER_SEED: u64 = 0x6a70_2d6f_7264_6572;

/// Has the allocator do, now, the bookkeeping that the frees of the last
/// operation deferred (see the module's documentation): a request of 64 KiB
/// is larger than anything glibc's per-thread cache holds, so serving it
/// sorts blocks freed since the last such request, but at most 10,000 of
/// them per request (`MAX_ITERS` in glibc's `malloc/malloc.c`). An
/// operation that frees more (the `anthropic` view of 10,000 events frees
/// some 100,000 blocks) would leave the rest to the next operation: a
/// 10-event view measured 241 µs after that view with one request between
/// them, 98 µs with fifty. So the request is made [`SETTLE_REQUESTS`]
/// times; each finds the list empty once it is sorted and costs little.
pub fn settle_allocator() {
    for _ in 0..SETTLE_REQUESTS {
        drop(std::hint::black_box(Vec::<u8>::with_capacity(64 << 10)));
    }
}

/// Requests of [`settle_allocator`]: enough for 640,000 freed blocks.
pub const SETTLE_REQUESTS: usize = 64;

/// [`interleaved`] with the operations given by index: `run(i)` runs
/// operation `i` (named `names[i]`) once and returns its time.
pub fn interleaved_by(
    names: &[&str],
    min_rounds: usize,
    max_rounds: usize,
    budget: Duration,
    run: &mut dyn FnMut(usize) -> Duration,
) -> Timings {
    let mut samples: Vec<Vec<Duration>> = vec![Vec::new(); names.len()];
    let mut order: Vec<usize> = (0..names.len()).collect();
    let mut rng = crate::Rng::new(ORDER_SEED);
    let started = Instant::now();
    let mut rounds = 0;
    while rounds < max_rounds && (rounds < min_rounds || started.elapsed() < budget) {
        for k in (1..order.len()).rev() {
            order.swap(k, rng.below(k + 1));
        }
        for &i in &order {
            settle_allocator();
            samples[i].push(run(i));
        }
        rounds += 1;
    }
    let by_round = samples.clone();
    for s in &mut samples {
        s.sort_unstable();
    }
    Timings {
        names: names.iter().map(|n| (*n).to_owned()).collect(),
        samples,
        by_round,
        rounds,
    }
}

impl Timings {
    /// The `q` quantile (0..=1) of operation `i` (nearest rank below).
    pub fn quantile(&self, i: usize, q: f64) -> Duration {
        let s = &self.samples[i];
        if s.is_empty() {
            return Duration::ZERO;
        }
        s[((s.len() - 1) as f64 * q.clamp(0.0, 1.0)) as usize]
    }

    /// The median of operation `i`.
    pub fn median(&self, i: usize) -> Duration {
        self.quantile(i, 0.5)
    }

    /// How much more `a` costs than `b`: the median over rounds of `a`'s
    /// time over `b`'s time in the same round. Paired by round, a change of
    /// the machine's state that lasts a few rounds (a disk whose syncs take
    /// 0.2 ms for a while, then 4 ms) lands on both sides of each ratio,
    /// where the ratio of the two medians could compare one state with the
    /// other.
    pub fn ratio(&self, a: usize, b: usize) -> f64 {
        let mut r: Vec<f64> = self.by_round[a]
            .iter()
            .zip(&self.by_round[b])
            .map(|(x, y)| x.as_secs_f64() / y.as_secs_f64())
            .collect();
        if r.is_empty() {
            return f64::NAN;
        }
        r.sort_unstable_by(f64::total_cmp);
        r[(r.len() - 1) / 2]
    }

    /// `name median (p90 ...)` of every operation, in a unit that suits it.
    pub fn summary(&self) -> String {
        (0..self.names.len())
            .map(|i| {
                format!(
                    "{} {} (p90 {})",
                    self.names[i],
                    human(self.median(i)),
                    human(self.quantile(i, 0.9))
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// `a / b = r` of every pair of `ratios` (indexes into the operations).
    pub fn ratios(&self, ratios: &[(usize, usize)]) -> String {
        ratios
            .iter()
            .map(|&(a, b)| {
                format!(
                    "{} / {} = {:.2}",
                    self.names[a],
                    self.names[b],
                    self.ratio(a, b)
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl Timings {
    /// Prints (to stderr) the summary and the `ratios` under `title`.
    pub fn print(&self, title: &str, ratios: &[(usize, usize)]) {
        eprintln!(
            "  {title}, interleaved ({} rounds, medians): {}\n    ratios: {}",
            self.rounds,
            self.summary(),
            self.ratios(ratios)
        );
    }
}

/// `x` rounded to three significant digits.
pub fn three_digits(x: f64) -> f64 {
    if x == 0.0 || !x.is_finite() {
        return x;
    }
    let scale = 10f64.powi(2 - x.abs().log10().floor() as i32);
    (x * scale).round() / scale
}

/// A duration with three significant digits in us, ms or s.
pub fn human(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s < 1e-3 {
        format!("{:.0} us", s * 1e6)
    } else if s < 1.0 {
        format!("{:.1} ms", s * 1e3)
    } else {
        format!("{s:.2} s")
    }
}

/// Runs `f` once and returns its time.
pub fn timed(f: impl FnOnce()) -> Duration {
    let t = Instant::now();
    f();
    t.elapsed()
}

/// The median of `v` (the upper one of an even count; zero when empty).
pub fn median<T: Ord + Copy + Default>(mut v: Vec<T>) -> T {
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The order in which `interleaved` runs "a" and "b" for `rounds`
    /// rounds, and the timings.
    fn run_order(rounds: usize) -> (Vec<char>, Timings) {
        let order = std::cell::RefCell::new(Vec::new());
        let mut a = || {
            order.borrow_mut().push('a');
            Duration::from_micros(1)
        };
        let mut b = || {
            order.borrow_mut().push('b');
            Duration::from_micros(3)
        };
        let t = interleaved(
            rounds,
            rounds,
            Duration::ZERO,
            &mut [("a", &mut a), ("b", &mut b)],
        );
        (order.into_inner(), t)
    }

    #[test]
    fn rounds_run_each_once_in_a_shuffled_order_and_respect_the_limits() {
        let (order, t) = run_order(3);
        assert_eq!(t.rounds, 3);
        assert_eq!(order.len(), 6);
        for round in order.chunks(2) {
            assert!(round.contains(&'a') && round.contains(&'b'), "{order:?}");
        }
        // The same order in every run; over many rounds, each operation
        // goes first in some and second in others.
        assert_eq!(run_order(3).0, order);
        let (many, _) = run_order(40);
        let firsts: Vec<char> = many.chunks(2).map(|r| r[0]).collect();
        assert!(firsts.contains(&'a') && firsts.contains(&'b'), "{firsts:?}");
        assert!((t.ratio(1, 0) - 3.0).abs() < 1e-9);
        assert_eq!(t.by_round[0].len(), 3);
        assert_eq!(median(vec![3, 1, 2]), 2);
        assert_eq!(median(Vec::<u32>::new()), 0);
        assert_eq!(three_digits(0.012_345), 0.0123);
        assert_eq!(three_digits(12_345.0), 12_300.0);
    }
}

//! The writers' clock of format-spec.md 5.5: on a backend whose locks do
//! not exclude writers on other machines (S3), gc cannot stop writers, so it
//! makes its deletions undoable for as long as a writer that saw a blob
//! before gc took it away may still make a record referencing it durable.
//! This clock bounds that time.
//!
//! A writer starts a [`ClockTicket`] when it takes the gc lock shared, which
//! it does before its first look at the blob store (format-spec.md 4.7); the
//! ticket dates from [`LISTING_ALLOWANCE`] before that, since the blob store
//! may answer from a listing of packs up to that old
//! ([`WriterClock::listing_start`]). Before a backend writes a record that
//! may reference blobs (an append to a log, a new log), it calls
//! [`WriterClock::check`]: if the oldest open ticket is older than the bound
//! `B`, the write is refused and nothing is written. The write itself ends
//! within `T` ([`WriterClock::request_limit`]) or its outcome is unknown and
//! the handle is poisoned. So a record referencing a blob a writer saw at
//! `t` is durable by `t + B + T` or never; gc waits that long before it
//! looks again. Durations are measured on each process's monotonic clock:
//! no agreement between the clocks of machines is needed.

use std::collections::BTreeMap;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How old a listing of packs the blob store may answer a writer's lookup
/// from, at most (and at most a quarter of the bound): a ticket dates from
/// this long before it was taken, and the blob store lists the packs again
/// before a lookup when its listing is older than the newest ticket.
pub const LISTING_ALLOWANCE: Duration = Duration::from_secs(30);

/// The default bound `B` on the time from a writer's first look at the blob
/// store to the start of the write of its record.
pub const DEFAULT_WRITE_BOUND: Duration = Duration::from_secs(600);

/// See the module documentation.
#[derive(Debug)]
pub struct WriterClock {
    bound: Duration,
    request_limit: Duration,
    next: AtomicU64,
    /// Open tickets: their start.
    open: Mutex<BTreeMap<u64, Instant>>,
}

/// A writer's window, open until dropped.
#[derive(Debug)]
pub struct ClockTicket {
    clock: Arc<WriterClock>,
    id: u64,
}

impl Drop for ClockTicket {
    fn drop(&mut self) {
        self.clock.open().remove(&self.id);
    }
}

impl WriterClock {
    /// A clock with bound `B` = `bound`, for a client whose writes end
    /// within `request_limit` (`T`) or have an unknown outcome.
    pub fn new(bound: Duration, request_limit: Duration) -> Arc<Self> {
        Arc::new(WriterClock {
            bound,
            request_limit,
            next: AtomicU64::new(0),
            open: Mutex::new(BTreeMap::new()),
        })
    }

    fn open(&self) -> MutexGuard<'_, BTreeMap<u64, Instant>> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `B`.
    pub fn bound(&self) -> Duration {
        self.bound
    }

    /// `T`.
    pub fn request_limit(&self) -> Duration {
        self.request_limit
    }

    /// How long gc waits after its last move before it reads the logs again:
    /// `B + T`.
    pub fn gc_wait(&self) -> Duration {
        self.bound.saturating_add(self.request_limit)
    }

    /// How old a listing of packs may answer a writer's lookup:
    /// [`LISTING_ALLOWANCE`], or a quarter of the bound if that is less.
    pub fn listing_allowance(&self) -> Duration {
        LISTING_ALLOWANCE.min(self.bound / 4)
    }

    /// Opens a writer's window, dated [`WriterClock::listing_allowance`]
    /// ago.
    pub fn start(self: &Arc<Self>) -> ClockTicket {
        let now = Instant::now();
        let since = now.checked_sub(self.listing_allowance()).unwrap_or(now);
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.open().insert(id, since);
        ClockTicket {
            clock: Arc::clone(self),
            id,
        }
    }

    /// The start of the newest open window: a listing of packs older than
    /// this must not answer a writer's lookup. `None` when no writer is in
    /// its window.
    pub fn listing_start(&self) -> Option<Instant> {
        self.open().values().max().copied()
    }

    /// Whether a record may be written now: every open window is younger
    /// than `B`. The error (`TimedOut`) says what was refused and why.
    pub fn check(&self) -> io::Result<()> {
        let Some(oldest) = self.open().values().min().copied() else {
            return Ok(());
        };
        let age = oldest.elapsed();
        if age <= self.bound {
            return Ok(());
        }
        Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!(
                "{:.0} s passed since this command first looked at the blob store, more than the \
                 {:.0} s a writer may take on a shared store (format-spec.md 5.5): a gc on another \
                 machine may have moved what it found; nothing of this record was written, run the \
                 command again",
                age.as_secs_f64(),
                self.bound.as_secs_f64()
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_older_than_the_bound_refuses_and_a_closed_one_does_not() {
        let clock = WriterClock::new(Duration::from_millis(40), Duration::from_secs(1));
        assert!(clock.check().is_ok(), "no window open");
        let ticket = clock.start();
        assert_eq!(clock.listing_allowance(), Duration::from_millis(10));
        std::thread::sleep(Duration::from_millis(60));
        let err = clock.check().expect_err("older than B");
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert!(err
            .to_string()
            .contains("nothing of this record was written"));
        drop(ticket);
        assert!(clock.check().is_ok(), "the window closed");
        assert_eq!(clock.listing_start(), None);
    }

    #[test]
    fn a_young_window_passes_and_the_newest_start_bounds_listings() {
        let clock = WriterClock::new(Duration::from_secs(3600), Duration::from_secs(5));
        let a = clock.start();
        let b = clock.start();
        assert!(clock.check().is_ok());
        let newest = clock.listing_start().expect("open");
        assert!(newest <= Instant::now());
        assert_eq!(clock.gc_wait(), Duration::from_secs(3605));
        drop(a);
        drop(b);
        assert!(clock.listing_start().is_none());
    }
}

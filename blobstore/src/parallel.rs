//! The worker threads of batch put and verify: workers produce results, the
//! calling thread consumes them as they arrive.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Mutex};

use crate::error::Result;

/// Where a worker puts its results.
pub(crate) struct Sink<'a, R> {
    tx: mpsc::SyncSender<Result<R>>,
    stop: &'a AtomicBool,
}

impl<R> Sink<'_, R> {
    /// Hands a result to the calling thread (waiting while its queue is
    /// full). `false` once the caller has stopped: the worker should return.
    pub(crate) fn send(&self, result: R) -> bool {
        !self.stopped() && self.tx.send(Ok(result)).is_ok()
    }

    /// Whether the caller has stopped (on an error): work still to do is
    /// not wanted.
    pub(crate) fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
}

/// Runs `worker` on `threads` threads (at least one) and passes what they
/// send, in arrival order, to `consume` on the calling thread. At most
/// `threads * queue` results wait in memory. The first error, returned by a
/// worker or by `consume`, stops the workers and is returned.
pub(crate) fn workers<R: Send>(
    threads: usize,
    queue: usize,
    worker: impl Fn(&Sink<'_, R>) -> Result<()> + Sync,
    mut consume: impl FnMut(R) -> Result<()>,
) -> Result<()> {
    let threads = threads.max(1);
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let (tx, rx) = mpsc::sync_channel::<Result<R>>(threads * queue.max(1));
        for _ in 0..threads {
            let sink = Sink {
                tx: tx.clone(),
                stop: &stop,
            };
            let worker = &worker;
            s.spawn(move || {
                if let Err(e) = worker(&sink) {
                    let _ = sink.tx.send(Err(e));
                }
            });
        }
        drop(tx);
        for result in rx.iter() {
            if let Err(e) = result.and_then(&mut consume) {
                // Workers see the flag, or a closed channel once `rx` drops.
                stop.store(true, Ordering::Relaxed);
                return Err(e);
            }
        }
        Ok(())
    })
}

/// Computes `work(state, i)` for `i in 0..count` on up to `threads` workers,
/// each starting with `init()` as its state (buffers to reuse, say), and
/// passes each result, in completion order, to `consume` on the calling
/// thread, as [`workers`] does.
///
/// `beside` is other work of the caller's, run once by the first worker to
/// start, before it takes its first index: it then shares the workers'
/// cores instead of competing with them from a thread of its own, and the
/// other workers' indexes keep the cores busy until it is done. Its result
/// is returned whatever the workers' outcome; if they stop (on an error)
/// before one of them started it, it runs on the calling thread.
pub(crate) fn run<S, R: Send, T: Send>(
    count: usize,
    threads: usize,
    queue: usize,
    init: impl Fn() -> S + Sync,
    work: impl Fn(&mut S, usize) -> Result<R> + Sync,
    consume: impl FnMut(R) -> Result<()>,
    beside: impl FnOnce() -> T + Send,
) -> (Result<()>, T) {
    let next = AtomicUsize::new(0);
    let beside = Mutex::new(Some(beside));
    let beside_done = Mutex::new(None);
    let result = workers(
        threads.clamp(1, count.max(1)),
        queue,
        |sink| {
            let first = beside.lock().unwrap_or_else(|e| e.into_inner()).take();
            if let Some(f) = first {
                let done = f();
                *beside_done.lock().unwrap_or_else(|e| e.into_inner()) = Some(done);
            }
            let mut state = init();
            while !sink.stopped() {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= count || !sink.send(work(&mut state, i)?) {
                    break;
                }
            }
            Ok(())
        },
        consume,
    );
    let done = match beside_done.into_inner().unwrap_or_else(|e| e.into_inner()) {
        Some(done) => done,
        None => match beside.into_inner().unwrap_or_else(|e| e.into_inner()) {
            Some(f) => f(),
            None => unreachable!("a worker that took the work beside stored its result"),
        },
    };
    (result, done)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    #[test]
    fn every_index_is_computed_once_and_the_work_beside_runs_once() {
        for threads in [1, 2, 4] {
            for count in [0, 1, 50] {
                let mut got = Vec::new();
                let (result, beside) = run(
                    count,
                    threads,
                    2,
                    || (),
                    |_, i| Ok(i * 2),
                    |r| {
                        got.push(r);
                        Ok(())
                    },
                    || "beside",
                );
                assert!(result.is_ok());
                assert_eq!(beside, "beside");
                got.sort_unstable();
                assert_eq!(got, (0..count).map(|i| i * 2).collect::<Vec<_>>());
            }
        }
    }

    #[test]
    fn the_work_beside_runs_when_the_workers_stop_on_an_error() {
        let runs = AtomicUsize::new(0);
        let (result, ()) = run(
            100,
            2,
            1,
            || (),
            |_, i| {
                if i == 3 {
                    Err(Error::NotFound {
                        id: crate::BlobId::of(b"x"),
                        damaged_index: None,
                    })
                } else {
                    Ok(i)
                }
            },
            |_| Ok(()),
            || {
                runs.fetch_add(1, Ordering::Relaxed);
            },
        );
        assert!(matches!(result, Err(Error::NotFound { .. })));
        assert_eq!(runs.load(Ordering::Relaxed), 1);
    }
}

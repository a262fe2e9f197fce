//! The worker threads of batch put and verify: workers produce results, the
//! calling thread consumes them as they arrive.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;

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
pub(crate) fn run<S, R: Send>(
    count: usize,
    threads: usize,
    queue: usize,
    init: impl Fn() -> S + Sync,
    work: impl Fn(&mut S, usize) -> Result<R> + Sync,
    consume: impl FnMut(R) -> Result<()>,
) -> Result<()> {
    let next = AtomicUsize::new(0);
    workers(
        threads.clamp(1, count.max(1)),
        queue,
        |sink| {
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
    )
}

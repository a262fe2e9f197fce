//! The worker pool shared by batch put and verify: `threads` workers compute
//! items by index; the calling thread consumes the results as they arrive.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;

use crate::error::Result;

/// Computes `work(i)` for `i in 0..count` on up to `threads` worker threads and
/// passes each result, in completion order, to `consume` on the calling
/// thread. At most `threads * queue` results wait in memory. The first error,
/// from `work` or from `consume`, stops the workers and is returned.
pub(crate) fn run<R: Send>(
    count: usize,
    threads: usize,
    queue: usize,
    work: impl Fn(usize) -> Result<R> + Sync,
    consume: impl FnMut(R) -> Result<()>,
) -> Result<()> {
    run_with(count, threads, queue, || (), |(), i| work(i), consume)
}

/// [`run`] with per-worker state: each worker starts with `init()` and
/// passes it to every `work` call it makes (buffers to reuse, say).
pub(crate) fn run_with<S, R: Send>(
    count: usize,
    threads: usize,
    queue: usize,
    init: impl Fn() -> S + Sync,
    work: impl Fn(&mut S, usize) -> Result<R> + Sync,
    mut consume: impl FnMut(R) -> Result<()>,
) -> Result<()> {
    let threads = threads.clamp(1, count.max(1));
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let (tx, rx) = mpsc::sync_channel::<Result<R>>(threads * queue.max(1));
        for _ in 0..threads {
            let tx = tx.clone();
            let (next, stop, init, work) = (&next, &stop, &init, &work);
            s.spawn(move || {
                let mut state = init();
                loop {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= count {
                        break;
                    }
                    let result = work(&mut state, i);
                    let failed = result.is_err();
                    if tx.send(result).is_err() || failed {
                        break;
                    }
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

//! Mapping a slice on all cores, keeping its order (decoding and packing log
//! entries). Threads are scoped: nothing outlives the call.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

/// The cores to use: all of them, at most 8. Asked of the system once per
/// process (the answer reads cgroup files: a dozen system calls, more than
/// reading a short conversation).
pub fn cores() -> usize {
    static CORES: OnceLock<usize> = OnceLock::new();
    *CORES.get_or_init(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
            .clamp(1, 8)
    })
}

/// `items.iter().map(f).collect()`, with the items handed out one by one to
/// up to [`cores`] threads (the caller's among them) when there are at
/// least two. A panic in `f` goes on in the caller's thread.
pub(crate) fn map_ordered<T: Sync, U: Send>(items: &[T], f: impl Fn(&T) -> U + Sync) -> Vec<U> {
    let threads = cores().min(items.len());
    if threads < 2 {
        return items.iter().map(f).collect();
    }
    let next = AtomicUsize::new(0);
    let mut slots: Vec<Mutex<Option<U>>> = Vec::new();
    slots.resize_with(items.len(), || Mutex::new(None));
    let work = || loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        let Some(item) = items.get(i) else { break };
        let out = f(item);
        // A slot's lock is only ever taken here, once: never poisoned.
        if let Ok(mut slot) = slots[i].lock() {
            *slot = Some(out);
        }
    };
    std::thread::scope(|scope| {
        let helpers: Vec<_> = (1..threads).map(|_| scope.spawn(work)).collect();
        work();
        for h in helpers {
            if let Err(panic) = h.join() {
                std::panic::resume_unwind(panic);
            }
        }
    });
    slots
        .into_iter()
        .map(|s| {
            s.into_inner()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .unwrap_or_else(|| unreachable!("every item is mapped before the scope ends"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_order_of_the_items() {
        let items: Vec<u64> = (0..1000).collect();
        let out = map_ordered(&items, |x| x * x);
        assert_eq!(out, items.iter().map(|x| x * x).collect::<Vec<_>>());
        assert_eq!(map_ordered(&[] as &[u8], |x| *x), Vec::<u8>::new());
        assert_eq!(map_ordered(&[7u8], |x| x + 1), vec![8]);
    }
}

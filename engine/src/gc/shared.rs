//! gc on a shared store (format-spec.md 5.5): a store whose locks exclude
//! the threads of one process only (S3), so that gc cannot stop writers on
//! other machines. Deletions are made undoable for as long as such a writer
//! may still make a record durable that references what gc took away:
//!
//! 1. gc takes the lock object `gc/lock` (created if absent; one run at a
//!    time), renewed by a heartbeat while the run lasts. A lock that nobody
//!    renews for `B + T` is taken over; the trash of the run that held it is
//!    put back whole.
//! 2. It marks (reads every log) and sweeps as on a file system, except that
//!    what the sweep removes is *moved* to `gc/trash/<run>/` (the blob
//!    store's trash mode), each move allowed only while the heartbeat is
//!    fresh.
//! 3. It waits `B + T` after its last move (writers refuse to write a record
//!    once their window on the writers' clock is older than `B`, and a
//!    write ends within `T`), reads every log again, copies back from the
//!    trash what a record now references, and only then deletes the trash.
//!
//! `B` and `T` come from the backend's
//! [`WriterClock`](jpstore_blobstore::backend::WriterClock).

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use jpstore_blobstore::backend::{Backend, Expect, LockKind, Put, Version};

use super::{GcError, GcOptions, GcPhase, GcProgress, GcReport};
use crate::conversation::gc_lock;
use crate::error::{Error, Result};
use crate::store::Store;

/// The prefix of gc's objects on a shared store.
pub const GC_PREFIX: &str = "gc";
/// The lock object of gc on a shared store.
pub const LOCK_KEY: &str = "gc/lock";
/// The prefix below which each run keeps its trash (`gc/trash/<run>/`).
pub const TRASH_PREFIX: &str = crate::store::GC_TRASH_DIR;

/// What the lock object holds (JSON).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct LockBody {
    /// The run.
    run: String,
    /// Its process.
    pid: u32,
    /// Heartbeats so far: each renewal changes the object.
    beat: u64,
}

fn new_run_id() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{nanos:x}-{}", std::process::id())
}

fn io_error(backend: &dyn Backend, op: &'static str, key: &Path, source: io::Error) -> Error {
    Error::Io {
        op,
        path: backend.display(key),
        source,
    }
}

/// The state the heartbeat shares with the run.
#[derive(Debug)]
struct Beat {
    /// When the lock was last renewed (or taken).
    last_ok: Instant,
    /// Its version then.
    version: Version,
    /// Why the lock is lost, once it is.
    lost: Option<String>,
    /// Set to end the heartbeat.
    stop: bool,
}

/// The lock object of a run, renewed by a thread until released.
struct RunLock {
    backend: Arc<dyn Backend>,
    /// The run.
    run: String,
    /// Longest time between renewals before the lock counts as abandoned.
    stale_after: Duration,
    state: Arc<(Mutex<Beat>, Condvar)>,
    thread: Option<JoinHandle<()>>,
}

impl RunLock {
    /// Takes `gc/lock` for `run`: creates it, or waits for the run that
    /// holds it to end, or takes it over when it is not renewed for
    /// `stale_after`.
    fn acquire(
        backend: &Arc<dyn Backend>,
        run: &str,
        stale_after: Duration,
        progress: &mut dyn FnMut(GcProgress),
    ) -> Result<RunLock, GcError> {
        let key = Path::new(LOCK_KEY);
        let scratch = Path::new(GC_PREFIX).join("lock.tmp");
        let body = |beat| {
            serde_json::to_vec(&LockBody {
                run: run.to_owned(),
                pid: std::process::id(),
                beat,
            })
            .map_err(|e| io_error(&**backend, "encode", key, io::Error::other(e)))
        };
        let poll = (stale_after / 20).clamp(Duration::from_millis(100), Duration::from_secs(5));
        loop {
            match backend.put_if_absent(key, &body(0)?, &scratch) {
                Ok(Put::Created) => {
                    let version = Self::version(backend, key)?;
                    return Ok(Self::start(backend, run, stale_after, version));
                }
                Ok(Put::Existed) => {}
                Err(e) => return Err(Error::from_backend(&**backend, e).into()),
            }
            // Held: watch it. A renewal means a live run; no change for
            // `stale_after` means a run that died.
            let seen = match backend.head(key) {
                Ok(m) => m.version,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(io_error(&**backend, "inspect", key, e).into()),
            };
            let holder = Self::holder(backend, key);
            let watched = Instant::now();
            let mut released = false;
            while watched.elapsed() < stale_after {
                std::thread::sleep(poll);
                progress(GcProgress {
                    phase: GcPhase::Waiting,
                    marked: watched.elapsed().as_secs() as usize,
                    total: stale_after.as_secs() as usize,
                });
                match backend.head(key) {
                    Ok(m) if m.version == seen => {}
                    Ok(_) => {
                        return Err(GcError::Running {
                            lock: backend.display(key),
                            run: holder,
                            renewed: format!("after {:.1} s", watched.elapsed().as_secs_f64()),
                        })
                    }
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {
                        released = true;
                        break;
                    }
                    Err(e) => return Err(io_error(&**backend, "inspect", key, e).into()),
                }
            }
            if released {
                continue;
            }
            // Not renewed for `stale_after`: take it over, only if it is
            // still the version watched.
            match backend.replace(key, &body(0)?, &scratch, Expect::Version(seen), true) {
                Ok(()) => {
                    let version = Self::version(backend, key)?;
                    return Ok(Self::start(backend, run, stale_after, version));
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    return Err(GcError::Running {
                        lock: backend.display(key),
                        run: holder,
                        renewed: "as it was taken over".into(),
                    })
                }
                Err(e) => return Err(Error::from_backend(&**backend, e).into()),
            }
        }
    }

    fn version(backend: &Arc<dyn Backend>, key: &Path) -> Result<Version> {
        backend
            .head(key)
            .map(|m| m.version)
            .map_err(|e| io_error(&**backend, "inspect", key, e))
    }

    /// The run named by the lock object (for messages).
    fn holder(backend: &Arc<dyn Backend>, key: &Path) -> String {
        read_body(&**backend, key).map_or_else(
            || "(unreadable)".into(),
            |b| format!("{} (pid {})", b.run, b.pid),
        )
    }

    /// Starts the heartbeat of a lock just taken at `version`.
    fn start(
        backend: &Arc<dyn Backend>,
        run: &str,
        stale_after: Duration,
        version: Version,
    ) -> RunLock {
        let state = Arc::new((
            Mutex::new(Beat {
                last_ok: Instant::now(),
                version,
                lost: None,
                stop: false,
            }),
            Condvar::new(),
        ));
        let interval = (stale_after / 10).max(Duration::from_millis(50));
        let thread = {
            let backend = Arc::clone(backend);
            let state = Arc::clone(&state);
            let run = run.to_owned();
            std::thread::Builder::new()
                .name("jpstore-gc-heartbeat".into())
                .spawn(move || heartbeat(&*backend, &run, interval, &state))
                .ok()
        };
        let lock = RunLock {
            backend: Arc::clone(backend),
            run: run.to_owned(),
            stale_after,
            state,
            thread,
        };
        if lock.thread.is_none() {
            lock.beat().lost = Some("its heartbeat thread could not be started".into());
        }
        lock
    }

    fn beat(&self) -> std::sync::MutexGuard<'_, Beat> {
        self.state.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the run may still move objects: the lock is not lost and
    /// was renewed within a third of `stale_after` (so a run that takes it
    /// over, after `stale_after` without renewal, finds every move of this
    /// one made long before).
    fn check(&self) -> io::Result<()> {
        fresh(&self.state, self.stale_after)
    }

    /// Stops the heartbeat and deletes the lock object if it still names
    /// this run (one taken over is not this run's to delete; a takeover
    /// needs `stale_after` without renewal, and the heartbeat ran until
    /// now).
    fn release(mut self) -> Result<()> {
        self.beat().stop = true;
        self.state.1.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let key = Path::new(LOCK_KEY);
        match read_body(&*self.backend, key) {
            Some(body) if body.run == self.run => self
                .backend
                .delete(&[key.to_path_buf()])
                .map(|_| ())
                .map_err(|e| Error::from_backend(&*self.backend, e)),
            _ => Ok(()),
        }
    }
}

impl Drop for RunLock {
    fn drop(&mut self) {
        self.beat().stop = true;
        self.state.1.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// See [`RunLock::check`].
fn fresh(state: &(Mutex<Beat>, Condvar), stale_after: Duration) -> io::Result<()> {
    let beat = state.0.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(why) = &beat.lost {
        return Err(io::Error::other(why.clone()));
    }
    let age = beat.last_ok.elapsed();
    if age > stale_after / 3 {
        return Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!(
                "the lock was last renewed {:.1} s ago, more than a third of the {:.1} s \
                 after which another gc may take it over",
                age.as_secs_f64(),
                stale_after.as_secs_f64()
            ),
        ));
    }
    Ok(())
}

/// Renews the lock every `interval` until told to stop or the lock is
/// lost (another run replaced it). A renewal that fails otherwise is tried
/// again at the next beat; the run's [`RunLock::check`] stops its moves if
/// renewals keep failing.
fn heartbeat(backend: &dyn Backend, run: &str, interval: Duration, state: &(Mutex<Beat>, Condvar)) {
    let key = Path::new(LOCK_KEY);
    let scratch = Path::new(GC_PREFIX).join("lock.tmp");
    let mut n = 0u64;
    loop {
        let version = {
            let guard = state.0.lock().unwrap_or_else(|e| e.into_inner());
            let (guard, _) = state
                .1
                .wait_timeout_while(guard, interval, |b| !b.stop)
                .unwrap_or_else(|e| e.into_inner());
            if guard.stop || guard.lost.is_some() {
                return;
            }
            guard.version.clone()
        };
        n += 1;
        let Ok(body) = serde_json::to_vec(&LockBody {
            run: run.to_owned(),
            pid: std::process::id(),
            beat: n,
        }) else {
            continue;
        };
        let started = Instant::now();
        let outcome = backend
            .replace(key, &body, &scratch, Expect::Version(version), true)
            .map_err(|e| (e.kind(), e.to_string()))
            .and_then(|()| {
                backend
                    .head(key)
                    .map(|m| m.version)
                    .map_err(|e| (e.kind(), e.to_string()))
            });
        let mut guard = state.0.lock().unwrap_or_else(|e| e.into_inner());
        match outcome {
            Ok(version) => {
                // Fresh as of when the renewal was sent.
                guard.last_ok = started;
                guard.version = version;
            }
            // A 412 on a lock that still holds this very beat is ours: the
            // version read after the previous renewal was not the one the
            // server compares (a server may answer a HEAD from a replica
            // that lags). Read it again.
            Err((io::ErrorKind::AlreadyExists, _))
                if read_body(backend, key).is_some_and(|b| b.run == run && b.beat == n) =>
            {
                if let Ok(m) = backend.head(key) {
                    guard.last_ok = started;
                    guard.version = m.version;
                }
            }
            Err((io::ErrorKind::AlreadyExists | io::ErrorKind::NotFound, message)) => {
                guard.lost = Some(format!("the lock was replaced or removed: {message}"));
                return;
            }
            // Transient: tried again at the next beat.
            Err(_) => {}
        }
    }
}

/// What the lock object at `key` holds, if it can be read.
fn read_body(backend: &dyn Backend, key: &Path) -> Option<LockBody> {
    backend
        .open(key)
        .and_then(|o| jpstore_blobstore::backend::read_all(&*o, 4096))
        .ok()
        .and_then(|b| serde_json::from_slice::<LockBody>(&b).ok())
}

/// The trash of `run`.
fn trash_of(run: &str) -> PathBuf {
    Path::new(TRASH_PREFIX).join(run)
}

/// The runs with a trash.
fn trash_runs(store: &Store) -> Result<Vec<String>> {
    let backend = &**store.backend();
    let dir = Path::new(TRASH_PREFIX);
    match backend.list(dir) {
        Ok(entries) => Ok(entries
            .into_iter()
            .filter(|e| e.is_prefix())
            .map(|e| e.name)
            .collect()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(io_error(backend, "list", dir, e)),
    }
}

/// gc on a shared store (see the module documentation).
pub(crate) fn gc_shared(
    store: &Store,
    options: GcOptions,
    progress: &mut dyn FnMut(GcProgress),
) -> Result<GcReport, GcError> {
    let backend = Arc::clone(store.backend());
    let Some(clock) = backend.writer_clock().cloned() else {
        return Err(GcError::Unsafe {
            store: backend.display(Path::new(".")),
        });
    };
    let wait = clock.gc_wait();
    // The threads of this process are excluded by the process's lock, the
    // other processes by the lock object.
    let _exclusive = gc_lock(&*backend, LockKind::Exclusive)?;
    let run = new_run_id();
    let lock = RunLock::acquire(&backend, &run, wait, progress)?;
    let mut report = GcReport {
        dry_run: false,
        ..GcReport::default()
    };
    // The trash of runs that did not finish goes back whole: whether a
    // writer needs what is in it was never checked. (A run that held the
    // lock has not renewed it for `wait`, and moves nothing without a fresh
    // renewal, so none of its moves is still to come.)
    for other in trash_runs(store)? {
        if other == run {
            continue;
        }
        lock.check()
            .map_err(|e| lost(store, &run, e.to_string(), 0))?;
        let prefix = trash_of(&other);
        report.restored += store.blobs().restore_all(&prefix)?;
        store.blobs().empty_trash(&prefix)?;
    }
    let outcome = run_locked(store, options, &lock, &run, wait, &mut report, progress);
    match outcome {
        Ok(()) => {
            lock.release()?;
            store.remove_leftovers(options, SystemTime::now(), &mut report)?;
            Ok(report)
        }
        Err(e) => {
            // Put back whatever went to this run's trash: always safe, and
            // what is left of it if this fails is put back by the next run.
            drop(store.blobs().end_trash());
            let prefix = trash_of(&run);
            let restored = store.blobs().restore_all(&prefix)?;
            store.blobs().empty_trash(&prefix)?;
            let _ = lock.release();
            Err(match e {
                GcError::LockLost { reason, .. } => GcError::LockLost {
                    lock: store.backend().display(Path::new(LOCK_KEY)),
                    reason,
                    restored,
                },
                other => other,
            })
        }
    }
}

fn lost(store: &Store, run: &str, reason: String, restored: usize) -> GcError {
    GcError::LockLost {
        lock: store.backend().display(Path::new(LOCK_KEY)),
        reason: format!("run {run}: {reason}"),
        restored,
    }
}

/// Steps 2 and 3 of the module documentation, under the run's lock.
fn run_locked(
    store: &Store,
    options: GcOptions,
    lock: &RunLock,
    run: &str,
    wait: Duration,
    report: &mut GcReport,
    progress: &mut dyn FnMut(GcProgress),
) -> Result<(), GcError> {
    let now = SystemTime::now();
    let (live, conversations) = store.referenced_blobs(progress)?;
    report.conversations = conversations;
    report.referenced = live.len();
    let prefix = trash_of(run);
    let state = Arc::clone(&lock.state);
    let stale_after = lock.stale_after;
    let may_move: jpstore_blobstore::MayMove = Arc::new(move || fresh(&state, stale_after));
    store.blobs().start_trash(prefix.clone(), may_move);
    let swept = store.sweep(options, now, &live, report);
    let moved = store.blobs().end_trash();
    if let Err(e) = swept {
        return Err(match lock.check() {
            Err(why) => lost(store, run, why.to_string(), 0),
            Ok(()) => e.into(),
        });
    }
    if moved.loose.is_empty() && moved.packs.is_empty() {
        return Ok(());
    }
    // Step 3: wait out every writer that may have seen a moved object.
    let last_move = Instant::now();
    let step = (wait / 50).clamp(Duration::from_millis(50), Duration::from_secs(1));
    while last_move.elapsed() < wait {
        lock.check()
            .map_err(|e| lost(store, run, e.to_string(), 0))?;
        std::thread::sleep(step.min(wait.saturating_sub(last_move.elapsed())));
        progress(GcProgress {
            phase: GcPhase::Waiting,
            marked: last_move.elapsed().as_secs() as usize,
            total: wait.as_secs() as usize,
        });
    }
    report.waited_secs = last_move.elapsed().as_secs();
    let (live, _) = store.referenced_blobs(&mut |p| {
        progress(GcProgress {
            phase: GcPhase::Remarking,
            ..p
        })
    })?;
    lock.check()
        .map_err(|e| lost(store, run, e.to_string(), 0))?;
    let restored = store
        .blobs()
        .restore_moved(&prefix, &moved, &|id| live.contains(id))?;
    report.restored += restored.loose + restored.packs;
    lock.check()
        .map_err(|e| lost(store, run, e.to_string(), 0))?;
    store.blobs().empty_trash(&prefix)?;
    Ok(())
}

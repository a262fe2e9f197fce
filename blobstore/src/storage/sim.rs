//! A simulated, in-memory [`Storage`] for crash-consistency and fault tests.
//!
//! # Model
//!
//! [`SimStorage`] is a small POSIX-like file system: directories map names to
//! inodes, a file is an inode (so [`Storage::link_noreplace`] gives one inode a
//! second name, and writes through either name are seen through both), and
//! every inode has a modification time taken from a simulated clock
//! ([`SimStorage::now`]) that advances by one millisecond on every mutating
//! operation and is moved by [`SimStorage::set_time`] and
//! [`SimStorage::advance_clock`]. Errors carry the raw Linux `errno` the same
//! call would give (`ENOENT`, `EEXIST`, `ENOTDIR`, `EISDIR`, `ENOTEMPTY`,
//! `ENOSPC`, ...), so their [`io::ErrorKind`] is the one of [`LocalStorage`];
//! bad paths fail through [`check_relative`] with `InvalidInput`.
//!
//! The storage keeps two images apart:
//!
//! - the **written** image, which every read sees at once;
//! - the **durable** image, which survives a crash. A file's data and length
//!   become durable when `sync_data` or `sync_all` is called on a handle to its
//!   inode (both behave the same, and also make its mtime durable). A
//!   directory's entries (creations, links, renames, removals, new
//!   subdirectories) become durable only through [`Storage::sync_dir`] on that
//!   directory, which makes its durable entry set equal to the written one,
//!   including which inode each name points to. `sync_all` of a file never
//!   makes its name durable.
//!
//! A failed sync ([`SimStorage::fail_next_sync`]) makes nothing durable. For a
//! file it also models Linux's behaviour after a writeback error: the unsynced
//! writes stay readable but are marked clean, so a later, successful sync does
//! **not** make them durable. Code that retries an fsync instead of poisoning
//! the handle is caught by a crash after the retry.
//!
//! # Crashes
//!
//! [`SimStorage::crash`] replaces the written image with one derived from the
//! durable image according to a [`CrashMode`] (see its variants for exactly
//! what each keeps); the result is fully durable and the storage goes on.
//! Inodes reachable from no surviving name vanish. Every handle opened before
//! the crash fails from then on. [`SimStorage::crash_at_sync`] arms a crash at
//! the n-th sync to come: that sync does not take effect, the storage crashes,
//! the call fails, and every operation fails until [`SimStorage::restart`].
//! Every attempted sync (`sync_data`, `sync_all`, `sync_dir`) on a valid target
//! is counted by [`SimStorage::sync_count`], so a test can count the syncs of a
//! workload once and then crash it at each of them. All randomness comes from
//! the seed of the mode, so a run is reproducible. After a crash, each inode's
//! mtime is the one made durable with it.
//!
//! # Locks
//!
//! [`StorageFile::lock`] behaves like `flock(2)` with every handle its own open
//! file description: two handles of one storage conflict like two processes.
//! As on Linux, changing the kind of a held lock first drops it, so a failed
//! non-blocking conversion leaves the handle with no lock. A blocking `lock`
//! waits on a condition variable; a crash wakes it with an error.
//!
//! # Limits
//!
//! - No symbolic links are followed: [`SimStorage::make_symlink`] plants one,
//!   and opening, mapping, listing or syncing it (or walking through it) fails
//!   with `InvalidData`. `metadata` reports it as a non-directory whose length
//!   is that of its target, like `lstat`.
//! - Directories cannot be opened as files (`EISDIR`, even read-only).
//! - No permissions, owners, ctime or atime; a full disk only limits bytes
//!   passed to `write_at`, not metadata operations.
//! - Files are limited to 4 GiB (`EFBIG`) and kept in memory twice (written
//!   and durable). Unsynced writes and unsynced directory operations are kept
//!   until the next sync or crash, since a crash may persist any of them.
//! - If unsynced renames leave a directory durably under two names, a crash
//!   keeps the first reached (breadth first, by name) and drops the others.
//!
//! [`LocalStorage`]: super::LocalStorage

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;
use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::{
    check_relative, not_regular_error, symlink_error, DirEntry, FileId, FileKind, LockKind,
    Metadata, OpenMode, Storage, StorageFile,
};
use crate::mmap::Mapping;

/// What a crash keeps of the state that was written but not made durable.
///
/// In every mode, what was made durable survives exactly.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrashMode {
    /// Every file holds its last synced content and length, every directory
    /// its last synced entries: nothing unsynced survives.
    DropUnsynced,
    /// Directory entries as in [`CrashMode::DropUnsynced`]. Each surviving
    /// file with unsynced changes (writes and length changes since its last
    /// sync, in order) gets, drawn from the seed, one of:
    ///
    /// - (1 in 4) none of them;
    /// - (2 in 4) an in-order prefix: a cut is drawn uniformly over the bytes
    ///   of the unsynced writes (a length change counts as one unit); changes
    ///   before it are applied, the write it falls in is torn at that byte, the
    ///   rest are lost. This covers a torn append, nothing and everything;
    /// - (1 in 4) a reordering: each change independently persists or not (a
    ///   coin flip), in order; each persisting write keeps its bytes (1 in 2)
    ///   or has them replaced by zeros (1 in 4) or by pseudo-random garbage
    ///   (1 in 4), as when the length reached the disk but the data did not.
    ///
    /// Consecutive writes that extend each other (an append in several calls)
    /// count as one write.
    TearUnsynced {
        /// Seed of the draws.
        seed: u64,
    },
    /// Each unsynced directory operation (create, link, rename, remove,
    /// mkdir, rmdir, symlink) independently persists or not, by a coin flip
    /// from the seed, applied in order over the durable entries: POSIX orders
    /// none of them. A rename is one operation (both names or neither), unless
    /// one of its two directories was synced since. File data is then torn as
    /// in [`CrashMode::TearUnsynced`], including files that only an unsynced
    /// entry kept alive (their content may well be empty).
    KeepUnsyncedEntries {
        /// Seed of the draws.
        seed: u64,
    },
}

/// One name of [`SimStorage::snapshot`] or [`SimStorage::durable_snapshot`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SimNode {
    /// A file and its content.
    File(Vec<u8>),
    /// A directory (its entries are listed under their own paths).
    Dir,
    /// A symbolic link and its target.
    Symlink(PathBuf),
    /// A node that is neither a file, a directory nor a link (a FIFO, a
    /// socket, a device), made by [`SimStorage::make_special`].
    Special(FileKind),
}

/// The simulated storage. See the module documentation.
///
/// Cloning is cheap and gives another handle on the same file system, so a
/// test keeps one clone to crash and inspect while the code under test uses
/// another (for instance as an `Arc<dyn Storage>`). Inspection helpers
/// ([`SimStorage::read_file`], [`SimStorage::exists`], snapshots, counters)
/// work even while the storage is down after a crash.
#[derive(Clone)]
pub struct SimStorage {
    shared: Arc<Shared>,
}

type Ino = u64;
const ROOT: Ino = 1;
/// Largest file length the simulator accepts (`EFBIG` beyond).
const MAX_LEN: u64 = 1 << 32;
/// How far the clock moves on every mutating operation.
const TICK: Duration = Duration::from_millis(1);

struct Shared {
    state: Mutex<State>,
    /// Signalled whenever a lock is released or the storage crashes.
    cond: Condvar,
}

#[derive(Clone, Debug)]
enum FileOp {
    Write { offset: usize, bytes: Vec<u8> },
    SetLen(usize),
}

#[derive(Default)]
struct FileBody {
    data: Vec<u8>,
    durable: Vec<u8>,
    /// Changes since the last sync, oldest first; `durable` plus these is
    /// `data`, except after a failed sync cleared them.
    pending: Vec<FileOp>,
}

#[derive(Default)]
struct DirBody {
    entries: BTreeMap<String, Ino>,
    durable: BTreeMap<String, Ino>,
}

enum Body {
    File(FileBody),
    Dir(DirBody),
    Symlink(PathBuf),
    /// A FIFO, a socket or a device: it has a name and a kind, and
    /// [`Storage::open`] refuses it as the local backend does.
    Special(FileKind),
}

#[derive(Default)]
struct Locks {
    exclusive: Option<u64>,
    shared: BTreeSet<u64>,
}

struct Inode {
    body: Body,
    mtime: SystemTime,
    durable_mtime: SystemTime,
    /// Open handles of the current epoch.
    open: usize,
    locks: Locks,
}

impl Inode {
    fn new(body: Body, mtime: SystemTime) -> Self {
        Self {
            body,
            mtime,
            durable_mtime: mtime,
            open: 0,
            locks: Locks::default(),
        }
    }
}

/// One half of an unsynced directory operation: the name in the directory
/// now points to the inode (`None`: removed).
struct Part(Ino, String, Option<Ino>);

struct State {
    inodes: BTreeMap<Ino, Inode>,
    /// Unsynced directory operations, oldest first (each one or two parts).
    entry_log: Vec<Vec<Part>>,
    next_ino: Ino,
    next_handle: u64,
    /// Incremented by each crash; handles of an older epoch are dead.
    epoch: u64,
    down: bool,
    now: SystemTime,
    syncs: u64,
    crash_at: Option<(u64, CrashMode)>,
    fail_sync: Option<io::ErrorKind>,
    write_budget: Option<u64>,
    short_writes: bool,
    read_faults: BTreeSet<Ino>,
    live_after_gc: usize,
}

enum SyncStop {
    Crashed(u64),
    Failed(io::ErrorKind),
}

/// Deterministic pseudo-random numbers (SplitMix64).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `0..n` (`0` when `n == 0`), up to a negligible bias.
    fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next() % n
        }
    }
    fn coin(&mut self) -> bool {
        self.next() & 1 == 1
    }
}

fn os(code: i32) -> io::Error {
    io::Error::from_raw_os_error(code)
}

fn down_error() -> io::Error {
    io::Error::other("simulated crash: the storage is down until restart()")
}

/// The names of a path below the root (`.` is the root itself).
fn components(path: &Path) -> io::Result<Vec<String>> {
    if path == Path::new(".") {
        return Ok(Vec::new());
    }
    check_relative(path)?;
    let mut out = Vec::new();
    for c in path.components() {
        if let Component::Normal(name) = c {
            let name = name.to_str().ok_or_else(|| {
                io::Error::new(io::ErrorKind::InvalidInput, "path is not valid UTF-8")
            })?;
            out.push(name.to_owned());
        }
    }
    Ok(out)
}

fn to_len(len: u64) -> io::Result<usize> {
    if len > MAX_LEN {
        return Err(os(libc::EFBIG));
    }
    usize::try_from(len).map_err(|_| os(libc::EFBIG))
}

fn set_entry(entries: &mut BTreeMap<String, Ino>, name: &str, target: Option<Ino>) {
    match target {
        Some(t) => entries.insert(name.to_owned(), t),
        None => entries.remove(name),
    };
}

fn write_into(data: &mut Vec<u8>, offset: usize, bytes: &[u8]) {
    if bytes.is_empty() {
        return;
    }
    let end = offset + bytes.len();
    if data.len() < end {
        data.resize(end, 0);
    }
    data[offset..end].copy_from_slice(bytes);
}

fn apply(data: &mut Vec<u8>, op: &FileOp) {
    match op {
        FileOp::Write { offset, bytes } => write_into(data, *offset, bytes),
        FileOp::SetLen(len) => data.resize(*len, 0),
    }
}

/// The content a crash leaves of a file (see [`CrashMode::TearUnsynced`]).
fn tear(durable: &[u8], pending: &[FileOp], rng: &mut Rng) -> Vec<u8> {
    let mut out = durable.to_vec();
    if pending.is_empty() {
        return out;
    }
    let units = |op: &FileOp| match op {
        FileOp::Write { bytes, .. } => bytes.len() as u64,
        FileOp::SetLen(_) => 1,
    };
    match rng.below(4) {
        0 => {}
        1 | 2 => {
            let mut cut = rng.below(pending.iter().map(units).sum::<u64>() + 1);
            for op in pending {
                if cut >= units(op) {
                    apply(&mut out, op);
                    cut -= units(op);
                    continue;
                }
                if let FileOp::Write { offset, bytes } = op {
                    // `cut < bytes.len()` here, so the conversion is exact.
                    let keep = usize::try_from(cut).unwrap_or(0);
                    write_into(&mut out, *offset, &bytes[..keep]);
                }
                break;
            }
        }
        _ => {
            for op in pending {
                if !rng.coin() {
                    continue;
                }
                match op {
                    FileOp::Write { offset, bytes } => {
                        let damaged: Vec<u8> = match rng.below(4) {
                            0 => vec![0; bytes.len()],
                            1 => bytes.iter().map(|_| rng.next() as u8).collect(),
                            _ => bytes.clone(),
                        };
                        write_into(&mut out, *offset, &damaged);
                    }
                    FileOp::SetLen(_) => apply(&mut out, op),
                }
            }
        }
    }
    out
}

impl State {
    fn new() -> Self {
        let now = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let root = Inode::new(Body::Dir(DirBody::default()), now);
        Self {
            inodes: BTreeMap::from([(ROOT, root)]),
            entry_log: Vec::new(),
            next_ino: ROOT + 1,
            next_handle: 1,
            epoch: 0,
            down: false,
            now,
            syncs: 0,
            crash_at: None,
            fail_sync: None,
            write_budget: None,
            short_writes: false,
            read_faults: BTreeSet::new(),
            live_after_gc: 1,
        }
    }

    fn tick(&mut self) -> SystemTime {
        self.now += TICK;
        self.now
    }

    fn body(&self, ino: Ino) -> Option<&Body> {
        self.inodes.get(&ino).map(|n| &n.body)
    }

    fn inode_mut(&mut self, ino: Ino) -> io::Result<&mut Inode> {
        self.inodes.get_mut(&ino).ok_or_else(|| os(libc::EBADF))
    }

    /// Applies a change to the written data of a file and logs it as unsynced
    /// (a write extending the previous one joins it).
    fn modify(&mut self, ino: Ino, op: FileOp) -> io::Result<()> {
        let now = self.tick();
        let node = self.inode_mut(ino)?;
        node.mtime = now;
        let Body::File(f) = &mut node.body else {
            return Err(os(libc::EBADF));
        };
        apply(&mut f.data, &op);
        if let (
            Some(FileOp::Write { offset, bytes }),
            FileOp::Write {
                offset: at,
                bytes: more,
            },
        ) = (f.pending.last_mut(), &op)
        {
            if *offset + bytes.len() == *at {
                bytes.extend_from_slice(more);
                return Ok(());
            }
        }
        f.pending.push(op);
        Ok(())
    }

    fn file_mut(&mut self, ino: Ino) -> io::Result<&mut FileBody> {
        match self.inodes.get_mut(&ino).map(|n| &mut n.body) {
            Some(Body::File(f)) => Ok(f),
            _ => Err(os(libc::EBADF)),
        }
    }

    fn alloc(&mut self, body: Body) -> Ino {
        if self.inodes.len() >= 2 * self.live_after_gc + 64 {
            self.gc();
        }
        let ino = self.next_ino;
        self.next_ino += 1;
        let now = self.tick();
        self.inodes.insert(ino, Inode::new(body, now));
        ino
    }

    /// Drops inodes that no name (written, durable or in an unsynced
    /// operation) and no open handle can reach.
    fn gc(&mut self) {
        let mut stack = vec![ROOT];
        stack.extend(
            self.inodes
                .iter()
                .filter(|(_, n)| n.open > 0)
                .map(|(i, _)| *i),
        );
        stack.extend(self.entry_log.iter().flatten().filter_map(|p| p.2));
        let mut live = BTreeSet::new();
        while let Some(ino) = stack.pop() {
            if !live.insert(ino) {
                continue;
            }
            if let Some(Body::Dir(d)) = self.body(ino) {
                stack.extend(d.entries.values().chain(d.durable.values()));
            }
        }
        self.inodes.retain(|i, _| live.contains(i));
        self.read_faults.retain(|i| live.contains(i));
        self.live_after_gc = self.inodes.len();
    }

    fn walk(&self, names: &[String], path: &Path) -> io::Result<Ino> {
        let mut cur = ROOT;
        for name in names {
            cur = match self.body(cur) {
                Some(Body::Dir(d)) => *d.entries.get(name).ok_or_else(|| os(libc::ENOENT))?,
                Some(Body::Symlink(_)) => return Err(symlink_error(path)),
                _ => return Err(os(libc::ENOTDIR)),
            };
        }
        Ok(cur)
    }

    fn lookup(&self, path: &Path) -> io::Result<Ino> {
        self.walk(&components(path)?, path)
    }

    /// The directory holding the last name of `path`, and that name.
    fn parent(&self, path: &Path) -> io::Result<(Ino, String)> {
        check_relative(path)?;
        let mut names = components(path)?;
        let name = names.pop().ok_or_else(|| os(libc::EINVAL))?;
        let dir = self.walk(&names, path)?;
        self.dir_of(dir, path)?;
        Ok((dir, name))
    }

    /// The directory `ino`, named `path`: a symlink or a file is an error.
    fn dir_of(&self, ino: Ino, path: &Path) -> io::Result<&DirBody> {
        match self.body(ino) {
            Some(Body::Dir(d)) => Ok(d),
            Some(Body::Symlink(_)) => Err(symlink_error(path)),
            _ => Err(os(libc::ENOTDIR)),
        }
    }

    /// The file `ino`, named `path`: a symlink is an error, and so is
    /// anything else that is not a regular file (a [`super::NotRegularFile`] error,
    /// as the local backend gives).
    fn file_of(&self, ino: Ino, path: &Path) -> io::Result<&FileBody> {
        match self.body(ino) {
            Some(Body::File(f)) => Ok(f),
            Some(Body::Symlink(_)) => Err(symlink_error(path)),
            Some(Body::Dir(_)) => Err(not_regular_error(display(path), FileKind::Directory)),
            Some(Body::Special(kind)) => Err(not_regular_error(display(path), *kind)),
            None => Err(os(libc::ENOENT)),
        }
    }

    fn entry(&self, dir: Ino, name: &str) -> Option<Ino> {
        match self.body(dir) {
            Some(Body::Dir(d)) => d.entries.get(name).copied(),
            _ => None,
        }
    }

    fn is_dir(&self, ino: Ino) -> bool {
        matches!(self.body(ino), Some(Body::Dir(_)))
    }

    /// Applies one directory operation to the written image and logs it.
    fn change(&mut self, parts: Vec<Part>) {
        let now = self.tick();
        for Part(dir, name, target) in &parts {
            if let Some(n) = self.inodes.get_mut(dir) {
                n.mtime = now;
                if let Body::Dir(d) = &mut n.body {
                    set_entry(&mut d.entries, name, *target);
                }
            }
        }
        self.entry_log.push(parts);
    }

    fn create(&mut self, path: &Path, body: Body) -> io::Result<Ino> {
        let (dir, name) = self.parent(path)?;
        if self.entry(dir, &name).is_some() {
            return Err(os(libc::EEXIST));
        }
        let ino = self.alloc(body);
        self.change(vec![Part(dir, name, Some(ino))]);
        Ok(ino)
    }

    /// Counts a sync and decides whether it crashes or fails.
    fn begin_sync(&mut self) -> Result<(), SyncStop> {
        self.syncs += 1;
        if let Some((at, mode)) = self.crash_at {
            if self.syncs >= at {
                self.crash_at = None;
                self.crash(mode);
                self.down = true;
                return Err(SyncStop::Crashed(self.syncs));
            }
        }
        match self.fail_sync.take() {
            Some(kind) => Err(SyncStop::Failed(kind)),
            None => Ok(()),
        }
    }

    fn crash(&mut self, mode: CrashMode) {
        self.inodes = self.crashed(mode);
        self.entry_log.clear();
        self.epoch += 1;
        let inodes = &self.inodes;
        self.read_faults.retain(|i| inodes.contains_key(i));
        self.live_after_gc = self.inodes.len();
    }

    /// The inodes a crash in `mode` leaves, all durable.
    fn crashed(&self, mode: CrashMode) -> BTreeMap<Ino, Inode> {
        let (mut rng, keep_entries, torn) = match mode {
            CrashMode::DropUnsynced => (Rng(0), false, false),
            CrashMode::TearUnsynced { seed } => (Rng(seed), false, true),
            CrashMode::KeepUnsyncedEntries { seed } => (Rng(seed), true, true),
        };
        let mut dirs: BTreeMap<Ino, BTreeMap<String, Ino>> = BTreeMap::new();
        for (ino, n) in &self.inodes {
            if let Body::Dir(d) = &n.body {
                dirs.insert(*ino, d.durable.clone());
            }
        }
        if keep_entries {
            for op in &self.entry_log {
                if !rng.coin() {
                    continue;
                }
                for Part(dir, name, target) in op {
                    if let Some(d) = dirs.get_mut(dir) {
                        set_entry(d, name, *target);
                    }
                }
            }
        }
        let mut out = BTreeMap::new();
        let mut others = BTreeSet::new();
        let mut seen_dirs = BTreeSet::from([ROOT]);
        let mut queue = VecDeque::from([ROOT]);
        while let Some(dir) = queue.pop_front() {
            let mut entries = dirs.remove(&dir).unwrap_or_default();
            entries.retain(|_, t| match self.body(*t) {
                None => false,
                Some(Body::Dir(_)) => {
                    let first = seen_dirs.insert(*t);
                    if first {
                        queue.push_back(*t);
                    }
                    first
                }
                Some(_) => {
                    others.insert(*t);
                    true
                }
            });
            let mtime = self.inodes.get(&dir).map_or(self.now, |n| n.durable_mtime);
            let body = DirBody {
                durable: entries.clone(),
                entries,
            };
            out.insert(dir, Inode::new(Body::Dir(body), mtime));
        }
        for ino in others {
            let Some(n) = self.inodes.get(&ino) else {
                continue;
            };
            let body = match &n.body {
                Body::File(f) => {
                    let data = if torn {
                        tear(&f.durable, &f.pending, &mut rng)
                    } else {
                        f.durable.clone()
                    };
                    Body::File(FileBody {
                        durable: data.clone(),
                        data,
                        pending: Vec::new(),
                    })
                }
                Body::Symlink(t) => Body::Symlink(t.clone()),
                Body::Special(kind) => Body::Special(*kind),
                Body::Dir(_) => continue,
            };
            out.insert(ino, Inode::new(body, n.durable_mtime));
        }
        out
    }

    fn release_lock(&mut self, ino: Ino, id: u64) -> bool {
        match self.inodes.get_mut(&ino) {
            Some(n) => {
                let had = n.locks.shared.remove(&id) || n.locks.exclusive == Some(id);
                if n.locks.exclusive == Some(id) {
                    n.locks.exclusive = None;
                }
                had
            }
            None => false,
        }
    }
}

fn metadata_of(ino: Ino, n: &Inode) -> Metadata {
    let len = match &n.body {
        Body::File(f) => f.data.len() as u64,
        Body::Dir(_) => 0,
        Body::Symlink(t) => t.as_os_str().len() as u64,
        Body::Special(_) => 0,
    };
    let kind = match &n.body {
        Body::File(_) => FileKind::Regular,
        Body::Dir(_) => FileKind::Directory,
        Body::Symlink(_) => FileKind::Symlink,
        Body::Special(kind) => *kind,
    };
    Metadata {
        len,
        kind,
        is_dir: matches!(n.body, Body::Dir(_)),
        is_symlink: matches!(n.body, Body::Symlink(_)),
        modified: n.mtime,
        id: FileId { dev: 0, ino },
    }
}

/// Every name reachable from the root of `inodes` through written entries.
fn listing(inodes: &BTreeMap<Ino, Inode>) -> BTreeMap<PathBuf, SimNode> {
    let mut out = BTreeMap::new();
    let mut stack = vec![(PathBuf::new(), ROOT)];
    let mut seen = BTreeSet::new();
    while let Some((path, ino)) = stack.pop() {
        let Some(Body::Dir(d)) = inodes.get(&ino).map(|n| &n.body) else {
            continue;
        };
        if !seen.insert(ino) {
            continue;
        }
        for (name, t) in &d.entries {
            let child = path.join(name);
            match inodes.get(t).map(|n| &n.body) {
                Some(Body::File(f)) => out.insert(child, SimNode::File(f.data.clone())),
                Some(Body::Symlink(target)) => out.insert(child, SimNode::Symlink(target.clone())),
                Some(Body::Special(kind)) => out.insert(child, SimNode::Special(*kind)),
                Some(Body::Dir(_)) => {
                    stack.push((child.clone(), *t));
                    out.insert(child, SimNode::Dir)
                }
                None => None,
            };
        }
    }
    out
}

impl Default for SimStorage {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for SimStorage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("SimStorage");
        if let Ok(st) = self.shared.state.try_lock() {
            d.field("inodes", &st.inodes.len())
                .field("syncs", &st.syncs)
                .field("crashes", &st.epoch)
                .field("down", &st.down);
        }
        d.finish_non_exhaustive()
    }
}

impl SimStorage {
    /// An empty storage: just the root directory, durable.
    pub fn new() -> Self {
        Self {
            shared: Arc::new(Shared {
                state: Mutex::new(State::new()),
                cond: Condvar::new(),
            }),
        }
    }

    fn lock_state(&self) -> MutexGuard<'_, State> {
        self.shared.lock()
    }

    /// `remove_dir` (`dir`) or `remove_file`.
    fn unlink(&self, path: &Path, dir: bool) -> io::Result<()> {
        let mut st = self.live()?;
        let (parent, name) = st.parent(path)?;
        let ino = st.entry(parent, &name).ok_or_else(|| os(libc::ENOENT))?;
        match (dir, st.body(ino)) {
            (true, Some(Body::Dir(d))) if !d.entries.is_empty() => return Err(os(libc::ENOTEMPTY)),
            (true, Some(Body::Dir(_)))
            | (false, Some(Body::File(_) | Body::Symlink(_) | Body::Special(_))) => {}
            (true, _) => return Err(os(libc::ENOTDIR)),
            (false, _) => return Err(os(libc::EISDIR)),
        }
        st.change(vec![Part(parent, name, None)]);
        Ok(())
    }

    fn live(&self) -> io::Result<MutexGuard<'_, State>> {
        let st = self.lock_state();
        if st.down {
            return Err(down_error());
        }
        Ok(st)
    }

    /// Crashes now: the written image becomes the one `mode` derives from the
    /// durable image, and handles opened before fail from now on. The storage
    /// stays in service.
    pub fn crash(&self, mode: CrashMode) {
        self.lock_state().crash(mode);
        self.shared.cond.notify_all();
    }

    /// Arms a crash at the `n`-th sync from now (`n == 1`: the next one). That
    /// sync does not take effect, the storage crashes in `mode` from the
    /// durable image before it, the sync fails, and every operation fails
    /// until [`SimStorage::restart`]. The failing sync returns an
    /// [`io::ErrorKind::Other`] error "simulated crash at sync #k", whatever
    /// [`SimStorage::fail_next_sync`] armed. Replaces a crash armed before.
    ///
    /// # Panics
    ///
    /// If `n` is 0.
    pub fn crash_at_sync(&self, n: u64, mode: CrashMode) {
        assert!(n >= 1, "sync numbers start at 1");
        let mut st = self.lock_state();
        st.crash_at = Some((st.syncs + n, mode));
    }

    /// Returns a crashed storage to service, in its post-crash state.
    pub fn restart(&self) {
        self.lock_state().down = false;
    }

    /// Whether an armed crash fired and [`SimStorage::restart`] was not called.
    pub fn is_down(&self) -> bool {
        self.lock_state().down
    }

    /// How many syncs were attempted since the storage was created.
    pub fn sync_count(&self) -> u64 {
        self.lock_state().syncs
    }

    /// Makes the next sync fail with `kind` without making anything durable
    /// (for a file, its unsynced writes are also lost for later syncs: see
    /// the module documentation).
    pub fn fail_next_sync(&self, kind: io::ErrorKind) {
        self.lock_state().fail_sync = Some(kind);
    }

    /// A full disk: from now on, `write_at` accepts `bytes` more bytes in
    /// total. The write that reaches the budget is short; later writes fail
    /// with `ENOSPC` ([`io::ErrorKind::StorageFull`]).
    pub fn fail_writes_after(&self, bytes: u64) {
        self.lock_state().write_budget = Some(bytes);
    }

    /// While on, `write_at` writes only half of its buffer (at least 1 byte).
    pub fn short_writes(&self, on: bool) {
        self.lock_state().short_writes = on;
    }

    /// Makes every read of the file now named `path` fail with `EIO`, through
    /// any of its names or handles and through [`Storage::map`].
    pub fn fail_reads_of(&self, path: &Path) -> io::Result<()> {
        let mut st = self.lock_state();
        let ino = st.lookup(path)?;
        st.read_faults.insert(ino);
        Ok(())
    }

    /// Disarms all faults: sync failure, full disk, short writes, read errors
    /// and a crash armed by [`SimStorage::crash_at_sync`]. Faults otherwise
    /// stay armed across crashes.
    pub fn clear_faults(&self) {
        let mut st = self.lock_state();
        st.fail_sync = None;
        st.write_budget = None;
        st.short_writes = false;
        st.read_faults.clear();
        st.crash_at = None;
    }

    /// The simulated clock.
    pub fn now(&self) -> SystemTime {
        self.lock_state().now
    }

    /// Sets the simulated clock (it may go backwards).
    pub fn set_time(&self, time: SystemTime) {
        self.lock_state().now = time;
    }

    /// Moves the simulated clock forward.
    pub fn advance_clock(&self, by: Duration) {
        self.lock_state().now += by;
    }

    /// Creates a symbolic link `path` pointing to `target` (an unsynced entry,
    /// like any creation). The store refuses to follow it.
    pub fn make_symlink(&self, path: &Path, target: impl Into<PathBuf>) -> io::Result<()> {
        self.live()?.create(path, Body::Symlink(target.into()))?;
        Ok(())
    }

    /// Creates a node of `kind` (a FIFO, a socket, a device) at `path`, as
    /// `mkfifo` or `bind` would (an unsynced entry, like any creation). The
    /// store refuses to open it. `kind` must not be a regular file, a
    /// directory or a link (those have their own calls).
    pub fn make_special(&self, path: &Path, kind: FileKind) -> io::Result<()> {
        if matches!(
            kind,
            FileKind::Regular | FileKind::Directory | FileKind::Symlink
        ) {
            return Err(os(libc::EINVAL));
        }
        self.live()?.create(path, Body::Special(kind))?;
        Ok(())
    }

    /// The written content of the file `path`, if it is one.
    pub fn read_file(&self, path: &Path) -> Option<Vec<u8>> {
        let st = self.lock_state();
        match st.lookup(path).ok().and_then(|i| st.body(i)) {
            Some(Body::File(f)) => Some(f.data.clone()),
            _ => None,
        }
    }

    /// Whether `path` names anything in the written image.
    pub fn exists(&self, path: &Path) -> bool {
        self.lock_state().lookup(path).is_ok()
    }

    /// Every name of the written image (the root excluded).
    pub fn snapshot(&self) -> BTreeMap<PathBuf, SimNode> {
        listing(&self.lock_state().inodes)
    }

    /// Every name a [`CrashMode::DropUnsynced`] crash would leave now.
    pub fn durable_snapshot(&self) -> BTreeMap<PathBuf, SimNode> {
        listing(&self.lock_state().crashed(CrashMode::DropUnsynced))
    }
}

/// How [`SimStorage`] displays `path`.
fn display(path: &Path) -> PathBuf {
    if path == Path::new(".") {
        PathBuf::from("sim:/")
    } else {
        Path::new("sim:/").join(path)
    }
}

impl Storage for SimStorage {
    fn display_path(&self, path: &Path) -> PathBuf {
        display(path)
    }

    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        let names = components(path)?;
        let mut st = self.live()?;
        let mut cur = ROOT;
        for (i, name) in names.iter().enumerate() {
            cur = match st.entry(cur, name) {
                Some(next) => match st.body(next) {
                    Some(Body::Dir(_)) => next,
                    Some(Body::Symlink(_)) => return Err(symlink_error(path)),
                    _ if i + 1 == names.len() => return Err(os(libc::EEXIST)),
                    _ => return Err(os(libc::ENOTDIR)),
                },
                None => {
                    let ino = st.alloc(Body::Dir(DirBody::default()));
                    st.change(vec![Part(cur, name.clone(), Some(ino))]);
                    ino
                }
            };
        }
        Ok(())
    }

    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn StorageFile>> {
        let mut st = self.live()?;
        let ino = match mode {
            OpenMode::Read | OpenMode::ReadWrite => st.lookup(path)?,
            OpenMode::CreateNew => st.create(path, Body::File(FileBody::default()))?,
            OpenMode::CreateOrOpen => {
                let (dir, name) = st.parent(path)?;
                match st.entry(dir, &name) {
                    Some(ino) => ino,
                    None => st.create(path, Body::File(FileBody::default()))?,
                }
            }
        };
        st.file_of(ino, path)?;
        let id = st.next_handle;
        st.next_handle += 1;
        if let Some(n) = st.inodes.get_mut(&ino) {
            n.open += 1;
        }
        Ok(Box::new(SimFile {
            shared: Arc::clone(&self.shared),
            ino,
            id,
            epoch: st.epoch,
            writable: mode.writable(),
            path: path.to_path_buf(),
        }))
    }

    fn metadata(&self, path: &Path) -> io::Result<Metadata> {
        let st = self.live()?;
        let ino = st.lookup(path)?;
        st.inodes
            .get(&ino)
            .map(|n| metadata_of(ino, n))
            .ok_or_else(|| os(libc::ENOENT))
    }

    fn file_id(&self, path: &Path) -> io::Result<FileId> {
        let st = self.live()?;
        let ino = st.lookup(path)?;
        Ok(FileId { dev: 0, ino })
    }

    fn read_dir(&self, path: &Path) -> io::Result<Vec<DirEntry>> {
        let st = self.live()?;
        let dir = st.dir_of(st.lookup(path)?, path)?;
        let entry = |(name, t): (&String, &Ino)| {
            let metadata = metadata_of(*t, st.inodes.get(t)?);
            let name = name.clone();
            Some(DirEntry { name, metadata })
        };
        Ok(dir.entries.iter().filter_map(entry).collect())
    }

    fn link_noreplace(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut st = self.live()?;
        check_relative(from)?;
        let src = st.lookup(from)?;
        if st.is_dir(src) {
            return Err(os(libc::EPERM));
        }
        let (dir, name) = st.parent(to)?;
        if st.entry(dir, &name).is_some() {
            return Err(os(libc::EEXIST));
        }
        st.change(vec![Part(dir, name, Some(src))]);
        Ok(())
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut st = self.live()?;
        let (fdir, fname) = st.parent(from)?;
        let src = st.entry(fdir, &fname).ok_or_else(|| os(libc::ENOENT))?;
        let (tdir, tname) = st.parent(to)?;
        let src_dir = st.is_dir(src);
        if let Some(dst) = st.entry(tdir, &tname) {
            if dst == src {
                return Ok(()); // Two names of one inode: POSIX does nothing.
            }
            match (src_dir, st.body(dst)) {
                (true, Some(Body::Dir(d))) if !d.entries.is_empty() => {
                    return Err(os(libc::ENOTEMPTY))
                }
                (true, Some(Body::Dir(_)))
                | (false, Some(Body::File(_) | Body::Symlink(_) | Body::Special(_))) => {}
                (true, _) => return Err(os(libc::ENOTDIR)),
                (false, _) => return Err(os(libc::EISDIR)),
            }
        }
        let (f, t) = (components(from)?, components(to)?);
        if src_dir && t.len() > f.len() && t.starts_with(&f) {
            return Err(os(libc::EINVAL)); // Into its own subtree.
        }
        st.change(vec![Part(fdir, fname, None), Part(tdir, tname, Some(src))]);
        Ok(())
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.unlink(path, false)
    }

    fn remove_dir(&self, path: &Path) -> io::Result<()> {
        self.unlink(path, true)
    }

    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        let mut st = self.live()?;
        let ino = st.lookup(path)?;
        st.dir_of(ino, path)?;
        if let Err(stop) = st.begin_sync() {
            return Err(self.shared.stopped(stop));
        }
        if let Some(n) = st.inodes.get_mut(&ino) {
            n.durable_mtime = n.mtime;
            if let Body::Dir(d) = &mut n.body {
                d.durable = d.entries.clone();
            }
        }
        for op in &mut st.entry_log {
            op.retain(|p| p.0 != ino);
        }
        st.entry_log.retain(|op| !op.is_empty());
        Ok(())
    }

    fn map(&self, path: &Path) -> io::Result<Mapping> {
        let st = self.live()?;
        let ino = st.lookup(path)?;
        let data = st.file_of(ino, path)?.data.clone();
        if st.read_faults.contains(&ino) {
            return Err(os(libc::EIO));
        }
        Ok(Mapping::Owned(data))
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // No code panics while holding the lock, so a poisoned state is intact.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The error of a sync that crashed or failed (waking lock waiters on a
    /// crash, so they fail too).
    fn stopped(&self, stop: SyncStop) -> io::Error {
        match stop {
            SyncStop::Crashed(n) => {
                self.cond.notify_all();
                io::Error::other(format!("simulated crash at sync #{n}"))
            }
            SyncStop::Failed(kind) => io::Error::new(kind, "simulated sync failure"),
        }
    }
}

/// A handle of [`SimStorage`].
struct SimFile {
    shared: Arc<Shared>,
    ino: Ino,
    id: u64,
    epoch: u64,
    writable: bool,
    path: PathBuf,
}

impl fmt::Debug for SimFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimFile")
            .field("path", &self.path)
            .field("ino", &self.ino)
            .field("writable", &self.writable)
            .finish_non_exhaustive()
    }
}

impl SimFile {
    fn check(&self, st: &State) -> io::Result<()> {
        if st.down {
            Err(down_error())
        } else if st.epoch != self.epoch {
            Err(io::Error::other(
                "simulated crash: the handle was opened before a crash",
            ))
        } else {
            Ok(())
        }
    }

    fn state(&self) -> io::Result<MutexGuard<'_, State>> {
        let st = self.shared.lock();
        self.check(&st)?;
        Ok(st)
    }

    fn writable_state(&self) -> io::Result<MutexGuard<'_, State>> {
        if !self.writable {
            return Err(os(libc::EBADF));
        }
        self.state()
    }

    fn sync(&self) -> io::Result<()> {
        let mut st = self.state()?;
        st.file_mut(self.ino)?;
        match st.begin_sync() {
            Ok(()) => {}
            Err(stop @ SyncStop::Crashed(_)) => return Err(self.shared.stopped(stop)),
            Err(stop) => {
                // Linux marks the pages clean after a writeback error: the
                // data stays readable but a later sync will not persist it.
                st.file_mut(self.ino)?.pending.clear();
                return Err(self.shared.stopped(stop));
            }
        }
        let n = st.inode_mut(self.ino)?;
        if let Body::File(f) = &mut n.body {
            for op in std::mem::take(&mut f.pending) {
                apply(&mut f.durable, &op);
            }
        }
        n.durable_mtime = n.mtime;
        Ok(())
    }
}

impl StorageFile for SimFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let mut st = self.state()?;
        if st.read_faults.contains(&self.ino) {
            return Err(os(libc::EIO));
        }
        let data = &st.file_mut(self.ino)?.data;
        let start = usize::try_from(offset).map_or(data.len(), |o| o.min(data.len()));
        let n = buf.len().min(data.len() - start);
        buf[..n].copy_from_slice(&data[start..start + n]);
        Ok(n)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize> {
        let mut st = self.writable_state()?;
        if buf.is_empty() {
            return Ok(0);
        }
        let offset = to_len(offset)?;
        to_len((offset + buf.len()) as u64)?;
        let mut n = buf.len();
        if st.short_writes {
            n = (n / 2).max(1);
        }
        if let Some(budget) = st.write_budget {
            if budget == 0 {
                return Err(os(libc::ENOSPC));
            }
            n = n.min(usize::try_from(budget).unwrap_or(usize::MAX));
            st.write_budget = Some(budget - n as u64);
        }
        let bytes = buf[..n].to_vec();
        st.modify(self.ino, FileOp::Write { offset, bytes })?;
        Ok(n)
    }

    fn len(&self) -> io::Result<u64> {
        let mut st = self.state()?;
        Ok(st.file_mut(self.ino)?.data.len() as u64)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        let mut st = self.writable_state()?;
        st.modify(self.ino, FileOp::SetLen(to_len(len)?))
    }

    fn sync_data(&self) -> io::Result<()> {
        self.sync()
    }

    fn sync_all(&self) -> io::Result<()> {
        self.sync()
    }

    fn lock(&self, kind: LockKind, wait: bool) -> io::Result<bool> {
        let mut st = self.state()?;
        let held = st.inodes.get(&self.ino).map(|n| {
            (
                n.locks.exclusive == Some(self.id),
                n.locks.shared.contains(&self.id),
            )
        });
        match (kind, held) {
            (LockKind::Exclusive, Some((true, _))) | (LockKind::Shared, Some((_, true))) => {
                return Ok(true)
            }
            _ => {}
        }
        // Like flock(2), a conversion drops the old lock first.
        if st.release_lock(self.ino, self.id) {
            self.shared.cond.notify_all();
        }
        loop {
            let n = st.inode_mut(self.ino)?;
            let free = n.locks.exclusive.is_none()
                && (kind == LockKind::Shared || n.locks.shared.is_empty());
            if free {
                match kind {
                    LockKind::Shared => n.locks.shared.insert(self.id),
                    LockKind::Exclusive => n.locks.exclusive.replace(self.id).is_none(),
                };
                return Ok(true);
            }
            if !wait {
                return Ok(false);
            }
            st = self
                .shared
                .cond
                .wait(st)
                .unwrap_or_else(PoisonError::into_inner);
            self.check(&st)?;
        }
    }

    fn unlock(&self) -> io::Result<()> {
        let mut st = self.state()?;
        if st.release_lock(self.ino, self.id) {
            self.shared.cond.notify_all();
        }
        Ok(())
    }

    fn set_modified(&self, time: SystemTime) -> io::Result<()> {
        self.state()?.inode_mut(self.ino)?.mtime = time;
        Ok(())
    }

    fn file_id(&self) -> io::Result<FileId> {
        drop(self.state()?);
        Ok(FileId {
            dev: 0,
            ino: self.ino,
        })
    }
}

impl Drop for SimFile {
    fn drop(&mut self) {
        let mut st = self.shared.lock();
        if st.epoch != self.epoch {
            return;
        }
        if let Some(n) = st.inodes.get_mut(&self.ino) {
            n.open = n.open.saturating_sub(1);
        }
        if st.release_lock(self.ino, self.id) {
            self.shared.cond.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::{publish_new_file, read_all, write_all_at, PublishError};
    use std::sync::atomic::{AtomicBool, Ordering};

    fn p(s: &str) -> &Path {
        Path::new(s)
    }

    /// Creates `path` with `data`, syncing the file and/or its parent.
    fn put(s: &SimStorage, path: &str, data: &[u8], sync_file: bool, sync_parent: bool) {
        let f = s.open(p(path), OpenMode::CreateNew).expect("create");
        write_all_at(&*f, data, 0).expect("write");
        if sync_file {
            f.sync_all().expect("sync file");
        }
        if sync_parent {
            s.sync_dir(super::super::parent_dir(p(path)))
                .expect("sync dir");
        }
    }

    fn errno(r: io::Result<impl fmt::Debug>) -> Option<i32> {
        r.expect_err("expected an error").raw_os_error()
    }

    fn modes(seeds: u64) -> Vec<CrashMode> {
        let mut out = vec![CrashMode::DropUnsynced];
        for seed in 0..seeds {
            out.push(CrashMode::TearUnsynced { seed });
            out.push(CrashMode::KeepUnsyncedEntries { seed });
        }
        out
    }

    #[test]
    fn usable_as_shared_dyn_storage() {
        fn assert_traits<T: Send + Sync + fmt::Debug + Clone>() {}
        assert_traits::<SimStorage>();
        let s = SimStorage::new();
        let dynamic: Arc<dyn Storage> = Arc::new(s.clone());
        put(&s, "a", b"x", false, false);
        assert!(dynamic.metadata(p("a")).is_ok());
        assert!(format!("{s:?}").contains("SimStorage"));
    }

    #[test]
    fn posix_like_namespace_and_errors() {
        let s = SimStorage::new();
        s.create_dir_all(p("d/e")).expect("mkdir");
        s.create_dir_all(p("d/e")).expect("existing dir is fine");
        put(&s, "d/f", b"hello", false, false);
        assert_eq!(
            errno(s.open(p("d/f"), OpenMode::CreateNew)),
            Some(libc::EEXIST)
        );
        assert_eq!(
            errno(s.open(p("d/nope"), OpenMode::Read)),
            Some(libc::ENOENT)
        );
        assert_eq!(errno(s.metadata(p("d/nope"))), Some(libc::ENOENT));
        assert_eq!(
            s.metadata(p("d/nope")).expect_err("missing").kind(),
            io::ErrorKind::NotFound
        );
        assert_eq!(
            errno(s.open(p("d/f/g"), OpenMode::CreateNew)),
            Some(libc::ENOTDIR)
        );
        assert_eq!(errno(s.create_dir_all(p("d/f"))), Some(libc::EEXIST));
        assert_eq!(errno(s.remove_dir(p("d"))), Some(libc::ENOTEMPTY));
        assert_eq!(errno(s.remove_dir(p("d/f"))), Some(libc::ENOTDIR));
        assert_eq!(errno(s.remove_file(p("d/e"))), Some(libc::EISDIR));
        let e = s
            .open(p("d"), OpenMode::Read)
            .expect_err("opened a directory");
        let typed = super::super::not_regular(&e).expect("a typed error");
        assert_eq!(typed.found, FileKind::Directory);
        assert_eq!(errno(s.rename(p("d/f"), p("d/e"))), Some(libc::EISDIR));
        assert_eq!(errno(s.rename(p("d"), p("d/e/x"))), Some(libc::EINVAL));
        for bad in ["/abs", "../x", "a/../../b", ""] {
            let e = s.metadata(p(bad)).expect_err(bad);
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{bad}");
        }
        let root = s.metadata(p(".")).expect("root");
        assert!(root.is_dir);
        let mut names: Vec<String> = s
            .read_dir(p("d"))
            .expect("list")
            .into_iter()
            .map(|e| e.name)
            .collect();
        names.sort();
        assert_eq!(names, ["e", "f"]);
        assert_eq!(s.metadata(p("d/f")).expect("stat").len, 5);
        let f = s.open(p("d/f"), OpenMode::Read).expect("open");
        assert_eq!(errno(f.write_at(b"x", 0)), Some(libc::EBADF));
        assert_eq!(read_all(&*f, 100).expect("read"), b"hello");
        s.remove_file(p("d/f")).expect("unlink");
        assert_eq!(read_all(&*f, 100).expect("open handle survives"), b"hello");
        s.remove_dir(p("d/e")).expect("rmdir");
        s.remove_dir(p("d")).expect("rmdir");
        assert!(s.snapshot().is_empty());
    }

    #[test]
    fn file_ids_follow_the_file_not_the_name() {
        let s = SimStorage::new();
        put(&s, "a", b"one", true, false);
        let held = s.open(p("a"), OpenMode::Read).expect("open");
        assert!(crate::storage::still_named(&s, &*held, p("a")).expect("id"));
        s.link_noreplace(p("a"), p("b")).expect("link");
        assert_eq!(s.file_id(p("b")).expect("id"), held.file_id().expect("id"));
        s.remove_file(p("a")).expect("unlink");
        assert!(!crate::storage::still_named(&s, &*held, p("a")).expect("gone"));
        put(&s, "a", b"one", true, false);
        assert!(!crate::storage::still_named(&s, &*held, p("a")).expect("re-created"));
        s.rename(p("b"), p("a")).expect("rename");
        assert!(crate::storage::still_named(&s, &*held, p("a")).expect("renamed back"));
    }

    #[test]
    fn hard_links_share_one_inode() {
        let s = SimStorage::new();
        put(&s, "a", b"one", true, false);
        s.link_noreplace(p("a"), p("b")).expect("link");
        put(&s, "c", b"other", false, false);
        assert_eq!(
            s.link_noreplace(p("a"), p("c"))
                .expect_err("replaced")
                .kind(),
            io::ErrorKind::AlreadyExists
        );
        assert_eq!(s.read_file(p("c")).as_deref(), Some(&b"other"[..]));
        let f = s.open(p("b"), OpenMode::ReadWrite).expect("open");
        write_all_at(&*f, b"ONE!", 0).expect("write");
        assert_eq!(s.read_file(p("a")).as_deref(), Some(&b"ONE!"[..]));
        // A sync through one name makes the data durable under every name.
        f.sync_data().expect("sync");
        s.sync_dir(p(".")).expect("sync dir");
        s.remove_file(p("a")).expect("unlink");
        s.sync_dir(p(".")).expect("sync dir");
        s.crash(CrashMode::DropUnsynced);
        assert!(!s.exists(p("a")));
        assert_eq!(s.read_file(p("b")).as_deref(), Some(&b"ONE!"[..]));
    }

    #[test]
    fn drop_unsynced_keeps_exactly_what_was_synced() {
        let s = SimStorage::new();
        s.create_dir_all(p("d")).expect("mkdir");
        s.sync_dir(p(".")).expect("sync root");
        put(&s, "d/synced", b"durable", true, true);
        put(&s, "d/empty", b"name synced, data not", false, true);
        put(&s, "d/nameless", b"data synced, name not", true, false);
        let f = s.open(p("d/synced"), OpenMode::ReadWrite).expect("open");
        write_all_at(&*f, b" and more", 7).expect("append");
        f.set_len(20).expect("extend");
        s.crash(CrashMode::DropUnsynced);
        assert_eq!(s.read_file(p("d/synced")).as_deref(), Some(&b"durable"[..]));
        assert!(!s.exists(p("d/nameless")));
        assert_eq!(s.read_file(p("d/empty")).as_deref(), Some(&b""[..]));
        assert!(
            f.len().is_err(),
            "a handle from before the crash still works"
        );
        assert!(!s.is_down(), "crash() leaves the storage in service");
        // A new directory needs its parent synced; its entries need itself.
        s.create_dir_all(p("x/y")).expect("mkdir");
        put(&s, "x/y/f", b"f", true, true);
        s.crash(CrashMode::DropUnsynced);
        assert!(!s.exists(p("x")));
    }

    #[test]
    fn renames_need_both_directories_synced() {
        let s = SimStorage::new();
        s.create_dir_all(p("a")).expect("mkdir");
        s.create_dir_all(p("b")).expect("mkdir");
        s.sync_dir(p(".")).expect("sync");
        put(&s, "a/f", b"v1", true, true);
        put(&s, "b/f", b"old", true, true);
        s.rename(p("a/f"), p("b/f")).expect("rename over");
        assert!(!s.exists(p("a/f")));
        assert_eq!(s.read_file(p("b/f")).as_deref(), Some(&b"v1"[..]));
        let before = s.durable_snapshot();
        s.crash(CrashMode::DropUnsynced);
        assert_eq!(s.snapshot(), before);
        assert_eq!(s.read_file(p("a/f")).as_deref(), Some(&b"v1"[..]));
        assert_eq!(s.read_file(p("b/f")).as_deref(), Some(&b"old"[..]));
        s.rename(p("a/f"), p("b/f")).expect("rename");
        s.sync_dir(p("b")).expect("sync target only");
        s.crash(CrashMode::DropUnsynced);
        // Both names point to the same inode: the removal was not synced.
        assert_eq!(s.read_file(p("a/f")).as_deref(), Some(&b"v1"[..]));
        assert_eq!(s.read_file(p("b/f")).as_deref(), Some(&b"v1"[..]));
        s.rename(p("a/f"), p("b/g")).expect("rename");
        s.sync_dir(p("a")).expect("sync source");
        s.sync_dir(p("b")).expect("sync target");
        s.crash(CrashMode::DropUnsynced);
        assert!(!s.exists(p("a/f")));
        assert_eq!(s.read_file(p("b/g")).as_deref(), Some(&b"v1"[..]));
    }

    #[test]
    fn tearing_is_deterministic_and_keeps_synced_bytes() {
        let synced = b"synced-prefix:".to_vec();
        let tail: Vec<u8> = (0..200u8).map(|i| i.wrapping_mul(7) | 1).collect();
        let run = |seed: u64| {
            let s = SimStorage::new();
            put(&s, "log", &synced, true, true);
            let f = s.open(p("log"), OpenMode::ReadWrite).expect("open");
            for (i, chunk) in tail.chunks(50).enumerate() {
                write_all_at(&*f, chunk, (synced.len() + i * 50) as u64).expect("append");
            }
            s.crash(CrashMode::TearUnsynced { seed });
            s.read_file(p("log")).expect("log survives")
        };
        let (mut dropped, mut torn, mut full, mut damaged) = (false, false, false, false);
        for seed in 0..64 {
            let got = run(seed);
            assert_eq!(got, run(seed), "seed {seed} is not deterministic");
            assert!(got.starts_with(&synced), "seed {seed} lost synced bytes");
            let rest = &got[synced.len()..];
            assert!(rest.len() <= tail.len());
            if rest.is_empty() {
                dropped = true;
            } else if rest == &tail[..] {
                full = true;
            } else if tail.starts_with(rest) {
                torn = true;
            } else {
                damaged = true;
            }
        }
        assert!(
            dropped && torn && full && damaged,
            "{dropped} {torn} {full} {damaged}"
        );
    }

    #[test]
    fn keep_unsynced_entries_flips_each_operation() {
        let (mut with_new, mut without_new) = (false, false);
        for seed in 0..32 {
            let s = SimStorage::new();
            put(&s, "kept", b"synced", true, true);
            put(&s, "moved", b"m", true, true);
            put(&s, "new", b"", false, false);
            s.rename(p("moved"), p("renamed")).expect("rename");
            s.crash(CrashMode::KeepUnsyncedEntries { seed });
            assert_eq!(s.read_file(p("kept")).as_deref(), Some(&b"synced"[..]));
            // A rename persists as a whole or not at all.
            assert!(
                s.exists(p("moved")) != s.exists(p("renamed")),
                "seed {seed}"
            );
            let data = s
                .read_file(p("renamed"))
                .or_else(|| s.read_file(p("moved")));
            assert_eq!(data.as_deref(), Some(&b"m"[..]));
            if s.exists(p("new")) {
                with_new = true;
            } else {
                without_new = true;
            }
        }
        assert!(with_new && without_new);
    }

    #[test]
    fn crash_at_each_sync_undoes_that_sync_and_stops_the_storage() {
        let workload = |s: &SimStorage| -> io::Result<()> {
            let a = s.open(p("a"), OpenMode::CreateNew)?;
            write_all_at(&*a, b"aaaa", 0)?;
            a.sync_all()?; // 1
            s.sync_dir(p("."))?; // 2
            let b = s.open(p("b"), OpenMode::CreateNew)?;
            write_all_at(&*b, b"bb", 0)?;
            b.sync_data()?; // 3
            s.sync_dir(p("."))?; // 4
            Ok(())
        };
        let s = SimStorage::new();
        workload(&s).expect("clean run");
        assert_eq!(s.sync_count(), 4);
        for n in 1..=4 {
            let s = SimStorage::new();
            let early = s.open(p("early"), OpenMode::CreateNew).expect("create");
            s.crash_at_sync(n, CrashMode::DropUnsynced);
            let err = workload(&s).expect_err("no crash");
            assert!(err.to_string().contains("simulated crash"), "{err}");
            assert!(s.is_down());
            assert!(s.metadata(p(".")).is_err());
            assert!(early.len().is_err());
            s.restart();
            assert!(early.len().is_err(), "stale handle revived by restart");
            assert!(s.metadata(p(".")).is_ok());
            let a = s.read_file(p("a"));
            assert_eq!(a.is_some(), n > 2, "n = {n}");
            if let Some(a) = a {
                assert_eq!(a, b"aaaa");
            }
            assert!(!s.exists(p("b")), "n = {n}");
            assert_eq!(s.exists(p("early")), n > 2, "synced by sync #2");
        }
    }

    #[test]
    fn publish_new_file_is_all_or_nothing_at_every_crash_point() {
        let data: Vec<u8> = (0..3000u32).map(|i| (i % 251) as u8).collect();
        let setup = |short: bool| {
            let s = SimStorage::new();
            s.create_dir_all(p("objects")).expect("mkdir");
            s.create_dir_all(p("tmp")).expect("mkdir");
            s.sync_dir(p(".")).expect("sync");
            s.short_writes(short);
            s
        };
        let publish = |s: &SimStorage| publish_new_file(s, p("tmp/x"), p("objects/x"), &data);
        let s = setup(false);
        let before = s.sync_count();
        assert!(publish(&s).expect("publish"));
        let count = s.sync_count() - before;
        assert_eq!(count, 2);
        for mode in modes(16) {
            for short in [false, true] {
                for n in 1..=count {
                    let s = setup(short);
                    s.crash_at_sync(n, mode);
                    assert!(publish(&s).is_err(), "{mode:?} n = {n}");
                    s.restart();
                    if let Some(got) = s.read_file(p("objects/x")) {
                        assert!(got == data, "{mode:?} n = {n}: {} bytes", got.len());
                    }
                }
                // A failed sync, then a crash, also publishes all or nothing.
                for n in 1..=count {
                    let s = setup(short);
                    for _ in 1..n {
                        s.sync_dir(p("tmp")).expect("spend a sync");
                    }
                    s.fail_next_sync(io::ErrorKind::Other);
                    let r = publish(&s);
                    assert!(matches!(r, Err(PublishError::Sync(..))), "{r:?}");
                    s.crash(mode);
                    let got = s.read_file(p("objects/x"));
                    if let Some(got) = got {
                        assert!(got == data, "{mode:?} n = {n}");
                    }
                }
                let s = setup(short);
                assert!(publish(&s).expect("publish"));
                s.crash(mode);
                assert_eq!(s.read_file(p("objects/x")), Some(data.clone()));
            }
        }
    }

    #[test]
    fn publishing_unsynced_data_is_caught() {
        let s = SimStorage::new();
        put(&s, "tmp", b"payload", false, false);
        s.link_noreplace(p("tmp"), p("obj")).expect("link");
        s.sync_dir(p(".")).expect("sync dir");
        s.crash(CrashMode::DropUnsynced);
        assert_eq!(s.read_file(p("obj")).as_deref(), Some(&b""[..]));
    }

    #[test]
    fn failed_sync_loses_the_unsynced_writes_even_if_retried() {
        let s = SimStorage::new();
        put(&s, "f", b"base", true, true);
        let f = s.open(p("f"), OpenMode::ReadWrite).expect("open");
        write_all_at(&*f, b"-lost", 4).expect("write");
        s.fail_next_sync(io::ErrorKind::Other);
        assert_eq!(
            f.sync_data().expect_err("sync ok").kind(),
            io::ErrorKind::Other
        );
        assert_eq!(s.read_file(p("f")).as_deref(), Some(&b"base-lost"[..]));
        f.sync_data().expect("retry");
        write_all_at(&*f, b"!", 9).expect("write");
        f.sync_data().expect("sync");
        s.crash(CrashMode::DropUnsynced);
        assert_eq!(
            s.read_file(p("f")).as_deref(),
            Some(&b"base\0\0\0\0\0!"[..])
        );
        // A failed directory sync makes nothing durable either.
        put(&s, "g", b"g", true, false);
        s.fail_next_sync(io::ErrorKind::Other);
        assert!(s.sync_dir(p(".")).is_err());
        s.crash(CrashMode::DropUnsynced);
        assert!(!s.exists(p("g")));
    }

    #[test]
    fn full_disk_writes_short_then_fails() {
        let s = SimStorage::new();
        let f = s.open(p("f"), OpenMode::CreateNew).expect("create");
        s.fail_writes_after(10);
        assert_eq!(f.write_at(&[1; 8], 0).expect("fits"), 8);
        assert_eq!(f.write_at(&[2; 8], 8).expect("short"), 2);
        let err = f.write_at(&[3; 8], 10).expect_err("disk full");
        assert_eq!(err.raw_os_error(), Some(libc::ENOSPC));
        assert_eq!(f.len().expect("len"), 10);
        let err = write_all_at(&*f, b"more", 10).expect_err("disk full");
        assert_eq!(err.raw_os_error(), Some(libc::ENOSPC));
        s.clear_faults();
        write_all_at(&*f, b"more", 10).expect("space again");
    }

    #[test]
    fn short_writes_force_callers_to_loop() {
        let s = SimStorage::new();
        s.short_writes(true);
        let f = s.open(p("f"), OpenMode::CreateNew).expect("create");
        assert_eq!(f.write_at(b"0123456789", 0).expect("write"), 5);
        assert_eq!(f.write_at(b"x", 5).expect("write"), 1);
        write_all_at(&*f, b"abcdefghijklmnopqrstuvwxyz", 6).expect("write all");
        let want = b"01234xabcdefghijklmnopqrstuvwxyz";
        assert_eq!(s.read_file(p("f")).as_deref(), Some(&want[..]));
    }

    #[test]
    fn read_faults_hit_every_name_and_map() {
        let s = SimStorage::new();
        put(&s, "bad", b"bytes", false, false);
        put(&s, "good", b"bytes", false, false);
        s.link_noreplace(p("bad"), p("alias")).expect("link");
        s.fail_reads_of(p("bad")).expect("arm");
        let f = s.open(p("alias"), OpenMode::Read).expect("open");
        assert_eq!(errno(f.read_at(&mut [0; 4], 0)), Some(libc::EIO));
        assert_eq!(errno(s.map(p("bad"))), Some(libc::EIO));
        assert_eq!(&*s.map(p("good")).expect("map"), b"bytes");
    }

    #[test]
    fn locks_conflict_across_handles_and_block() {
        let s = SimStorage::new();
        put(&s, "lock", b"", false, false);
        let a = s.open(p("lock"), OpenMode::ReadWrite).expect("open");
        let b = s.open(p("lock"), OpenMode::ReadWrite).expect("open");
        assert!(a.lock(LockKind::Shared, false).expect("lock"));
        assert!(b.lock(LockKind::Shared, false).expect("shared is shared"));
        assert!(!b.lock(LockKind::Exclusive, false).expect("try"));
        // Like flock, the failed conversion dropped b's shared lock.
        assert!(a.lock(LockKind::Exclusive, false).expect("upgrade"));
        assert!(!b.lock(LockKind::Shared, false).expect("try"));
        let acquired = Arc::new(AtomicBool::new(false));
        let waiter = {
            let (s, acquired) = (s.clone(), Arc::clone(&acquired));
            std::thread::spawn(move || {
                let c = s.open(p("lock"), OpenMode::Read).expect("open");
                let got = c.lock(LockKind::Exclusive, true).expect("lock");
                acquired.store(true, Ordering::SeqCst);
                got
            })
        };
        std::thread::sleep(Duration::from_millis(50));
        assert!(
            !acquired.load(Ordering::SeqCst),
            "exclusive lock not honoured"
        );
        drop(a); // Dropping the handle releases its lock.
        assert!(waiter.join().expect("waiter"));
        assert!(b.lock(LockKind::Shared, false).expect("free again"));
        // A crash wakes a blocked waiter with an error.
        let c = s.open(p("lock"), OpenMode::Read).expect("open");
        let waiter = std::thread::spawn(move || c.lock(LockKind::Exclusive, true));
        std::thread::sleep(Duration::from_millis(50));
        s.crash(CrashMode::DropUnsynced);
        assert!(waiter.join().expect("waiter").is_err());
    }

    #[test]
    fn simulated_clock_drives_mtimes() {
        let s = SimStorage::new();
        let t0 = s.now();
        put(&s, "f", b"x", false, false);
        let m1 = s.metadata(p("f")).expect("stat").modified;
        assert!(m1 > t0 && m1 <= s.now());
        s.advance_clock(Duration::from_secs(3600));
        let f = s.open(p("f"), OpenMode::ReadWrite).expect("open");
        write_all_at(&*f, b"y", 1).expect("write");
        let m2 = s.metadata(p("f")).expect("stat").modified;
        assert!(m2 >= m1 + Duration::from_secs(3600));
        let fixed = UNIX_EPOCH + Duration::from_secs(42);
        f.set_modified(fixed).expect("touch");
        assert_eq!(s.metadata(p("f")).expect("stat").modified, fixed);
        s.set_time(fixed);
        assert_eq!(s.now(), fixed);
    }

    #[test]
    fn unreachable_inodes_are_collected_but_open_ones_kept() {
        let s = SimStorage::new();
        put(&s, "kept", b"still readable", true, true);
        let h = s.open(p("kept"), OpenMode::Read).expect("open");
        s.remove_file(p("kept")).expect("unlink");
        s.sync_dir(p(".")).expect("sync");
        for _ in 0..1000 {
            put(&s, "f", b"data", true, true);
            s.remove_file(p("f")).expect("unlink");
            s.sync_dir(p(".")).expect("sync");
        }
        assert!(s.lock_state().inodes.len() < 200, "{s:?}");
        assert_eq!(read_all(&*h, 100).expect("read"), b"still readable");
    }

    #[test]
    fn symlinks_are_never_followed() {
        let s = SimStorage::new();
        s.create_dir_all(p("d")).expect("mkdir");
        s.make_symlink(p("link"), "d").expect("symlink");
        for mode in [OpenMode::Read, OpenMode::CreateOrOpen] {
            let e = s.open(p("link"), mode).expect_err("followed");
            assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        }
        assert!(s.map(p("link")).is_err());
        assert!(s.sync_dir(p("link")).is_err());
        assert!(s.open(p("link/f"), OpenMode::CreateNew).is_err());
        assert!(s.create_dir_all(p("link")).is_err());
        assert_eq!(
            errno(s.open(p("link"), OpenMode::CreateNew)),
            Some(libc::EEXIST)
        );
        let m = s.metadata(p("link")).expect("lstat");
        assert!(!m.is_dir && m.is_symlink);
        assert_eq!(
            s.snapshot().get(p("link")),
            Some(&SimNode::Symlink("d".into()))
        );
    }

    #[test]
    fn special_nodes_are_listed_but_never_opened() {
        let s = SimStorage::new();
        s.create_dir_all(p("d")).expect("mkdir");
        s.make_special(p("d/fifo"), FileKind::Fifo).expect("mkfifo");
        s.make_special(p("d/socket"), FileKind::Socket)
            .expect("bind");
        assert!(s.make_special(p("d/f"), FileKind::Regular).is_err());
        for (name, kind) in [("d/fifo", FileKind::Fifo), ("d/socket", FileKind::Socket)] {
            for mode in [OpenMode::Read, OpenMode::ReadWrite, OpenMode::CreateOrOpen] {
                let e = s.open(p(name), mode).expect_err(name);
                let typed = super::super::not_regular(&e).expect("a typed error");
                assert_eq!(
                    (typed.found, typed.path.clone()),
                    (kind, s.display_path(p(name)))
                );
            }
            assert_eq!(
                errno(s.open(p(name), OpenMode::CreateNew)),
                Some(libc::EEXIST)
            );
            let e = s.map(p(name)).expect_err(name);
            assert_eq!(super::super::not_regular(&e).map(|t| t.found), Some(kind));
            assert_eq!(s.metadata(p(name)).expect(name).kind, kind);
        }
        let listed: Vec<_> = s
            .read_dir(p("d"))
            .expect("ls")
            .into_iter()
            .map(|e| (e.name, e.metadata.kind))
            .collect();
        assert_eq!(listed.len(), 2, "{listed:?}");
        assert_eq!(
            s.snapshot().get(p("d/fifo")),
            Some(&SimNode::Special(FileKind::Fifo))
        );
        // Until synced, a crash takes it away like any new name.
        assert!(!s.durable_snapshot().contains_key(p("d/fifo")));
        s.sync_dir(p(".")).expect("sync");
        s.sync_dir(p("d")).expect("sync");
        s.crash(CrashMode::DropUnsynced);
        s.restart();
        assert_eq!(
            s.snapshot().get(p("d/fifo")),
            Some(&SimNode::Special(FileKind::Fifo))
        );
        s.rename(p("d/fifo"), p("moved")).expect("rename");
        s.remove_file(p("moved")).expect("unlink");
        assert!(!s.exists(p("moved")));
    }
}

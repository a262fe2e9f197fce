//! [`BlobStore`]: loose objects and packs behind one API.

use std::collections::{HashMap, HashSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::{Duration, Instant, SystemTime};

use crate::backend::{
    read_exact_at, Backend, BackendError, FileKind, ListedEntry, ObjectReader, Put, Upload,
};
use crate::cache::{CachedGroup, GroupCache, GroupCacheStats};
use crate::content::Content;
use crate::error::{Error, Result};
use crate::group::{self, Compression, MAX_GROUP_TARGET};
use crate::id::BlobId;
use crate::listing::IdListing;
use crate::object::{self, Header, HEADER_LEN};
use crate::pack::{self, Found, GroupedEntry, Pack, PackEntry};
use crate::storage::{not_regular_error, parent_dir, symlink_error, Storage};

/// Directory of loose objects, below the store's base directory.
pub const OBJECTS_DIR: &str = "objects";
/// Directory of packs and their indexes.
pub const PACKS_DIR: &str = "packs";
/// Directory of temp files (same file system as the rest, so links work).
pub const TMP_DIR: &str = "tmp";

/// Pack files a [`BlobStore`] keeps open for reading, at most (the most
/// recently read ones). A pack index is mapped and its descriptor closed at
/// once; a pack file is opened when it is read. Opening a pack for every
/// read would cost an `open` and a `close` (about 2.4 µs on Linux, four
/// times a 4 KiB `pread` from the page cache) on each `get`; keeping the
/// last few open makes repeated reads of the same packs as cheap as before
/// while the descriptors held stay bounded, whatever the number of packs
/// (format-spec.md 2.6).
pub const OPEN_PACK_FILES: usize = 8;
/// Batches of at least this many items on an object store list the loose
/// objects once instead of asking per item
/// ([`BlobStore::loose_listing_for`]).
pub(crate) const LIST_LOOSE_FROM: usize = 8;
/// Batches of at least this many items on a file system list the names in
/// a fanout directory when an item first falls in it, instead of looking up
/// each item's name ([`BlobStore::loose_listing_for`]): a lookup of a name
/// that is not there cost about 6 µs, and listing a directory of a few
/// names about as much as one lookup, so from two items per directory on
/// the listing is the cheaper.
pub(crate) const LIST_LOOSE_ON_FILES_FROM: usize = 512;

/// What a batch knows of the loose objects without asking per item
/// ([`BlobStore::loose_listing_for`]).
pub(crate) enum LooseListing {
    /// Every loose object, listed at once.
    All(HashSet<BlobId>),
    /// Each of the 256 fanout directories' objects, listed when first
    /// wanted (`None`: the listing failed, and each item is asked for).
    ByFanout(Box<[OnceLock<Option<HashSet<BlobId>>>]>),
}

/// Tunables of a [`BlobStore`].
#[derive(Clone, Debug)]
pub struct Options {
    /// zstd compression level of loose objects (1-22; default 3).
    pub compression_level: i32,
    /// How batch puts group and compress objects in their packs
    /// ([`BlobStore::put_batch`]: attach, appends with many new blobs), and
    /// how a writer's merge of small packs re-encodes the groups it does
    /// not copy (default [`Compression::Fast`]).
    pub batch_compression: Compression,
    /// How imports group and compress (`jpstore_engine::Store::import`
    /// passes it to [`BlobStore::put_batch_compressed`]; default
    /// [`Compression::Max`]: an import is written once and read for
    /// years; format-spec.md 2.12 and BENCHMARKS.md give the costs).
    pub import_compression: Compression,
    /// How gc's merges and pack rewrites re-encode the groups they do not
    /// copy (default [`Compression::Balanced`]).
    pub repack_compression: Compression,
    /// Bound of the group cache, in bytes: decompressed groups of packs
    /// of version 2 kept for reads (default 32 MiB; 0 keeps none). A group
    /// larger than a quarter of it is never kept.
    pub group_cache_bytes: u64,
    /// Largest raw blob the store accepts or decodes, in bytes. Objects whose
    /// header claims more are refused before any allocation (default 1 GiB).
    pub max_blob_len: u64,
    /// Worker threads for batch put and verify (default: available cores).
    pub threads: usize,
    /// Packs smaller than this (in bytes) are *small*: a batch put, after
    /// publishing its pack, merges small packs when their sizes break the
    /// geometric rule (format-spec.md 2.11). Larger packs are merged by gc
    /// only. 0: writers never merge (default 8 MiB).
    pub small_pack_bytes: u64,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            compression_level: 3,
            batch_compression: Compression::Fast,
            import_compression: Compression::Max,
            repack_compression: Compression::Balanced,
            group_cache_bytes: 32 << 20,
            max_blob_len: 1 << 30,
            threads: std::thread::available_parallelism().map_or(2, |n| n.get()),
            small_pack_bytes: 8 << 20,
        }
    }
}

/// Where a stored object lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Location {
    /// A loose object file.
    Loose(PathBuf),
    /// An object inside a pack.
    Packed {
        /// The pack's name.
        pack: String,
        /// Offset inside the pack file of the object (a pack of version 1)
        /// or of the group that holds it (version 2).
        offset: u64,
    },
}

/// The result of a single put.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PutOutcome {
    /// The content's id.
    pub id: BlobId,
    /// Whether this call stored a new object (false: it was already present).
    pub stored: bool,
    /// Bytes of the object this call stored (header and payload; 0 if none).
    pub stored_len: u64,
}

/// A loose object, as listed for gc.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LooseObject {
    /// Its id.
    pub id: BlobId,
    /// Bytes on disk.
    pub stored_len: u64,
    /// Last modification (creation or freshening).
    pub modified: SystemTime,
}

/// A pack, as listed for gc and stats.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PackInfo {
    /// Its name (hex BLAKE3 of the pack file).
    pub name: String,
    /// Number of objects.
    pub objects: usize,
    /// Bytes of the pack file.
    pub pack_bytes: u64,
    /// Last modification of the index (publication or freshening).
    pub modified: SystemTime,
    /// Its format version (1: objects one by one; 2: in groups).
    pub version: u8,
    /// Groups of a pack of version 2 (0 for version 1).
    pub groups: usize,
}

/// The content-addressable blob store. See the crate documentation.
///
/// A `BlobStore` is `Send + Sync`; threads share one handle. Processes share
/// the directory: every write is safe against concurrent writers (format-spec.md,
/// "Concurrency").
#[derive(Debug)]
pub struct BlobStore {
    backend: Arc<dyn Backend>,
    base: PathBuf,
    options: Options,
    packs: RwLock<HashMap<String, Arc<Pack>>>,
    /// Whether the packs directory was listed (the first lookup lists it:
    /// a command that looks nothing up pays no listing).
    packs_listed: AtomicBool,
    /// Open pack files by pack name, least recently read first; at most
    /// [`OPEN_PACK_FILES`].
    pack_files: Mutex<Vec<(String, Arc<dyn ObjectReader>)>>,
    /// Packs whose index did not load (damage): skipped, so one damaged pack
    /// does not make the store unusable; `verify_all` reports them.
    broken: RwLock<HashSet<String>>,
    /// Packs whose index is of a newer format (by name, with its version):
    /// skipped as the damaged ones are, never moved or removed, reported
    /// as what they are ([`BlobStore::newer_packs`]).
    newer: RwLock<HashMap<String, u8>>,
    poisoned: Mutex<Option<PathBuf>>,
    tmp_counter: AtomicU64,
    /// Decompressed groups of packs of version 2, for reads.
    groups: GroupCache,
    /// When the packs were last listed (the start of that listing).
    listed_at: Mutex<Option<Instant>>,
    /// Where removals go instead of being deleted, while gc on a shared
    /// store runs (format-spec.md 5.5), and what went there.
    pub(crate) trash: Mutex<Option<crate::trash_run::TrashRun>>,
    /// Where gc's runs keep their trash on a shared store, for reads to
    /// look at when an object is found nowhere else
    /// ([`BlobStore::look_in_trash_below`]).
    pub(crate) trash_root: OnceLock<PathBuf>,
}

impl BlobStore {
    /// Opens (creating its directories if needed) the blob store at `base`
    /// inside `backend`.
    pub fn open(
        backend: Arc<dyn Backend>,
        base: impl Into<PathBuf>,
        options: Options,
    ) -> Result<Self> {
        let base = base.into();
        let store = Self {
            backend,
            base,
            groups: GroupCache::new(options.group_cache_bytes),
            options,
            packs: RwLock::new(HashMap::new()),
            packs_listed: AtomicBool::new(false),
            pack_files: Mutex::new(Vec::new()),
            broken: RwLock::new(HashSet::new()),
            newer: RwLock::new(HashMap::new()),
            poisoned: Mutex::new(None),
            tmp_counter: AtomicU64::new(0),
            listed_at: Mutex::new(None),
            trash: Mutex::new(None),
            trash_root: OnceLock::new(),
        };
        for dir in [OBJECTS_DIR, PACKS_DIR, TMP_DIR] {
            store.ensure_dir(&store.base.join(dir))?;
        }
        Ok(store)
    }

    /// The options in effect.
    pub fn options(&self) -> &Options {
        &self.options
    }

    /// The backend everything is kept in.
    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.backend
    }

    /// The base directory inside the storage.
    pub fn base(&self) -> &Path {
        &self.base
    }

    // ----- paths and small helpers -------------------------------------------------

    pub(crate) fn loose_path(&self, id: &BlobId) -> PathBuf {
        let hex = id.to_hex();
        self.base.join(OBJECTS_DIR).join(&hex[..2]).join(&hex[2..])
    }

    fn shown(&self, path: &Path) -> PathBuf {
        self.backend.display(path)
    }

    fn io(&self, op: &'static str, path: &Path, source: io::Error) -> Error {
        Error::Io {
            op,
            path: self.shown(path),
            source,
        }
    }

    pub(crate) fn corrupt(
        &self,
        path: &Path,
        offset: Option<u64>,
        expected: String,
        found: String,
    ) -> Error {
        Error::Corrupt {
            path: self.shown(path),
            offset,
            expected,
            found,
        }
    }

    /// Records a failed sync and returns the error to report.
    fn sync_failed(&self, path: &Path, source: io::Error) -> Error {
        let mut p = self.poisoned.lock().unwrap_or_else(|e| e.into_inner());
        if p.is_none() {
            *p = Some(self.shown(path));
        }
        Error::SyncFailed {
            path: self.shown(path),
            source,
        }
    }

    fn check_poisoned(&self) -> Result<()> {
        let p = self.poisoned.lock().unwrap_or_else(|e| e.into_inner());
        match &*p {
            Some(path) => Err(Error::Poisoned { path: path.clone() }),
            None => Ok(()),
        }
    }

    /// The error of a failed write of the backend; a failed sync poisons
    /// the store.
    pub(crate) fn backend_error(&self, e: BackendError) -> Error {
        match e {
            BackendError::Io { op, key, source } => self.io(op, &key, source),
            BackendError::Unsynced { key, source } => self.sync_failed(&key, source),
        }
    }

    /// Creates a directory (and missing ancestors) if missing and makes each
    /// new entry durable by syncing its parent.
    fn ensure_dir(&self, dir: &Path) -> Result<()> {
        match self.backend.head(dir) {
            Ok(m) if m.kind == FileKind::Directory => return Ok(()),
            Ok(m) => {
                return Err(self.corrupt(
                    dir,
                    None,
                    "a directory".into(),
                    m.kind.describe().into(),
                ));
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(self.io("inspect", dir, e)),
        }
        self.check_poisoned()?;
        // Every new directory needs its parent synced to be durable, so
        // create missing ancestors one level at a time.
        let parent = parent_dir(dir);
        if parent != Path::new(".") {
            self.ensure_dir(parent)?;
        }
        self.backend
            .create_prefix(dir)
            .map_err(|e| self.backend_error(e))
    }

    fn tmp_path(&self, kind: &str) -> PathBuf {
        let n = self.tmp_counter.fetch_add(1, Ordering::Relaxed);
        let nanos = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        self.base
            .join(TMP_DIR)
            .join(format!("{}-{nanos}-{n}.{kind}", std::process::id()))
    }

    fn check_len(&self, len: u64) -> Result<()> {
        if len > self.options.max_blob_len {
            return Err(Error::TooLarge {
                id: None,
                path: self.shown(&self.base),
                size: len,
                max: self.options.max_blob_len,
            });
        }
        Ok(())
    }

    // ----- packs --------------------------------------------------------------

    /// Rescans the packs directory: loads new packs, forgets removed ones.
    pub fn refresh_packs(&self) -> Result<()> {
        self.packs_listed.store(true, Ordering::Release);
        let dir = self.base.join(PACKS_DIR);
        let started = Instant::now();
        let entries = self
            .backend
            .list(&dir)
            .map_err(|e| self.io("list", &dir, e))?;
        *self.listed_at.lock().unwrap_or_else(|e| e.into_inner()) = Some(started);
        let names: HashSet<String> = entries
            .iter()
            .filter_map(|e| pack::name_of_index_file(&e.name).map(str::to_owned))
            .collect();
        let known: Vec<String> = {
            let packs = self.packs.read().unwrap_or_else(|e| e.into_inner());
            packs.keys().cloned().collect()
        };
        let mut loaded = Vec::new();
        let broken: HashSet<String> = {
            let mut b = self.broken.write().unwrap_or_else(|e| e.into_inner());
            b.retain(|n| names.contains(n));
            b.clone()
        };
        let newer: HashSet<String> = {
            let mut n = self.newer.write().unwrap_or_else(|e| e.into_inner());
            n.retain(|name, _| names.contains(name));
            n.keys().cloned().collect()
        };
        for name in &names {
            if known.contains(name) || broken.contains(name) || newer.contains(name) {
                continue;
            }
            match self.load_pack(name) {
                Ok(p) => loaded.push(p),
                // Removed by a concurrent rewrite between listing and opening.
                Err(Error::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => {}
                // An index of a newer format: skipped too, not damage.
                Err(Error::Unsupported { version, .. }) => {
                    self.newer
                        .write()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(name.clone(), version);
                }
                // A damaged index, or a pack or index that is not a regular
                // file: its objects are unreachable, the rest of the store
                // is not. verify_all reports it (fsck).
                Err(Error::Corrupt { .. } | Error::TooLarge { .. }) => {
                    self.broken
                        .write()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(name.clone());
                }
                Err(Error::Io { source, .. }) if crate::storage::not_regular(&source).is_some() => {
                    self.broken
                        .write()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(name.clone());
                }
                Err(e) => return Err(e),
            }
        }
        if loaded.is_empty() && known.iter().all(|k| names.contains(k)) {
            return Ok(());
        }
        let mut packs = self.packs.write().unwrap_or_else(|e| e.into_inner());
        packs.retain(|k, p| {
            let kept = names.contains(k);
            if !kept {
                self.groups.forget_pack(p.serial());
            }
            kept
        });
        for p in loaded {
            packs.insert(p.name.clone(), Arc::new(p));
        }
        drop(packs);
        // A removed pack's descriptor would keep its blocks allocated.
        self.pack_files
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|(name, _)| names.contains(name));
        Ok(())
    }

    /// The pack file of `p`, open for reading: one of the
    /// [`OPEN_PACK_FILES`] kept open, or opened now (and the least recently
    /// read one closed, once no read holds it). `NotFound` when the pack
    /// was removed since its index was loaded (a merge or a sweep: its
    /// objects are in another pack or garbage).
    pub(crate) fn pack_file(&self, p: &Pack) -> io::Result<Arc<dyn ObjectReader>> {
        {
            let mut files = self.pack_files.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(i) = files.iter().position(|(name, _)| *name == p.name) {
                let entry = files.remove(i);
                let file = Arc::clone(&entry.1);
                files.push(entry);
                return Ok(file);
            }
        }
        // Opened without the lock held: other reads go on meanwhile.
        let file: Arc<dyn ObjectReader> = Arc::from(self.backend.open(&p.pack_path)?);
        let mut files = self.pack_files.lock().unwrap_or_else(|e| e.into_inner());
        if !files.iter().any(|(name, _)| *name == p.name) {
            if files.len() >= OPEN_PACK_FILES {
                files.remove(0);
            }
            files.push((p.name.clone(), Arc::clone(&file)));
        }
        Ok(file)
    }

    /// The pack files this handle holds open (at most [`OPEN_PACK_FILES`]).
    pub fn open_pack_files(&self) -> usize {
        self.pack_files
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }

    /// Packs of version 2 whose file is not as long as their index says
    /// (bytes appended, a sparse tail, a cut), with the error naming the
    /// pack: damage that verify reports too, found here from the lengths
    /// alone, for a check that does not read data. Reads of the objects
    /// the index places inside the file still work.
    pub fn packs_of_wrong_length(&self) -> Result<Vec<(String, Error)>> {
        self.list_packs_once()?;
        Ok(self
            .loaded_packs()
            .iter()
            .filter_map(|p| self.check_pack_len(p).err().map(|e| (p.name.clone(), e)))
            .collect())
    }

    /// [`Error::NotFound`] for `id`, naming the first damaged index (by
    /// name) if reads skip one: the blob may be in its pack. Where reads
    /// skip a pack of a newer format, the blob may be there, which no read
    /// of this build can tell: [`Error::Unsupported`] naming its index.
    pub(crate) fn not_found(&self, id: &BlobId) -> Error {
        let newer = self
            .newer
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .min()
            .map(|(name, version)| (name.clone(), *version));
        if let Some((name, version)) = newer {
            let (_, index) = pack::pack_file_names(&self.base.join(PACKS_DIR), &name);
            return Error::Unsupported {
                path: self.backend.display(&index),
                kind: crate::FormatKind::PackIndex,
                version,
                blob: Some(*id),
            };
        }
        let damaged = self
            .broken
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .min()
            .cloned();
        Error::NotFound {
            id: *id,
            damaged_index: damaged.map(|name| {
                let (_, index) = pack::pack_file_names(&self.base.join(PACKS_DIR), &name);
                self.backend.display(&index)
            }),
        }
    }

    /// Packs whose index is damaged (skipped by reads: their objects are
    /// missing to readers), with the error loading it gives now: for
    /// verify, and for a check that names the index without reading data.
    pub fn broken_packs(&self) -> Vec<(String, Error)> {
        let names: Vec<String> = self
            .broken
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .cloned()
            .collect();
        let mut out = Vec::new();
        for n in names {
            match self.load_pack(&n) {
                // Moved aside or removed since: no longer part of the store.
                Err(Error::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => {
                    self.broken
                        .write()
                        .unwrap_or_else(|e| e.into_inner())
                        .remove(&n);
                }
                Err(e) => out.push((n, e)),
                Ok(_) => {}
            }
        }
        out
    }

    /// Packs whose index is of a newer format (skipped by reads, like
    /// damaged ones, but not damage), with the error that says so, naming
    /// the index.
    pub fn newer_packs(&self) -> Vec<(String, Error)> {
        let mut newer: Vec<(String, u8)> = self
            .newer
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(name, version)| (name.clone(), *version))
            .collect();
        newer.sort();
        newer
            .into_iter()
            .map(|(name, version)| {
                let (_, index) = pack::pack_file_names(&self.base.join(PACKS_DIR), &name);
                let error = Error::Unsupported {
                    path: self.backend.display(&index),
                    kind: crate::FormatKind::PackIndex,
                    version,
                    blob: None,
                };
                (name, error)
            })
            .collect()
    }

    fn load_pack(&self, name: &str) -> Result<Pack> {
        let (pack_path, index_path) = pack::pack_file_names(&self.base.join(PACKS_DIR), name);
        // The map outlives the descriptor it was made from, which is closed
        // at once; the pack file is opened only when it is read.
        let index = self
            .backend
            .map(&index_path)
            .map_err(|e| self.io("map", &index_path, e))?;
        if let Some(version) = pack::newer_index_version(&index) {
            return Err(Error::Unsupported {
                path: self.shown(&index_path),
                kind: crate::FormatKind::PackIndex,
                version,
                blob: None,
            });
        }
        let pack_meta = self
            .backend
            .head(&pack_path)
            .map_err(|e| self.io("inspect", &pack_path, e))?;
        if pack_meta.kind == FileKind::Symlink {
            return Err(self.io("open", &pack_path, symlink_error(&self.shown(&pack_path))));
        }
        Pack::new(
            name.to_owned(),
            pack_path,
            index_path.clone(),
            index,
            pack_meta.len,
        )
        .map_err(|(offset, expected, found)| {
            self.corrupt(&index_path, Some(offset), expected, found)
        })
    }

    /// The pack holding `id` among those loaded (the packs directory is
    /// listed at the first lookup of an open store, not when it opens).
    fn find_in_packs(&self, id: &BlobId) -> Result<Option<(Arc<Pack>, Found)>> {
        self.list_packs_once()?;
        let packs = self.packs.read().unwrap_or_else(|e| e.into_inner());
        Ok(packs
            .values()
            .find_map(|p| p.find(id).map(|e| (Arc::clone(p), e))))
    }

    /// Lists the packs directory if nothing did since the store opened.
    fn list_packs_once(&self) -> Result<()> {
        if self.packs_listed.load(Ordering::Acquire) {
            return Ok(());
        }
        self.refresh_packs()
    }

    /// The packs currently loaded (after a refresh).
    pub fn packs(&self) -> Result<Vec<PackInfo>> {
        self.refresh_packs()?;
        let packs: Vec<Arc<Pack>> = {
            let packs = self.packs.read().unwrap_or_else(|e| e.into_inner());
            packs.values().cloned().collect()
        };
        let mut out = Vec::with_capacity(packs.len());
        for p in packs {
            let modified = match self.backend.head(&p.index_path) {
                Ok(m) => m.modified,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(self.io("inspect", &p.index_path, e)),
            };
            out.push(PackInfo {
                name: p.name.clone(),
                objects: p.len(),
                pack_bytes: p.pack_len,
                modified,
                version: p.version(),
                groups: p.group_count(),
            });
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// The ids in one pack.
    pub fn pack_ids(&self, name: &str) -> Result<Vec<BlobId>> {
        let pack = self.pack_by_name(name)?;
        Ok(pack.ids().collect())
    }

    pub(crate) fn pack_by_name(&self, name: &str) -> Result<Arc<Pack>> {
        self.list_packs_once()?;
        let packs = self.packs.read().unwrap_or_else(|e| e.into_inner());
        packs.get(name).cloned().ok_or_else(|| {
            let (_, idx) = pack::pack_file_names(&self.base.join(PACKS_DIR), name);
            self.io("find pack", &idx, io::Error::from(io::ErrorKind::NotFound))
        })
    }

    // ----- reads --------------------------------------------------------------

    /// Lists the packs again if a writer's window on the backend's
    /// [`WriterClock`](crate::backend::WriterClock) began after the last
    /// listing: on a shared store, a writer must not learn that a blob
    /// exists from a listing older than its window (format-spec.md 5.5).
    fn fresh_for_writers(&self) -> Result<()> {
        let Some(start) = self.backend.writer_clock().and_then(|c| c.listing_start()) else {
            return Ok(());
        };
        let listed = *self.listed_at.lock().unwrap_or_else(|e| e.into_inner());
        if listed.is_none_or(|at| at < start) {
            self.refresh_packs()?;
        }
        Ok(())
    }

    /// Where `id` is stored, refreshing the pack list once on a miss.
    pub fn locate(&self, id: &BlobId) -> Result<Option<Location>> {
        self.fresh_for_writers()?;
        for attempt in 0..2 {
            if let Some((p, found)) = self.find_in_packs(id)? {
                let offset = match found {
                    Found::Object(e) => e.offset,
                    // Within the index's bounds: the index is checksummed;
                    // a group out of range is reported by a read.
                    Found::Grouped(e) if (e.group as usize) < p.group_count() => {
                        p.group(e.group as usize).offset
                    }
                    Found::Grouped(_) => 0,
                };
                return Ok(Some(Location::Packed {
                    pack: p.name.clone(),
                    offset,
                }));
            }
            let path = self.loose_path(id);
            if self.loose_exists(&path)? {
                return Ok(Some(Location::Loose(path)));
            }
            if attempt == 0 {
                self.refresh_packs()?;
            }
        }
        Ok(None)
    }

    /// Whether `id` is in the store as a loose object or in a pack already
    /// loaded, without rescanning the packs directory (listed once, by the
    /// first lookup of the open store). Cheap whatever the
    /// number of packs; may answer `false` for content another process has
    /// just packed, which only costs a redundant copy on a following write
    /// (format-spec.md 2.2). For deciding what to write, not for reads.
    pub fn exists_cached(&self, id: &BlobId) -> Result<bool> {
        self.fresh_for_writers()?;
        if self.find_in_packs(id)?.is_some() {
            return Ok(true);
        }
        self.loose_exists(&self.loose_path(id))
    }

    /// [`BlobStore::exists_cached`] with the loose objects looked up in
    /// `loose` when it is given ([`BlobStore::loose_listing_for`]).
    pub(crate) fn exists_cached_in(
        &self,
        id: &BlobId,
        loose: Option<&LooseListing>,
    ) -> Result<bool> {
        let Some(loose) = loose else {
            return self.exists_cached(id);
        };
        self.fresh_for_writers()?;
        if self.find_in_packs(id)?.is_some() {
            return Ok(true);
        }
        match loose {
            LooseListing::All(ids) => Ok(ids.contains(id)),
            LooseListing::ByFanout(dirs) => {
                let fanout = usize::from(id.as_bytes()[0]);
                let listed = dirs[fanout].get_or_init(|| {
                    let files = self.backend.files()?;
                    self.list_fanout_names(files, fanout).ok()
                });
                match listed {
                    Some(ids) => Ok(ids.contains(id)),
                    // Not listed: asked.
                    None => self.loose_exists(&self.loose_path(id)),
                }
            }
        }
    }

    /// What a batch of `count` items takes to know which of them are
    /// loose objects, where that is cheaper than asking for each item that
    /// no pack holds: on an object store (where each question is a request)
    /// for batches of [`LIST_LOOSE_FROM`] items or more, one listing of
    /// every loose object (a request per 1,000 objects,
    /// [`BlobStore::loose_objects`]); on a file system for batches of
    /// [`LIST_LOOSE_ON_FILES_FROM`] items or more, each fanout directory
    /// listed by its names when an item first falls in it (by the worker
    /// that meets it; no entry looked up where the listing says what it
    /// is). A name there that is not a regular file is not an object: the
    /// batch stores that content in its pack (where a lookup would have
    /// refused the batch naming the node). `None`: ask per item. A loose
    /// object stored by another process after the listing is not seen: the
    /// batch stores its content again, in its pack (a duplicate, never a
    /// loss).
    pub(crate) fn loose_listing_for(&self, count: usize) -> Result<Option<LooseListing>> {
        if self.backend.files().is_some() {
            return Ok((count >= LIST_LOOSE_ON_FILES_FROM)
                .then(|| LooseListing::ByFanout((0..256).map(|_| OnceLock::new()).collect())));
        }
        if count < LIST_LOOSE_FROM {
            return Ok(None);
        }
        Ok(Some(LooseListing::All(
            self.loose_objects()?.into_iter().map(|o| o.id).collect(),
        )))
    }

    /// The ids of the regular files of fanout directory `fanout` (its
    /// number, the ids' first byte), from their names and kinds only; none
    /// where the directory is not there.
    fn list_fanout_names(&self, files: &dyn Storage, fanout: usize) -> io::Result<HashSet<BlobId>> {
        let dir = format!("{fanout:02x}");
        let names = match files.read_dir_kinds(&self.base.join(OBJECTS_DIR).join(&dir)) {
            Ok(names) => names,
            Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(e),
        };
        Ok(names
            .into_iter()
            .filter(|(_, kind)| *kind == FileKind::Regular)
            .filter_map(|(name, _)| BlobId::parse(&format!("{dir}{name}")).ok())
            .collect())
    }

    /// Whether a loose object is at `path`. A symbolic link, a FIFO, a
    /// directory or any other node that is not a regular file there is an
    /// error naming it, never taken for the object.
    fn loose_exists(&self, path: &Path) -> Result<bool> {
        match self.backend.head(path) {
            Ok(m) if m.kind == FileKind::Symlink => {
                Err(self.io("inspect", path, symlink_error(&self.shown(path))))
            }
            Ok(m) if m.kind != FileKind::Regular => {
                Err(self.io("inspect", path, not_regular_error(self.shown(path), m.kind)))
            }
            Ok(_) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(self.io("inspect", path, e)),
        }
    }

    /// Whether `id` is in the store.
    pub fn exists(&self, id: &BlobId) -> Result<bool> {
        Ok(self.locate(id)?.is_some())
    }

    /// The raw size of `id`, without reading its content (a pack index lookup or
    /// a 16-byte header read).
    pub fn size(&self, id: &BlobId) -> Result<u64> {
        // The index has the raw length: look there first, once.
        self.fresh_for_writers()?;
        if let Some((_, e)) = self.find_in_packs(id)? {
            return Ok(e.raw_len());
        }
        let path = match self.locate(id)? {
            // Moved to gc's trash on a shared store (format-spec.md 5.5):
            // its header there.
            None => match self.loose_in_trash(id)? {
                Some(key) => key,
                None => return Err(self.not_found(id)),
            },
            Some(Location::Packed { .. }) => {
                return match self.find_in_packs(id)? {
                    Some((_, e)) => Ok(e.raw_len()),
                    None => Err(self.not_found(id)),
                }
            }
            Some(Location::Loose(path)) => path,
        };
        let file = self
            .backend
            .open(&path)
            .map_err(|e| self.io("open", &path, e))?;
        let mut h = [0u8; HEADER_LEN];
        read_exact_at(&*file, &mut h, 0).map_err(|e| {
            if e.kind() == io::ErrorKind::UnexpectedEof {
                self.corrupt(
                    &path,
                    Some(0),
                    format!("a {HEADER_LEN}-byte object header"),
                    "a shorter file".into(),
                )
            } else {
                self.io("read", &path, e)
            }
        })?;
        let header = Header::decode(&h).map_err(|d| {
            if !object::names_a_newer_version(&h) {
                return self.corrupt(&path, Some(d.offset), d.expected, d.found);
            }
            // A newer format, or damage: the whole object tells.
            let mut stored = Vec::new();
            match self.read_stored_at(&path, id, &mut stored) {
                Ok(true) => self.loose_error(&path, &stored, d),
                Ok(false) => self.not_found(id),
                Err(e) => e,
            }
        })?;
        Ok(header.raw_len)
    }

    /// Reads and verifies the content of `id`.
    ///
    /// The bytes returned always hash to `id`. If the object is damaged in one
    /// place and intact in another (a loose copy and a packed copy), the intact
    /// copy is returned; if no copy is intact, the first damage is reported.
    pub fn get(&self, id: &BlobId) -> Result<Vec<u8>> {
        self.get_content(id).map(Content::into_vec)
    }

    /// [`BlobStore::get`] without a copy where it can: an object of a pack
    /// of version 2 is the range of its group's decompressed content, which
    /// the group cache holds (the read holds the group as long as it lives,
    /// whatever the cache evicts).
    pub fn get_content(&self, id: &BlobId) -> Result<Content> {
        let mut first_err = None;
        // A pack found removed (merged or swept since its index was loaded)
        // sends the read to the packs listed now; a few rounds cover merges
        // that follow one another while the read runs.
        const ATTEMPTS: usize = 4;
        for attempt in 0..ATTEMPTS {
            if let Some((p, found)) = self.find_in_packs(id)? {
                let read = match found {
                    Found::Object(e) => self.read_packed(&p, &e).map(Content::from),
                    Found::Grouped(e) => self.read_grouped(&p, &e),
                };
                match read {
                    Ok(data) => return Ok(data),
                    // The pack was removed by a concurrent rewrite after we
                    // looked it up; retry with a fresh pack list.
                    Err(Error::Io { ref source, .. })
                        if source.kind() == io::ErrorKind::NotFound => {}
                    Err(err) => {
                        first_err.get_or_insert(err);
                    }
                }
            }
            match self.read_loose(id) {
                Ok(Some(data)) => return Ok(data.into()),
                Ok(None) => {}
                Err(err) => {
                    first_err.get_or_insert(err);
                }
            }
            if first_err.is_some() {
                break;
            }
            if attempt + 1 < ATTEMPTS {
                self.refresh_packs()?;
            }
        }
        if first_err.is_none() {
            if let Some(data) = self.read_loose_in_trash(id)? {
                return Ok(data.into());
            }
        }
        Err(first_err.unwrap_or_else(|| self.not_found(id)))
    }

    pub(crate) fn read_loose(&self, id: &BlobId) -> Result<Option<Vec<u8>>> {
        let mut buf = Vec::new();
        if !self.read_loose_stored(id, &mut buf)? {
            return Ok(None);
        }
        object::decode(&buf, id, self.options.max_blob_len)
            .map(Some)
            .map_err(|d| self.loose_error(&self.loose_path(id), &buf, d))
    }

    /// Reads the stored bytes (header and payload) of loose object `id`
    /// into `buf`, which is resized to the file's length. `Ok(false)` if
    /// there is no such object.
    pub(crate) fn read_loose_stored(&self, id: &BlobId, buf: &mut Vec<u8>) -> Result<bool> {
        self.read_stored_at(&self.loose_path(id), id, buf)
    }

    /// [`BlobStore::read_loose_stored`] of the loose object `id` at `path`
    /// (its name, or its copy in gc's trash).
    pub(crate) fn read_stored_at(
        &self,
        path: &Path,
        id: &BlobId,
        buf: &mut Vec<u8>,
    ) -> Result<bool> {
        let file = match self.backend.open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(self.io("open", path, e)),
        };
        let len = file.len().map_err(|e| self.io("inspect", path, e))?;
        let max = self.options.max_blob_len.saturating_add(HEADER_LEN as u64);
        if len > max {
            return Err(Error::TooLarge {
                id: Some(*id),
                path: self.shown(path),
                size: len,
                max: self.options.max_blob_len,
            });
        }
        // At most max_blob_len plus a header, which the caller chose to fit
        // in memory.
        object::set_len(buf, len as usize);
        read_exact_at(&*file, buf, 0).map_err(|e| self.io("read", path, e))?;
        Ok(true)
    }

    /// The error for the loose object at `path` whose stored bytes `stored`
    /// fail a check (`d`): [`Error::Unsupported`] where they are an object
    /// of a newer format ([`object::newer_version`]), else damage.
    pub(crate) fn loose_error(&self, path: &Path, stored: &[u8], d: object::DecodeError) -> Error {
        match object::newer_version(stored) {
            Some(version) => Error::Unsupported {
                path: self.shown(path),
                kind: crate::FormatKind::Object,
                version,
                blob: None,
            },
            None => self.corrupt(path, Some(d.offset), d.expected, d.found),
        }
    }

    pub(crate) fn read_packed(&self, p: &Pack, e: &PackEntry) -> Result<Vec<u8>> {
        let max = self.options.max_blob_len.saturating_add(HEADER_LEN as u64);
        let file = self
            .pack_file(p)
            .map_err(|err| self.io("open", &p.pack_path, err))?;
        let stored = p
            .read_stored(&*file, e, max)
            .map_err(|err| self.pack_read_error(p, e, err))?;
        object::decode(&stored, &e.id, self.options.max_blob_len)
            .map_err(|d| self.packed_decode_error(p, e, d))
    }

    /// The largest raw length of a group this store reads: the larger of
    /// the blob size limit (a group of one object is as large as its
    /// object) and [`MAX_GROUP_TARGET`] (groups of several objects).
    pub(crate) fn max_group_raw(&self) -> u64 {
        self.options
            .max_blob_len
            .max(u64::from(MAX_GROUP_TARGET))
            .min(u64::from(u32::MAX))
    }

    /// Reads an object of a pack of version 2: its group's content from the
    /// group cache, or read, checked and decompressed (and kept in the
    /// cache); then the object's bytes, checked against its id (once per
    /// cached group: an object already checked in it is not hashed again).
    pub(crate) fn read_grouped(&self, p: &Pack, e: &GroupedEntry) -> Result<Content> {
        let content = match self.groups.get((p.serial(), e.group)) {
            Some(content) => content,
            None => {
                // Opened first, as a read of version 1 does: a pack file
                // removed since (a merge) sends the read elsewhere, and one
                // that is not a regular file is named as such.
                let file = self
                    .pack_file(p)
                    .map_err(|err| self.io("open", &p.pack_path, err))?;
                let max = self.max_group_raw();
                let g = p
                    .check_grouped_bounds(e, max)
                    .map_err(|msg| self.grouped_bounds_error(p, e, msg))?;
                let mut stored = Vec::new();
                let (_, header) = p
                    .read_group(&*file, e.group as usize, max, &mut stored)
                    .map_err(|err| self.group_read_error(p, e.group, &g, err))?;
                let mut raw = Vec::new();
                group::group_content(&stored, &header, max, &mut raw)
                    .map_err(|d| self.group_decode_error(p, e.group, &g, d))?;
                let content = match header.codec {
                    group::GroupCodec::Raw => {
                        // The payload is the content: keep the buffer.
                        stored.drain(..group::GROUP_HEADER_LEN);
                        stored
                    }
                    group::GroupCodec::Zstd => raw,
                };
                let content = Arc::new(CachedGroup::new(content));
                self.groups
                    .insert((p.serial(), e.group), Arc::clone(&content));
                content
            }
        };
        // Inside the group (checked against the index before the group was
        // read, and here against what was read).
        let range = e.offset as usize..e.end() as usize;
        let bytes = content
            .content
            .get(range.clone())
            .ok_or_else(|| self.grouped_bounds_error(p, e, "outside its group".into()))?;
        if content.is_verified(e.offset, e.raw_len, &e.id) {
            return Ok(Content::of_group(content, range));
        }
        let actual = BlobId::of(bytes);
        if actual != e.id {
            let group_offset = p.group(e.group as usize).offset;
            return Err(self.corrupt(
                &p.pack_path,
                Some(group_offset + group::GROUP_HEADER_LEN as u64),
                format!(
                    "object {} (bytes {}..{} of group {}) with that SHA-256",
                    e.id,
                    e.offset,
                    e.end(),
                    e.group
                ),
                format!("content with SHA-256 {actual}"),
            ));
        }
        content.set_verified(e.offset, e.raw_len, &e.id);
        Ok(Content::of_group(content, range))
    }

    /// What the group cache holds and has done.
    pub fn group_cache_stats(&self) -> GroupCacheStats {
        self.groups.stats()
    }

    /// The error for an object of version 2 that does not lie inside its
    /// group, or a group outside its pack: damage of the index.
    pub(crate) fn grouped_bounds_error(&self, p: &Pack, e: &GroupedEntry, msg: String) -> Error {
        let at = p.position(&e.id).map(|i| p.entry_offset_in_index(i));
        self.corrupt(
            &p.index_path,
            at,
            format!("entry for {} inside its group and pack", e.id),
            msg,
        )
    }

    /// The error for group `g` (at `entry`) whose stored bytes could not be
    /// read or fail a check.
    pub(crate) fn group_read_error(
        &self,
        p: &Pack,
        g: u32,
        entry: &pack::GroupEntry,
        err: pack::ReadError,
    ) -> Error {
        match err {
            pack::ReadError::Bounds(msg) => self.corrupt(
                &p.index_path,
                Some(p.group_offset_in_index(g as usize)),
                format!("group {g} inside the pack"),
                msg,
            ),
            pack::ReadError::TooLarge(size) => Error::TooLarge {
                id: None,
                path: self.shown(&p.pack_path),
                size,
                max: self.max_group_raw(),
            },
            pack::ReadError::Object(d) => self.group_decode_error(p, g, entry, d),
            pack::ReadError::Io(source) if source.kind() == io::ErrorKind::UnexpectedEof => self
                .corrupt(
                    &p.pack_path,
                    Some(entry.offset),
                    format!("{} bytes of group {g}", entry.stored_len()),
                    "end of file".into(),
                ),
            pack::ReadError::Io(source) => self.io("read", &p.pack_path, source),
        }
    }

    /// The error for group `g` whose stored bytes fail a check (`d.offset`
    /// relative to the group).
    pub(crate) fn group_decode_error(
        &self,
        p: &Pack,
        g: u32,
        entry: &pack::GroupEntry,
        d: object::DecodeError,
    ) -> Error {
        self.corrupt(
            &p.pack_path,
            Some(entry.offset + d.offset),
            format!("group {g}: {}", d.expected),
            d.found,
        )
    }

    /// The error for a packed object whose content fails a check.
    pub(crate) fn packed_decode_error(
        &self,
        p: &Pack,
        e: &PackEntry,
        d: object::DecodeError,
    ) -> Error {
        self.corrupt(&p.pack_path, Some(e.offset + d.offset), d.expected, d.found)
    }

    pub(crate) fn pack_read_error(&self, p: &Pack, e: &PackEntry, err: pack::ReadError) -> Error {
        match err {
            pack::ReadError::Bounds(msg) => self.corrupt(
                &p.index_path,
                None,
                format!("entry for {} inside the pack", e.id),
                msg,
            ),
            pack::ReadError::TooLarge(size) => Error::TooLarge {
                id: Some(e.id),
                path: self.shown(&p.pack_path),
                size,
                max: self.options.max_blob_len,
            },
            pack::ReadError::Object(d) => self.corrupt(
                &p.pack_path,
                Some(e.offset + d.offset),
                format!("object {}: {}", e.id, d.expected),
                d.found,
            ),
            pack::ReadError::Io(source) if source.kind() == io::ErrorKind::UnexpectedEof => self
                .corrupt(
                    &p.pack_path,
                    Some(e.offset),
                    format!("{} bytes of object {}", e.stored_len, e.id),
                    "end of file".into(),
                ),
            pack::ReadError::Io(source) => self.io("read", &p.pack_path, source),
        }
    }

    // ----- writes -------------------------------------------------------------

    /// Stores `data` as a loose object (if not present) and returns its id.
    /// When this returns, the object is durable.
    pub fn put(&self, data: &[u8]) -> Result<PutOutcome> {
        self.check_len(data.len() as u64)?;
        let id = BlobId::of(data);
        // No rescan of packs/ on a miss (every new put is a miss): a pack
        // published since our last scan only costs a redundant loose copy.
        if self.exists_cached(&id)? {
            return Ok(PutOutcome {
                id,
                stored: false,
                stored_len: 0,
            });
        }
        self.check_poisoned()?;
        let encoded = object::encode(data, self.options.compression_level)
            .map_err(|e| self.io("compress", &self.base, e))?;
        let stored = self.publish_loose(&id, &encoded)?;
        Ok(PutOutcome {
            id,
            stored,
            stored_len: if stored { encoded.len() as u64 } else { 0 },
        })
    }

    fn publish_loose(&self, id: &BlobId, encoded: &[u8]) -> Result<bool> {
        let path = self.loose_path(id);
        self.ensure_dir(parent_dir(&path))?;
        let tmp = self.tmp_path("obj");
        match self.backend.put_if_absent(&path, encoded, &tmp) {
            Ok(Put::Created) => Ok(true),
            Ok(Put::Existed) => Ok(false),
            Err(e) => Err(self.backend_error(e)),
        }
    }

    pub(crate) fn new_tmp_path(&self, kind: &str) -> PathBuf {
        self.tmp_path(kind)
    }

    pub(crate) fn io_error(&self, op: &'static str, path: &Path, e: io::Error) -> Error {
        self.io(op, path, e)
    }

    pub(crate) fn ensure_writable(&self) -> Result<()> {
        self.check_poisoned()
    }

    pub(crate) fn len_limit(&self, len: u64) -> Result<()> {
        self.check_len(len)
    }

    /// Publishes a synced pack and its synced index (pack first, then
    /// index: an index is only ever visible when its pack is durable).
    pub(crate) fn publish_pack(
        &self,
        name: &str,
        pack: &dyn Upload,
        index: &dyn Upload,
    ) -> Result<()> {
        let dir = self.base.join(PACKS_DIR);
        let (pack_path, index_path) = pack::pack_file_names(&dir, name);
        let publish = |upload: &dyn Upload, to: &Path| {
            upload
                .publish(to)
                .map(|p| p == Put::Created)
                .map_err(|e| self.backend_error(e))
        };
        let pack_linked = publish(pack, &pack_path)?;
        publish(index, &index_path)?;
        if !pack_linked {
            // The same pack was published already (two merges of the same
            // packs, say), and another process may have merged it away
            // between our two links, leaving our index without its pack:
            // link ours again (2.11).
            match self.backend.head(&pack_path) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    publish(pack, &pack_path)?;
                }
                Err(e) => return Err(self.io("inspect", &pack_path, e)),
            }
        }
        self.refresh_packs()
    }

    /// Refreshes the modification time of the object holding `id` (its loose
    /// file, or the index of its pack) so a concurrent gc's grace period spares
    /// it (format-spec.md, "Garbage collection protocol").
    pub fn freshen(&self, id: &BlobId) -> Result<bool> {
        let path = match self.locate(id)? {
            None => return Ok(false),
            Some(Location::Loose(p)) => p,
            Some(Location::Packed { pack, .. }) => {
                pack::pack_file_names(&self.base.join(PACKS_DIR), &pack).1
            }
        };
        self.check_poisoned()?;
        self.backend
            .touch(&path)
            .map_err(|e| self.io("freshen", &path, e))
    }

    // ----- listing --------------------------------------------------------------

    /// All loose objects, with size and modification time: on a file
    /// system, a listing of each fanout directory; on an object store, one
    /// listing of them all ([`Backend::list_objects_below`]: a request per
    /// 1,000 objects instead of one per fanout prefix).
    pub fn loose_objects(&self) -> Result<Vec<LooseObject>> {
        let mut out = Vec::new();
        if self.backend.files().is_some() {
            for dir in self.fanout_dirs()? {
                out.extend(self.loose_objects_in(&dir)?);
            }
        } else {
            let objects = self.base.join(OBJECTS_DIR);
            let listed = self
                .backend
                .list_objects_below(&objects)
                .map_err(|e| self.io("list", &objects, e))?;
            out.extend(listed.into_iter().filter_map(|(key, meta)| {
                let id = loose_id(&key)?;
                (meta.kind == FileKind::Regular).then_some(LooseObject {
                    id,
                    stored_len: meta.len,
                    modified: meta.modified,
                })
            }));
        }
        out.sort_by_key(|o| o.id);
        Ok(out)
    }

    /// The names of the fanout directories of the loose objects.
    pub(crate) fn fanout_dirs(&self) -> Result<Vec<String>> {
        let objects = self.base.join(OBJECTS_DIR);
        let entries = self
            .backend
            .list(&objects)
            .map_err(|e| self.io("list", &objects, e))?;
        Ok(entries
            .into_iter()
            .filter(|d| d.is_prefix() && d.name.len() == 2)
            .map(|d| d.name)
            .collect())
    }

    /// The loose objects of one fanout directory, in no particular order
    /// (none if it was removed meanwhile).
    pub(crate) fn loose_objects_in(&self, dir: &str) -> Result<Vec<LooseObject>> {
        let path = self.base.join(OBJECTS_DIR).join(dir);
        let entries = match self.backend.list(&path) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(self.io("list", &path, e)),
        };
        Ok(entries
            .into_iter()
            .filter_map(|f| {
                let meta = f.object()?;
                let id = BlobId::parse(&format!("{dir}{}", f.name)).ok()?;
                Some(LooseObject {
                    id,
                    stored_len: meta.len,
                    modified: meta.modified,
                })
            })
            .collect())
    }

    /// Every id in the store (loose and packed), sorted, without duplicates.
    pub fn ids(&self) -> Result<Vec<BlobId>> {
        let mut ids: Vec<BlobId> = self.loose_objects()?.into_iter().map(|o| o.id).collect();
        self.refresh_packs()?;
        {
            let packs = self.packs.read().unwrap_or_else(|e| e.into_inner());
            for p in packs.values() {
                ids.extend(p.ids());
            }
        }
        ids.sort();
        ids.dedup();
        Ok(ids)
    }

    /// Every id in the store (after a refresh of the packs) with its raw
    /// size where an index records it: packed objects first, with
    /// `Some(size)`, then loose objects with `None` (their size is in their
    /// header, which [`BlobStore::size`] reads). An id stored in several
    /// places is listed once per place. One listing of the loose objects and
    /// one walk of every index, without sorting.
    pub fn id_sizes(&self) -> Result<Vec<(BlobId, Option<u64>)>> {
        let packs = self.packs_for_listing()?;
        let loose = self.loose_objects()?;
        let mut out =
            Vec::with_capacity(packs.iter().map(|p| p.len()).sum::<usize>() + loose.len());
        for p in packs {
            out.extend(p.id_sizes().map(|(id, size)| (id, Some(size))));
        }
        out.extend(loose.into_iter().map(|o| (o.id, None)));
        Ok(out)
    }

    /// Every id in the store as sorted runs, for checking many references
    /// at once ([`IdListing::in_id_order`]): the packs after a refresh,
    /// and the loose objects `loose` where the caller listed them already
    /// (fsck's walk of the store layout lists every fanout directory), else
    /// listed here. An object stored since is not in it, and is found by
    /// looking it up, as any id a listing missed.
    pub fn listing_beside(&self, loose: Option<Vec<BlobId>>) -> Result<IdListing> {
        let packs = self.packs_for_listing()?;
        let loose = match loose {
            Some(ids) => ids,
            None => self.loose_objects()?.into_iter().map(|o| o.id).collect(),
        };
        Ok(IdListing::new(packs, loose))
    }

    /// The packs to list every id of, in name order: those loaded before a
    /// rescan (still mapped) and those after it. A merge in another
    /// process publishes its pack, then unlinks the merged ones; a listing
    /// of `packs/` that runs meanwhile may see neither, but one of the two
    /// listings saw the merged pack or its inputs (2.11).
    fn packs_for_listing(&self) -> Result<Vec<Arc<Pack>>> {
        let before = self.loaded_packs();
        self.refresh_packs()?;
        let mut packs = self.loaded_packs();
        for p in before {
            if !packs.iter().any(|q| q.name == p.name) {
                packs.push(p);
            }
        }
        Ok(packs)
    }

    pub(crate) fn loaded_packs(&self) -> Vec<Arc<Pack>> {
        let packs = self.packs.read().unwrap_or_else(|e| e.into_inner());
        let mut v: Vec<Arc<Pack>> = packs.values().cloned().collect();
        v.sort_by(|a, b| a.name.cmp(&b.name));
        v
    }

    pub(crate) fn display(&self, path: &Path) -> PathBuf {
        self.shown(path)
    }

    // ----- sweep ------------------------------------------------------------------

    /// Deletes the loose objects `ids` (the sweep primitive of gc). Ids that
    /// are not loose objects are ignored. Returns the number of objects and
    /// bytes removed. The directories are synced so the removal is durable.
    pub fn delete_loose(&self, ids: &[BlobId]) -> Result<SweepOutcome> {
        self.check_poisoned()?;
        let mut out = SweepOutcome::default();
        let mut found = Vec::new();
        for id in ids {
            let path = self.loose_path(id);
            match self.backend.head(&path) {
                Ok(m) => {
                    out.bytes += m.len;
                    found.push((*id, path, m.len));
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(self.io("inspect", &path, e)),
            }
        }
        if self.trashing() {
            (out.objects, out.bytes) = self.trash_loose(&found)?;
            return Ok(out);
        }
        let found: Vec<PathBuf> = found.into_iter().map(|(_, path, _)| path).collect();
        out.objects = self
            .backend
            .delete(&found)
            .map_err(|e| self.backend_error(e))?;
        Ok(out)
    }

    /// Removes pack files without an index whose file is older than `age`:
    /// left by a crash between the unlinks of a rewrite or a merge (2.7,
    /// 2.11), or before a pack's index was published (2.5). A younger one
    /// may be a writer's between its two links; a writer that follows the
    /// gc lock protocol is never there while gc runs. Returns what went.
    pub fn remove_unindexed_packs(&self, age: Duration) -> Result<SweepOutcome> {
        self.check_poisoned()?;
        let dir = self.base.join(PACKS_DIR);
        let entries = self
            .backend
            .list(&dir)
            .map_err(|e| self.io("list", &dir, e))?;
        let indexed: HashSet<&str> = entries
            .iter()
            .filter_map(|e| pack::name_of_index_file(&e.name))
            .collect();
        let now = SystemTime::now();
        let mut out = SweepOutcome::default();
        let mut doomed = Vec::new();
        for e in &entries {
            let (Some(name), ListedEntry::Object(meta)) =
                (pack::name_of_pack_file(&e.name), &e.entry)
            else {
                continue;
            };
            let old = now.duration_since(meta.modified).is_ok_and(|d| d >= age);
            if indexed.contains(name) || !old {
                continue;
            }
            out.bytes += meta.len;
            doomed.push(dir.join(&e.name));
        }
        out.objects = self
            .backend
            .delete(&doomed)
            .map_err(|e| self.backend_error(e))?;
        Ok(out)
    }

    /// Removes temp files older than `age` (left by crashed writers). Younger
    /// ones may belong to a writer that is still running.
    pub fn cleanup_temp(&self, age: Duration) -> Result<SweepOutcome> {
        let dir = self.base.join(TMP_DIR);
        let entries = self
            .backend
            .list(&dir)
            .map_err(|e| self.io("list", &dir, e))?;
        let now = SystemTime::now();
        let mut out = SweepOutcome::default();
        let mut doomed = Vec::new();
        for e in entries {
            let ListedEntry::Object(meta) = &e.entry else {
                continue;
            };
            let old = now
                .duration_since(meta.modified)
                .map(|d| d >= age)
                .unwrap_or(false);
            if old {
                out.bytes += meta.len;
                doomed.push(dir.join(&e.name));
            }
        }
        out.objects = self
            .backend
            .delete(&doomed)
            .map_err(|e| self.backend_error(e))?;
        Ok(out)
    }
}

/// The id of the loose object at `key` below the objects prefix (`ab/cdef…`:
/// a fanout directory of the id's first two hex digits, the other 62 as the
/// name), or `None` for any other key.
fn loose_id(key: &Path) -> Option<BlobId> {
    let mut parts = key.components().map(|c| c.as_os_str().to_str());
    let (Some(Some(dir)), Some(Some(name)), None) = (parts.next(), parts.next(), parts.next())
    else {
        return None;
    };
    if dir.len() != 2 {
        return None;
    }
    BlobId::parse(&format!("{dir}{name}")).ok()
}

/// Progress of a batch put.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BatchProgress {
    /// Items processed so far.
    pub items_done: usize,
    /// Items in the batch.
    pub items_total: usize,
    /// Raw bytes processed so far.
    pub bytes_done: u64,
}

/// The result of a batch put.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct BatchOutcome {
    /// Ids in input order.
    pub ids: Vec<BlobId>,
    /// Raw sizes in input order.
    pub sizes: Vec<u64>,
    /// Objects written to the new pack.
    pub new_objects: usize,
    /// Raw bytes of all items.
    pub raw_bytes: u64,
    /// Bytes of the new pack file (0 if none was written).
    pub pack_bytes: u64,
    /// Name of the new pack, if the batch had new content.
    pub pack: Option<String>,
    /// Small packs merged after the new one was published (format-spec.md
    /// 2.11; the new pack may be one of them, so `pack` may be gone).
    pub merged_packs: usize,
    /// Items whose read skipped them ([`skip_item`](crate::skip_item)),
    /// in input order: nothing was stored for them.
    pub skipped: Vec<usize>,
}

/// What a sweep removed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SweepOutcome {
    /// Files removed.
    pub objects: usize,
    /// Bytes of the removed files.
    pub bytes: u64,
}

/// What a pack rewrite did.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RewriteOutcome {
    /// Objects dropped.
    pub removed_objects: usize,
    /// Objects kept.
    pub kept_objects: usize,
    /// Size of the old pack.
    pub old_bytes: u64,
    /// The new pack (None if nothing was kept).
    pub new_pack: Option<String>,
    /// Size of the new pack.
    pub new_bytes: u64,
    /// Groups of a pack of version 2 copied unchanged into the new pack.
    pub groups_copied: usize,
    /// Groups of the new pack compressed anew from the kept objects of the
    /// old pack's other groups.
    pub groups_encoded: usize,
}

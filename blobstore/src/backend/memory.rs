//! [`MemoryBackend`]: objects in memory with an object store's semantics.
//!
//! No directories, links, inodes or file modes: keys name objects, and a
//! prefix exists while an object lies below it or since it was created with
//! [`Backend::create_prefix`] (a "directory marker", as object stores keep
//! for empty folders). Every write is durable at once. It stands in for a
//! remote object store in tests: what runs against it needs nothing a
//! remote store lacks.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::SystemTime;

use super::{
    Backend, BackendError, BufferedUpload, Expect, FileKind, Listed, ListedEntry, LockGuard,
    LockKind, LogObject, Mapping, ObjectMeta, ObjectReader, Put, Upload, Version,
};
use crate::storage::check_relative;

/// A [`Backend`] in memory. Clones share the same objects.
#[derive(Debug, Clone, Default)]
pub struct MemoryBackend {
    shared: Arc<Shared>,
}

#[derive(Debug, Default)]
struct Shared {
    state: Mutex<State>,
    /// Signalled when a lock is released.
    released: Condvar,
}

#[derive(Debug, Default)]
struct State {
    objects: BTreeMap<String, Object>,
    /// Prefixes created explicitly, with the generation they were created
    /// in (a prefix removed and created again is a new one).
    markers: BTreeMap<String, u64>,
    /// Held locks: shared holders, and whether one holds it exclusively.
    locks: BTreeMap<String, (usize, bool)>,
    /// The last generation or version given out.
    counter: u64,
}

#[derive(Debug, Clone)]
struct Object {
    data: Arc<Vec<u8>>,
    modified: SystemTime,
    version: u64,
}

/// `key` as the string the backend keys by (`a/b/c`), refusing what could
/// leave the store.
fn name(key: &Path) -> io::Result<String> {
    if key == Path::new(".") {
        return Ok(String::new());
    }
    check_relative(key)?;
    let parts: Vec<String> = key
        .iter()
        .map(|c| c.to_string_lossy().into_owned())
        .filter(|c| c != ".")
        .collect();
    Ok(parts.join("/"))
}

/// The parent of a key string ("" for a top-level name).
fn parent(key: &str) -> &str {
    key.rfind('/').map_or("", |i| &key[..i])
}

fn not_found(key: &str) -> io::Error {
    io::Error::new(io::ErrorKind::NotFound, format!("no object {key:?}"))
}

impl State {
    fn next(&mut self) -> u64 {
        self.counter += 1;
        self.counter
    }

    /// Whether `prefix` exists: the root, a marker, or a prefix of an object.
    fn prefix_exists(&self, prefix: &str) -> bool {
        if prefix.is_empty() || self.markers.contains_key(prefix) {
            return true;
        }
        let below = format!("{prefix}/");
        self.objects
            .range(below.clone()..)
            .next()
            .is_some_and(|(k, _)| k.starts_with(&below))
            || self
                .markers
                .range(below.clone()..)
                .next()
                .is_some_and(|(k, _)| k.starts_with(&below))
    }

    fn put(&mut self, key: String, data: Vec<u8>) {
        let version = self.next();
        self.objects.insert(
            key,
            Object {
                data: Arc::new(data),
                modified: SystemTime::now(),
                version,
            },
        );
    }

    fn meta(&self, key: &str) -> io::Result<ObjectMeta> {
        if let Some(o) = self.objects.get(key) {
            return Ok(ObjectMeta {
                len: o.data.len() as u64,
                modified: o.modified,
                kind: FileKind::Regular,
                version: Version(o.version.to_string()),
            });
        }
        if self.prefix_exists(key) {
            return Ok(ObjectMeta {
                len: 0,
                modified: SystemTime::UNIX_EPOCH,
                kind: FileKind::Directory,
                version: Version(String::new()),
            });
        }
        Err(not_found(key))
    }
}

impl MemoryBackend {
    /// An empty backend.
    pub fn new() -> Self {
        Self::default()
    }

    /// The backend, shared.
    pub fn shared() -> Arc<dyn Backend> {
        Arc::new(Self::new())
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.shared.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The bytes of object `key`, if there is one (for tests).
    pub fn object(&self, key: &Path) -> Option<Vec<u8>> {
        let key = name(key).ok()?;
        self.state().objects.get(&key).map(|o| (*o.data).clone())
    }

    /// Every object's key, sorted (for tests).
    pub fn keys(&self) -> Vec<String> {
        self.state().objects.keys().cloned().collect()
    }

    /// Sets the modification time of every object to `time` (for tests of
    /// grace periods).
    pub fn set_all_modified(&self, time: SystemTime) {
        for o in self.state().objects.values_mut() {
            o.modified = time;
        }
    }
}

impl Backend for MemoryBackend {
    fn display(&self, key: &Path) -> PathBuf {
        PathBuf::from(format!("memory:{}", name(key).unwrap_or_default()))
    }

    fn put_if_absent(&self, key: &Path, data: &[u8], _scratch: &Path) -> Result<Put, BackendError> {
        let k = name(key).map_err(|e| BackendError::io("create", key, e))?;
        let mut state = self.state();
        if state.objects.contains_key(&k) {
            return Ok(Put::Existed);
        }
        state.put(k, data.to_vec());
        Ok(Put::Created)
    }

    fn upload(&self, _scratch: &Path) -> Result<Box<dyn Upload>, BackendError> {
        Ok(Box::new(BufferedUpload::new(self.clone())))
    }

    fn open(&self, key: &Path) -> io::Result<Box<dyn ObjectReader>> {
        let k = name(key)?;
        let state = self.state();
        match state.objects.get(&k) {
            Some(o) => Ok(Box::new(MemoryReader(Arc::clone(&o.data)))),
            None if state.prefix_exists(&k) => Err(crate::storage::not_regular_error(
                self.display(key),
                FileKind::Directory,
            )),
            None => Err(not_found(&k)),
        }
    }

    fn map(&self, key: &Path) -> io::Result<Mapping> {
        let reader = self.open(key)?;
        Ok(Mapping::Owned(super::read_all(&*reader, u64::MAX)?))
    }

    fn head(&self, key: &Path) -> io::Result<ObjectMeta> {
        let k = name(key)?;
        self.state().meta(&k)
    }

    fn list(&self, prefix: &Path) -> io::Result<Vec<Listed>> {
        let p = name(prefix)?;
        let state = self.state();
        if !state.prefix_exists(&p) {
            return Err(not_found(&p));
        }
        let below = if p.is_empty() {
            String::new()
        } else {
            format!("{p}/")
        };
        let mut prefixes = BTreeSet::new();
        let mut out = Vec::new();
        let keys = state
            .objects
            .keys()
            .map(|k| (k, true))
            .chain(state.markers.keys().map(|k| (k, false)));
        for (k, is_object) in keys {
            let Some(rest) = k.strip_prefix(&below) else {
                continue;
            };
            match rest.split_once('/') {
                Some((first, _)) => {
                    prefixes.insert(first.to_string());
                }
                None if is_object => out.push(Listed {
                    name: rest.to_string(),
                    entry: ListedEntry::Object(state.meta(k)?),
                }),
                None => {
                    prefixes.insert(rest.to_string());
                }
            }
        }
        out.extend(prefixes.into_iter().map(|name| Listed {
            name,
            entry: ListedEntry::Prefix,
        }));
        Ok(out)
    }

    fn delete(&self, keys: &[PathBuf]) -> Result<usize, BackendError> {
        let mut state = self.state();
        let mut deleted = 0;
        for key in keys {
            let k = name(key).map_err(|e| BackendError::io("remove", key, e))?;
            if state.objects.remove(&k).is_some() {
                deleted += 1;
            }
        }
        Ok(deleted)
    }

    fn replace(
        &self,
        key: &Path,
        data: &[u8],
        _scratch: &Path,
        expect: Expect,
        _durable: bool,
    ) -> Result<(), BackendError> {
        let k = name(key).map_err(|e| BackendError::io("replace", key, e))?;
        let mut state = self.state();
        if let Expect::Version(Version(v)) = &expect {
            let now = state.objects.get(&k).map(|o| o.version.to_string());
            if now.as_deref() != Some(v.as_str()) {
                return Err(BackendError::io(
                    "replace",
                    key,
                    io::Error::new(
                        io::ErrorKind::AlreadyExists,
                        "the object was written since it was read",
                    ),
                ));
            }
        }
        state.put(k, data.to_vec());
        Ok(())
    }

    fn rename(&self, from: &Path, to: &Path) -> Result<(), BackendError> {
        let f = name(from).map_err(|e| BackendError::io("move", from, e))?;
        let t = name(to).map_err(|e| BackendError::io("move", to, e))?;
        let mut state = self.state();
        if state.objects.contains_key(&t) || (state.prefix_exists(&t) && !t.is_empty()) {
            return Err(BackendError::io(
                "move",
                from,
                io::Error::new(io::ErrorKind::AlreadyExists, format!("{t:?} exists")),
            ));
        }
        if let Some(o) = state.objects.remove(&f) {
            state.objects.insert(t, o);
            return Ok(());
        }
        if !state.prefix_exists(&f) || f.is_empty() {
            return Err(BackendError::io("move", from, not_found(&f)));
        }
        let below = format!("{f}/");
        let moved: Vec<String> = state
            .objects
            .keys()
            .filter(|k| k.starts_with(&below))
            .cloned()
            .collect();
        for k in moved {
            if let Some(o) = state.objects.remove(&k) {
                state
                    .objects
                    .insert(format!("{t}/{}", &k[below.len()..]), o);
            }
        }
        let markers: Vec<String> = state
            .markers
            .keys()
            .filter(|k| **k == f || k.starts_with(&below))
            .cloned()
            .collect();
        for k in markers {
            state.markers.remove(&k);
            let g = state.next();
            let renamed = if k == f {
                t.clone()
            } else {
                format!("{t}/{}", &k[below.len()..])
            };
            state.markers.insert(renamed, g);
        }
        Ok(())
    }

    fn open_log(&self, key: &Path) -> io::Result<Box<dyn LogObject>> {
        let k = name(key)?;
        if !self.state().objects.contains_key(&k) {
            return Err(not_found(&k));
        }
        Ok(Box::new(MemoryLog {
            backend: self.clone(),
            key: k,
            display: key.to_path_buf(),
        }))
    }

    fn lock(
        &self,
        lock_name: &Path,
        kind: LockKind,
        wait: bool,
    ) -> io::Result<Option<Box<dyn LockGuard>>> {
        let k = name(lock_name)?;
        let p = parent(&k).to_string();
        let mut state = self.state();
        loop {
            if !state.prefix_exists(&p) {
                return Err(not_found(&p));
            }
            let (shared, exclusive) = state.locks.get(&k).copied().unwrap_or((0, false));
            let free = match kind {
                LockKind::Shared => !exclusive,
                LockKind::Exclusive => !exclusive && shared == 0,
            };
            if free {
                let entry = state.locks.entry(k.clone()).or_insert((0, false));
                match kind {
                    LockKind::Shared => entry.0 += 1,
                    LockKind::Exclusive => entry.1 = true,
                }
                let generation = state.markers.get(&p).copied();
                return Ok(Some(Box::new(MemoryLock {
                    backend: self.clone(),
                    key: k,
                    parent: p,
                    generation,
                    kind,
                })));
            }
            if !wait {
                return Ok(None);
            }
            state = self
                .shared
                .released
                .wait(state)
                .unwrap_or_else(|e| e.into_inner());
        }
    }

    fn touch(&self, key: &Path) -> io::Result<bool> {
        let k = name(key)?;
        let mut state = self.state();
        match state.objects.get_mut(&k) {
            Some(o) => {
                o.modified = SystemTime::now();
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn create_prefix(&self, dir: &Path) -> Result<(), BackendError> {
        let k = name(dir).map_err(|e| BackendError::io("create", dir, e))?;
        let mut state = self.state();
        let mut at = String::new();
        for part in k.split('/').filter(|p| !p.is_empty()) {
            if !at.is_empty() {
                at.push('/');
            }
            at.push_str(part);
            if !state.markers.contains_key(&at) {
                let g = state.next();
                state.markers.insert(at.clone(), g);
            }
        }
        Ok(())
    }

    fn sync_prefix(&self, _dir: &Path) -> Result<(), BackendError> {
        Ok(())
    }

    fn remove_prefix(&self, dir: &Path) -> io::Result<()> {
        let k = name(dir)?;
        let mut state = self.state();
        let below = format!("{k}/");
        if state.objects.keys().any(|o| o.starts_with(&below))
            || state.markers.keys().any(|m| m.starts_with(&below))
        {
            return Err(io::Error::new(
                io::ErrorKind::DirectoryNotEmpty,
                format!("{k:?} has objects below it"),
            ));
        }
        match state.markers.remove(&k) {
            Some(_) => Ok(()),
            None => Err(not_found(&k)),
        }
    }

    fn sync_object(&self, _key: &Path) -> Result<(), BackendError> {
        Ok(())
    }
}

#[derive(Debug)]
struct MemoryReader(Arc<Vec<u8>>);

fn read_from(data: &[u8], buf: &mut [u8], offset: u64) -> usize {
    let Ok(start) = usize::try_from(offset) else {
        return 0;
    };
    if start >= data.len() {
        return 0;
    }
    let n = buf.len().min(data.len() - start);
    buf[..n].copy_from_slice(&data[start..start + n]);
    n
}

impl ObjectReader for MemoryReader {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        Ok(read_from(&self.0, buf, offset))
    }
    fn len(&self) -> io::Result<u64> {
        Ok(self.0.len() as u64)
    }
}

/// An append-only object: an append is accepted only at the object's end
/// (a conditional append), so two appenders can never interleave.
#[derive(Debug)]
struct MemoryLog {
    backend: MemoryBackend,
    key: String,
    display: PathBuf,
}

impl MemoryLog {
    fn data(&self) -> io::Result<Arc<Vec<u8>>> {
        self.backend
            .state()
            .objects
            .get(&self.key)
            .map(|o| Arc::clone(&o.data))
            .ok_or_else(|| not_found(&self.key))
    }
}

impl ObjectReader for MemoryLog {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        Ok(read_from(&self.data()?, buf, offset))
    }
    fn len(&self) -> io::Result<u64> {
        Ok(self.data()?.len() as u64)
    }
}

impl LogObject for MemoryLog {
    fn as_reader(&self) -> &dyn ObjectReader {
        self
    }

    fn append(&self, at: u64, data: &[u8]) -> Result<(), BackendError> {
        let mut state = self.backend.state();
        let version = state.next();
        let Some(o) = state.objects.get_mut(&self.key) else {
            return Err(BackendError::io(
                "append to",
                &self.display,
                not_found(&self.key),
            ));
        };
        if o.data.len() as u64 != at {
            return Err(BackendError::io(
                "append to",
                &self.display,
                io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!(
                        "the log is {} bytes, not {at}: another appender wrote",
                        o.data.len()
                    ),
                ),
            ));
        }
        Arc::make_mut(&mut o.data).extend_from_slice(data);
        o.modified = SystemTime::now();
        o.version = version;
        Ok(())
    }

    fn truncate(&self, len: u64) -> Result<(), BackendError> {
        let mut state = self.backend.state();
        let version = state.next();
        let Some(o) = state.objects.get_mut(&self.key) else {
            return Err(BackendError::io(
                "cut the torn tail of",
                &self.display,
                not_found(&self.key),
            ));
        };
        let len = usize::try_from(len).unwrap_or(usize::MAX);
        Arc::make_mut(&mut o.data).truncate(len);
        o.version = version;
        Ok(())
    }

    fn sync(&self) -> Result<(), BackendError> {
        Ok(())
    }
}

#[derive(Debug)]
struct MemoryLock {
    backend: MemoryBackend,
    key: String,
    parent: String,
    generation: Option<u64>,
    kind: LockKind,
}

impl LockGuard for MemoryLock {
    fn is_current(&self) -> io::Result<bool> {
        let state = self.backend.state();
        Ok(state.prefix_exists(&self.parent)
            && state.markers.get(&self.parent).copied() == self.generation)
    }
}

impl Drop for MemoryLock {
    fn drop(&mut self) {
        let mut state = self.backend.state();
        if let Some(entry) = state.locks.get_mut(&self.key) {
            match self.kind {
                LockKind::Shared => entry.0 = entry.0.saturating_sub(1),
                LockKind::Exclusive => entry.1 = false,
            }
            if *entry == (0, false) {
                state.locks.remove(&self.key);
            }
        }
        drop(state);
        self.backend.shared.released.notify_all();
    }
}

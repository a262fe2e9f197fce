//! A local cache of immutable objects of a store on S3 (format-spec.md
//! 5.8): content-addressed objects (loose blobs, packs, indexes), and the
//! objects of a log (its first object, segments, merged objects) named with
//! the ETag they were listed with. Nothing mutable is cached (the head
//! cache, config), and nothing is taken from the cache without the name
//! having been learnt from the server first (a listing, or the log a blob
//! is referenced by), so a cache can make a read cheaper but never change
//! what it returns.
//!
//! Each object is one file `<dir>/<2 hex>/<62 hex>`, named by the SHA-256
//! of its name (its key and ETag), holding a header (magic, the SHA-256 of
//! the name and the bytes) and the bytes: a file found damaged (a disk
//! error, a crash of a file system that does not order data before names),
//! or found under another entry's path (two files swapped, one copied over
//! another), is deleted and counts as a miss. Files are written in a temp file and renamed into place, so a
//! crash leaves a temp file (removed later) or a whole entry. The cache is
//! bounded: when it grows past its size, the least recently used entries
//! (by modification time, set on every hit) are removed.
//!
//! Every process sharing a cache directory may write and evict at once:
//! entries appear and vanish atomically, and a vanished entry is a miss.

use std::collections::HashMap;
use std::fs;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use jpstore_blobstore::BlobId;

use jpstore_blobstore::user_file::{self, LastLink};

/// Version 2: the digest covers the entry's name with its bytes (version
/// 1's covered the bytes alone, so a file moved to another entry's path
/// read as that entry; such files are misses, and removed).
const MAGIC: &[u8; 8] = b"jpsc\x02\n\0\0";
const HEADER: usize = MAGIC.len() + BlobId::LEN;
/// Bytes of objects kept in memory by a process (the cache of one command,
/// whether or not a cache directory is used).
const MEMORY_BYTES: u64 = 64 << 20;
/// Temp files older than this are left by a crash.
const STALE_TEMP: Duration = Duration::from_secs(3600);

/// The default bound of a cache directory.
pub const DEFAULT_CACHE_BYTES: u64 = 1 << 30;

/// A cache directory ([`crate::S3Backend::with_cache`]).
#[derive(Debug)]
pub struct DiskCache {
    dir: PathBuf,
    max_bytes: u64,
    /// Bytes in the directory, as last counted plus what this process
    /// added since.
    bytes: AtomicU64,
}

impl DiskCache {
    /// The cache in `dir` (created if missing), bounded to `max_bytes`.
    pub fn open(dir: &Path, max_bytes: u64) -> io::Result<DiskCache> {
        fs::create_dir_all(dir.join("tmp"))
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", dir.display())))?;
        let cache = DiskCache {
            dir: dir.to_path_buf(),
            max_bytes,
            bytes: AtomicU64::new(0),
        };
        let (total, _) = cache.entries();
        cache.bytes.store(total, Ordering::Relaxed);
        Ok(cache)
    }

    /// Where the cache is.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path(&self, name: &str) -> PathBuf {
        let hex = BlobId::of(name.as_bytes()).to_hex();
        self.dir.join(&hex[..2]).join(&hex[2..])
    }

    /// The bytes of `name`, if cached and whole. Anything but a regular
    /// file at its path (a FIFO, a device, a symbolic link, which the cache
    /// never writes) is a miss, found without blocking and removed as a
    /// damaged entry is.
    pub(crate) fn get(&self, name: &str) -> Option<Bytes> {
        let path = self.path(name);
        let (file, len) = match user_file::open_regular(&path, LastLink::Refuse) {
            Ok(opened) => opened,
            // Not a regular file (the error of that kind): removed.
            Err(e) if e.kind() == io::ErrorKind::InvalidInput => {
                let _ = fs::remove_file(&path);
                return None;
            }
            Err(_) => return None,
        };
        let mut data = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
        (&file).read_to_end(&mut data).ok()?;
        let body = data.get(HEADER..)?;
        let ok = data.get(..MAGIC.len()) == Some(MAGIC)
            && data.get(MAGIC.len()..HEADER) == Some(digest(name, body).as_slice());
        if !ok {
            let _ = fs::remove_file(&path);
            return None;
        }
        // Recently used: evicted last (the file is the cache's own, so its
        // owner may set its time through a descriptor opened for reading).
        let _ = file.set_modified(SystemTime::now());
        Some(Bytes::copy_from_slice(body))
    }

    /// Keeps `data` as `name` (best effort: a cache that cannot be written
    /// is a cache that misses). An entry already there is kept, unless
    /// `replace` (a name whose bytes may change: a head cache, named by the
    /// log it was made from, rewritten with other settings).
    pub(crate) fn put(&self, name: &str, data: &[u8], replace: bool) {
        let path = self.path(name);
        if !replace && path.exists() {
            return;
        }
        let Some(parent) = path.parent() else {
            return;
        };
        if fs::create_dir_all(parent).is_err() {
            return;
        }
        let Ok(mut tmp) = tempfile::NamedTempFile::new_in(self.dir.join("tmp")) else {
            return;
        };
        let written = tmp
            .write_all(MAGIC)
            .and_then(|()| tmp.write_all(&digest(name, data)))
            .and_then(|()| tmp.write_all(data));
        if written.is_err() || tmp.persist(&path).is_err() {
            return;
        }
        let size = (HEADER + data.len()) as u64;
        let total = self.bytes.fetch_add(size, Ordering::Relaxed) + size;
        if total > self.max_bytes {
            self.evict();
        }
    }

    /// Every entry with its size and time; removes stale temp files.
    /// Returns the total size.
    fn entries(&self) -> (u64, Vec<(SystemTime, u64, PathBuf)>) {
        let mut total = 0;
        let mut out = Vec::new();
        let Ok(dirs) = fs::read_dir(&self.dir) else {
            return (0, out);
        };
        for d in dirs.flatten() {
            let is_tmp = d.file_name() == "tmp";
            let Ok(files) = fs::read_dir(d.path()) else {
                continue;
            };
            for f in files.flatten() {
                let Ok(meta) = f.metadata() else { continue };
                let modified = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
                if is_tmp {
                    let old = SystemTime::now()
                        .duration_since(modified)
                        .is_ok_and(|age| age > STALE_TEMP);
                    if old {
                        let _ = fs::remove_file(f.path());
                    }
                    continue;
                }
                total += meta.len();
                out.push((modified, meta.len(), f.path()));
            }
        }
        (total, out)
    }

    /// Removes the least recently used entries until the cache holds at
    /// most 3/4 of its bound.
    fn evict(&self) {
        let (mut total, mut entries) = self.entries();
        entries.sort();
        let goal = self.max_bytes / 4 * 3;
        for (_, len, path) in entries {
            if total <= goal {
                break;
            }
            if fs::remove_file(&path).is_ok() {
                total = total.saturating_sub(len);
            }
        }
        self.bytes.store(total, Ordering::Relaxed);
    }
}

/// The SHA-256 an entry's header holds: of its name's length (8 bytes,
/// little-endian), its name and its bytes, so that an entry is whole only
/// as the entry of its own name (format-spec.md 5.8).
fn digest(name: &str, data: &[u8]) -> [u8; 32] {
    use sha2::Digest as _;
    let mut hasher = sha2::Sha256::new();
    hasher.update((name.len() as u64).to_le_bytes());
    hasher.update(name.as_bytes());
    hasher.update(data);
    hasher.finalize().into()
}

/// The objects a backend keeps: in memory for this process, and in a cache
/// directory if it has one.
#[derive(Debug, Default)]
pub(crate) struct Cache {
    memory: Mutex<(u64, HashMap<String, Bytes>)>,
    pub(crate) disk: Option<DiskCache>,
    pub(crate) hits: AtomicU64,
}

impl Cache {
    pub(crate) fn get(&self, name: &str) -> Option<Bytes> {
        let found = {
            let memory = self.memory.lock().unwrap_or_else(|e| e.into_inner());
            memory.1.get(name).cloned()
        };
        let found = found.or_else(|| {
            let b = self.disk.as_ref()?.get(name)?;
            self.remember(name, &b);
            Some(b)
        });
        if found.is_some() {
            self.hits.fetch_add(1, Ordering::Relaxed);
        }
        found
    }

    pub(crate) fn put(&self, name: &str, data: &Bytes) {
        self.remember(name, data);
        if let Some(disk) = &self.disk {
            disk.put(name, data, false);
        }
    }

    /// Keeps `data` as `name`, replacing what the name held.
    pub(crate) fn put_replacing(&self, name: &str, data: &Bytes) {
        self.remember(name, data);
        if let Some(disk) = &self.disk {
            disk.put(name, data, true);
        }
    }

    fn remember(&self, name: &str, data: &Bytes) {
        let mut memory = self.memory.lock().unwrap_or_else(|e| e.into_inner());
        let size = data.len() as u64;
        if memory.0 + size > MEMORY_BYTES {
            memory.1.clear();
            memory.0 = 0;
        }
        if memory.1.insert(name.to_string(), data.clone()).is_none() {
            memory.0 += size;
        }
    }
}

/// The cache directory of the store at `location`: one per endpoint,
/// bucket and prefix, below the settings' `cache_dir` or the user's cache
/// directory (`$XDG_CACHE_HOME/jp-store`, else `~/.cache/jp-store`);
/// `None` when there is neither.
pub fn cache_dir_for(
    location: &crate::S3Location,
    config: &crate::S3Config,
) -> Option<std::path::PathBuf> {
    use std::path::PathBuf;
    let base = match &config.cache_dir {
        Some(d) => d.clone(),
        None => match std::env::var_os("XDG_CACHE_HOME") {
            Some(x) if !x.is_empty() => PathBuf::from(x).join("jp-store"),
            _ => PathBuf::from(std::env::var_os("HOME")?)
                .join(".cache")
                .join("jp-store"),
        },
    };
    let endpoint = config.endpoint.as_deref().unwrap_or_default();
    let key = format!("{endpoint}\n{}\n{}", location.bucket, location.prefix);
    let hex = jpstore_blobstore::BlobId::of(key.as_bytes()).to_hex();
    Some(base.join(format!("s3-{}-{}", location.bucket, &hex[..16])))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `get` on another thread, so that a read blocked on a FIFO fails the
    /// test instead of hanging it.
    fn get_or_blocked(cache: &std::sync::Arc<DiskCache>, name: &'static str) -> Option<Bytes> {
        let (tx, rx) = std::sync::mpsc::channel();
        let cache = cache.clone();
        std::thread::spawn(move || {
            let _ = tx.send(cache.get(name));
        });
        rx.recv_timeout(Duration::from_secs(60))
            .expect("get returned (it did not wait on a special file)")
    }

    /// Two entries swapped on disk (or one copied over another) are whole
    /// files, each of another name: both are misses, and removed, never
    /// the other's bytes. So is an entry of version 1 (a digest of its
    /// bytes alone).
    #[test]
    fn an_entry_is_read_only_under_its_own_name() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cache = DiskCache::open(dir.path(), 1 << 20).expect("open");
        let (a, b) = (
            "bucket\nconversations/1/events.log\netag-a",
            "bucket\nconversations/2/events.log\netag-b",
        );
        cache.put(a, b"title: first", false);
        cache.put(b, b"title: other", false);
        assert_eq!(cache.get(a).as_deref(), Some(&b"title: first"[..]));
        let (pa, pb) = (cache.path(a), cache.path(b));
        let tmp = dir.path().join("swap");
        fs::rename(&pa, &tmp).expect("swap");
        fs::rename(&pb, &pa).expect("swap");
        fs::rename(&tmp, &pb).expect("swap");
        assert_eq!(cache.get(a), None, "b's bytes at a's path");
        assert_eq!(cache.get(b), None, "a's bytes at b's path");
        assert!(!pa.exists() && !pb.exists(), "both removed");

        // The same name with another ETag is another entry.
        cache.put(a, b"title: first", false);
        fs::copy(cache.path(a), cache.path(b)).expect("copy over");
        assert_eq!(cache.get(b), None);

        // Version 1: magic 1, the SHA-256 of the bytes, the bytes.
        let mut old = b"jpsc\x01\n\0\0".to_vec();
        old.extend_from_slice(BlobId::of(b"old").as_bytes());
        old.extend_from_slice(b"old");
        fs::write(cache.path(b), old).expect("an entry of version 1");
        assert_eq!(cache.get(b), None);
        assert!(!cache.path(b).exists(), "removed");
        assert_eq!(cache.get(a).as_deref(), Some(&b"title: first"[..]));
    }

    #[test]
    fn an_entry_that_is_not_a_regular_file_is_a_miss_and_is_removed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cache = std::sync::Arc::new(DiskCache::open(dir.path(), 1 << 20).expect("open"));
        let data = b"the bytes of an object".as_slice();
        cache.put("object", data, false);
        assert_eq!(cache.get("object").as_deref(), Some(data));
        let path = cache.path("object");
        let kept = dir.path().join("elsewhere");
        fs::rename(&path, &kept).expect("move the entry away");

        // A FIFO with no writer: opening it for reading would wait for one.
        let made = std::process::Command::new("mkfifo")
            .arg(&path)
            .status()
            .expect("mkfifo");
        assert!(made.success(), "mkfifo {}", path.display());
        assert_eq!(get_or_blocked(&cache, "object"), None);
        assert!(fs::symlink_metadata(&path).is_err(), "the FIFO is removed");

        // A symbolic link to a whole entry: not followed.
        std::os::unix::fs::symlink(&kept, &path).expect("symlink");
        assert_eq!(get_or_blocked(&cache, "object"), None);
        assert!(fs::symlink_metadata(&path).is_err(), "the link is removed");
        assert!(kept.is_file(), "what the link named is left alone");

        // A directory: a miss, left (it is not the cache's to remove).
        fs::create_dir(&path).expect("mkdir");
        assert_eq!(get_or_blocked(&cache, "object"), None);
        fs::remove_dir(&path).expect("rmdir");

        // The entry back in place is found again; damaged, it is removed.
        fs::rename(&kept, &path).expect("move the entry back");
        assert_eq!(cache.get("object").as_deref(), Some(data));
        let mut bytes = fs::read(&path).expect("read the entry");
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        fs::write(&path, &bytes).expect("damage the entry");
        assert_eq!(cache.get("object"), None);
        assert!(!path.exists(), "the damaged entry is removed");
    }
}

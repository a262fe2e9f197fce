//! The physical floors the store's figures are compared with: one
//! `fdatasync` of a small write, SHA-256 + zstd of the same bytes, zstd
//! decompression + SHA-256 of every blob, all on every core where the store
//! uses every core.
//!
//! Packs of version 2 compress objects in groups (format-spec.md 2.12), so
//! the floors of writing and reading packed content work on groups as the
//! best possible writer and reader of that format would: the writer's
//! floor gathers each thread's distinct items in groups of the store's
//! target and compresses each group once ([`hash_and_compress_grouped`]);
//! the reader's decompresses each group once and hashes every blob in it
//! ([`decompress_and_hash_groups`]). The per-object floors stay for
//! comparison with earlier figures.

use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::hint::black_box;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use jpstore_blobstore::{BlobId, GroupSettings, Options};
use sha2::{Digest, Sha256};

/// zstd level of the floors (the store's default).
pub const ZSTD_LEVEL: i32 = 3;

/// The threads the store uses for hashing and compressing (all cores).
pub fn cores() -> usize {
    Options::default().threads
}

/// A file in `dir` that grows by appends, its creation already durable.
pub fn append_file(dir: &Path, name: &str) -> io::Result<File> {
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(name))?;
    file.sync_all()?;
    File::open(dir)?.sync_all()?;
    Ok(file)
}

/// The append floor: write `bytes` at the end of `file` and `fdatasync` it.
pub fn fdatasync_write(file: &mut File, bytes: &[u8]) -> io::Result<()> {
    file.write_all(bytes)?;
    file.sync_data()
}

/// Runs `work(i)` for every `i < count` on `threads` threads, each taking
/// the next index as it finishes one (the way the store's workers do), with
/// a per-thread state made by `state`.
fn on_threads<S>(
    count: usize,
    threads: usize,
    state: &(dyn Fn() -> S + Sync),
    work: &(dyn Fn(&mut S, usize) + Sync),
) {
    let next = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..threads.max(1) {
            s.spawn(|| {
                let mut st = state();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= count {
                        break;
                    }
                    work(&mut st, i);
                }
            });
        }
    });
}

/// SHA-256 of every item and zstd-3 of every distinct one, on `threads`
/// threads (one reused zstd context each); `bytes(i)` gives item `i` (from
/// memory, or read from a file). Returns the compressed bytes.
pub fn hash_and_compress(
    count: usize,
    threads: usize,
    bytes: &(dyn Fn(usize) -> Vec<u8> + Sync),
) -> u64 {
    let seen = Mutex::new(HashSet::<BlobId>::new());
    let total = AtomicUsize::new(0);
    on_threads(
        count,
        threads,
        &|| zstd::bulk::Compressor::new(ZSTD_LEVEL).expect("a zstd compressor"),
        &|zstd, i| {
            let data = bytes(i);
            let id = BlobId::from_bytes(Sha256::digest(&data).into());
            if seen.lock().expect("the set's lock").insert(id) {
                let c = zstd.compress(&data).expect("compress");
                total.fetch_add(c.len(), Ordering::Relaxed);
            }
        },
    );
    total.into_inner() as u64
}

/// The group settings of batch puts ([`Options::batch_compression`]): what
/// the floors of attach and fsck group and compress with.
pub fn batch_settings() -> GroupSettings {
    Options::default().batch_compression.settings()
}

/// SHA-256 of every item and zstd of every distinct one in groups, on
/// `threads` threads, as a batch put of packs of version 2 does it and
/// nothing more: each thread takes the next item, hashes it, and gathers the
/// distinct ones in its own group of `settings.group_bytes` (an item of that
/// size or more alone), compressing a group at `settings.level` when the next
/// item would overflow it and at the end. `bytes(i)` gives item `i`.
/// Returns the compressed bytes.
pub fn hash_and_compress_grouped(
    count: usize,
    threads: usize,
    settings: GroupSettings,
    bytes: &(dyn Fn(usize) -> Vec<u8> + Sync),
) -> u64 {
    struct Worker {
        zstd: zstd::bulk::Compressor<'static>,
        open: Vec<u8>,
        out: Vec<u8>,
    }
    let target = settings.group_bytes as usize;
    let seen = Mutex::new(HashSet::<BlobId>::new());
    let total = AtomicUsize::new(0);
    let compress = |w: &mut Worker, data: &[u8]| {
        w.out.clear();
        w.out.reserve(zstd::zstd_safe::compress_bound(data.len()));
        let n = w
            .zstd
            .compress_to_buffer(data, &mut w.out)
            .expect("compress");
        total.fetch_add(n.min(data.len()), Ordering::Relaxed);
    };
    let next = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..threads.max(1) {
            s.spawn(|| {
                let mut w = Worker {
                    zstd: zstd::bulk::Compressor::new(settings.level).expect("a zstd compressor"),
                    open: Vec::new(),
                    out: Vec::new(),
                };
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= count {
                        break;
                    }
                    let data = bytes(i);
                    let id = BlobId::from_bytes(Sha256::digest(&data).into());
                    if !seen.lock().expect("the set's lock").insert(id) {
                        continue;
                    }
                    if data.len() >= target {
                        compress(&mut w, &data);
                        continue;
                    }
                    if w.open.len() + data.len() > target {
                        let open = std::mem::take(&mut w.open);
                        compress(&mut w, &open);
                        w.open = open;
                        w.open.clear();
                    }
                    w.open.extend_from_slice(&data);
                }
                if !w.open.is_empty() {
                    let open = std::mem::take(&mut w.open);
                    compress(&mut w, &open);
                }
            });
        }
    });
    total.into_inner() as u64
}

/// Blobs compressed in groups as the read-data floor decompresses them.
#[derive(Clone, Debug)]
pub struct CompressedGroup {
    /// zstd frame of the group's raw content.
    pub frame: Vec<u8>,
    /// Length of the raw content.
    pub raw_len: usize,
    /// Each blob: its offset and length in the raw content, and its
    /// SHA-256.
    pub blobs: Vec<(usize, usize, BlobId)>,
}

/// `blobs` in groups of `settings` (in order, each group as full as the
/// grouping rule of format-spec.md 2.12 makes it), each compressed, on
/// `threads` threads (setup for [`decompress_and_hash_groups`]).
pub fn compress_grouped(
    blobs: &[Vec<u8>],
    settings: GroupSettings,
    threads: usize,
) -> Vec<CompressedGroup> {
    let target = settings.group_bytes as usize;
    // The groups' members, in order.
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut open: Vec<usize> = Vec::new();
    let mut open_len = 0;
    for (i, b) in blobs.iter().enumerate() {
        if b.len() >= target {
            groups.push(vec![i]);
            continue;
        }
        if open_len + b.len() > target {
            groups.push(std::mem::take(&mut open));
            open_len = 0;
        }
        open.push(i);
        open_len += b.len();
    }
    if !open.is_empty() {
        groups.push(open);
    }
    let out: Vec<Mutex<Option<CompressedGroup>>> =
        groups.iter().map(|_| Mutex::new(None)).collect();
    on_threads(
        groups.len(),
        threads,
        &|| zstd::bulk::Compressor::new(settings.level).expect("a zstd compressor"),
        &|zstd, g| {
            let mut raw = Vec::new();
            let mut members = Vec::new();
            for &i in &groups[g] {
                members.push((
                    raw.len(),
                    blobs[i].len(),
                    BlobId::from_bytes(Sha256::digest(&blobs[i]).into()),
                ));
                raw.extend_from_slice(&blobs[i]);
            }
            let c = CompressedGroup {
                frame: zstd.compress(&raw).expect("compress"),
                raw_len: raw.len(),
                blobs: members,
            };
            *out[g].lock().expect("a slot's lock") = Some(c);
        },
    );
    out.into_iter()
        .map(|m| {
            m.into_inner()
                .expect("a slot's lock")
                .expect("every group compressed")
        })
        .collect()
}

/// The read-data floor of packs of version 2: decompress every group once
/// (from memory, into a buffer each thread reuses) and check the SHA-256
/// of every blob in it, on `threads` threads.
pub fn decompress_and_hash_groups(groups: &[CompressedGroup], threads: usize) {
    on_threads(
        groups.len(),
        threads,
        &|| {
            (
                zstd::bulk::Decompressor::new().expect("a zstd decompressor"),
                Vec::<u8>::new(),
            )
        },
        &|(zstd, raw), g| {
            let group = &groups[g];
            raw.resize(group.raw_len, 0);
            let n = zstd
                .decompress_to_buffer(&group.frame, raw.as_mut_slice())
                .expect("decompress");
            assert_eq!(n, group.raw_len);
            for &(at, len, id) in &group.blobs {
                let got = BlobId::from_bytes(Sha256::digest(&raw[at..at + len]).into());
                assert_eq!(got, id, "the floor's group {g} hashes back");
            }
        },
    );
}

/// A blob compressed as the floors decompress it.
#[derive(Clone, Debug)]
pub struct Compressed {
    /// zstd-3 frame of the content.
    pub frame: Vec<u8>,
    /// Length of the content.
    pub raw_len: usize,
    /// SHA-256 of the content.
    pub id: BlobId,
}

/// `blobs` compressed with zstd-3 on `threads` threads (setup for
/// [`decompress_and_hash`]).
pub fn compress_all(blobs: &[Vec<u8>], threads: usize) -> Vec<Compressed> {
    let out: Vec<Mutex<Option<Compressed>>> = blobs.iter().map(|_| Mutex::new(None)).collect();
    on_threads(
        blobs.len(),
        threads,
        &|| zstd::bulk::Compressor::new(ZSTD_LEVEL).expect("a zstd compressor"),
        &|zstd, i| {
            let c = Compressed {
                frame: zstd.compress(&blobs[i]).expect("compress"),
                raw_len: blobs[i].len(),
                id: BlobId::from_bytes(Sha256::digest(&blobs[i]).into()),
            };
            *out[i].lock().expect("a slot's lock") = Some(c);
        },
    );
    out.into_iter()
        .map(|m| {
            m.into_inner()
                .expect("a slot's lock")
                .expect("every blob compressed")
        })
        .collect()
}

/// The read-data floor: decompress every frame (from memory) and check its
/// SHA-256, on `threads` threads (one reused zstd context each).
pub fn decompress_and_hash(blobs: &[Compressed], threads: usize) {
    on_threads(
        blobs.len(),
        threads,
        &|| zstd::bulk::Decompressor::new().expect("a zstd decompressor"),
        &|zstd, i| {
            let b = &blobs[i];
            let raw = zstd.decompress(&b.frame, b.raw_len).expect("decompress");
            let id = BlobId::from_bytes(Sha256::digest(&raw).into());
            assert_eq!(id, b.id, "the floor's blob {i} hashes back");
        },
    );
}

/// SHA-256 of every blob's raw bytes (from memory) on `threads` threads.
pub fn sha256_all(blobs: &[Vec<u8>], threads: usize) {
    on_threads(blobs.len(), threads, &|| (), &|_, i| {
        black_box(Sha256::digest(&blobs[i]));
    });
}

/// Reads every file of `paths` (open, read, close, from the page cache) on
/// `threads` threads, as a command that must read them does at the least.
/// Returns the bytes read.
pub fn read_files(paths: &[PathBuf], threads: usize) -> u64 {
    let total = AtomicUsize::new(0);
    on_threads(paths.len(), threads, &|| (), &|_, i| {
        let bytes = std::fs::read(&paths[i]).expect("read a file");
        total.fetch_add(bytes.len(), Ordering::Relaxed);
    });
    total.into_inner() as u64
}

/// Every string of `value` (keys included), as written into a JSON text:
/// what escaping it costs at the least.
pub fn strings_of(value: &serde_json::Value) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![value];
    while let Some(v) = stack.pop() {
        match v {
            serde_json::Value::String(s) => out.push(s.clone()),
            serde_json::Value::Array(items) => stack.extend(items),
            serde_json::Value::Object(o) => {
                for (k, v) in o {
                    out.push(k.clone());
                    stack.push(v);
                }
            }
            _ => {}
        }
    }
    out
}

/// Escapes every string of `strings` as a JSON string into `out` (cleared
/// first, its memory kept between calls), with the store's escaper.
pub fn escape_strings(strings: &[String], out: &mut Vec<u8>) {
    out.clear();
    for s in strings {
        jpstore_engine::internal::event::binary::value::push_json_str(out, s);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reading_walking_and_escaping() {
        let dir = tempfile::tempdir().expect("a temp dir");
        std::fs::create_dir_all(dir.path().join("a/b")).expect("dirs");
        std::fs::write(dir.path().join("a/one"), b"12345").expect("write");
        std::fs::write(dir.path().join("a/b/two"), b"678").expect("write");
        let files = crate::setup::files_below(dir.path());
        assert_eq!(files.len(), 2);
        assert_eq!(read_files(&files, 2), 8);
        let strings = strings_of(&serde_json::json!({"k": ["a\"", {"q": 1}]}));
        let mut out = Vec::new();
        escape_strings(&strings, &mut out);
        let mut sorted = strings.clone();
        sorted.sort();
        assert_eq!(sorted, ["a\"", "k", "q"]);
        assert_eq!(out.len(), br#""k""a\"""q""#.len());
    }

    #[test]
    fn floors_round_trip() {
        let blobs: Vec<Vec<u8>> = (0..50)
            .map(|i| format!("blob {} ", i % 40).repeat(30).into_bytes())
            .collect();
        let c = compress_all(&blobs, 2);
        assert_eq!(c.len(), 50);
        decompress_and_hash(&c, 2);
        sha256_all(&blobs, 2);
        let by_one = hash_and_compress(blobs.len(), 1, &|i| blobs[i].clone());
        let by_two = hash_and_compress(blobs.len(), 2, &|i| blobs[i].clone());
        let distinct: u64 = c[..40].iter().map(|c| c.frame.len() as u64).sum();
        assert_eq!((by_one, by_two), (distinct, distinct));
        // In groups: fewer bytes than one by one; every blob in one group.
        let small = GroupSettings {
            level: 3,
            group_bytes: 4096,
        };
        let grouped = hash_and_compress_grouped(blobs.len(), 2, small, &|i| blobs[i].clone());
        assert!(
            grouped > 0 && grouped < distinct,
            "{grouped} against {distinct}"
        );
        let groups = compress_grouped(&blobs, small, 2);
        assert_eq!(groups.iter().map(|g| g.blobs.len()).sum::<usize>(), 50);
        assert!(groups.len() > 1 && groups.iter().all(|g| g.raw_len <= 4096));
        decompress_and_hash_groups(&groups, 2);
    }
}

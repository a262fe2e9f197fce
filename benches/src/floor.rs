//! The physical floors the store's figures are compared with: one
//! `fdatasync` of a small write, SHA-256 + zstd of the same bytes, zstd
//! decompression + SHA-256 of every blob, all on every core where the store
//! uses every core.

use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::hint::black_box;
use std::io::{self, Write};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use jpstore_blobstore::{BlobId, Options};
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

#[cfg(test)]
mod tests {
    use super::*;

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
    }
}

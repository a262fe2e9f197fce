//! Streams of loose and packed objects, raw and compressed, read in small
//! and large pieces; damage found by the read that reaches it.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::loose_path;
use crate::backend::FileBackend;
use crate::storage::{LocalStorage, Storage};
use crate::{BlobId, BlobStore, Error, Options};

fn open(dir: &Path) -> BlobStore {
    let storage: Arc<dyn Storage> = Arc::new(LocalStorage::open(dir).expect("storage"));
    BlobStore::open(FileBackend::shared(storage), "blobs", Options::default()).expect("open store")
}

/// Text that compresses well (several MiB of it still spans many zstd
/// blocks and many reads of the object file).
fn text(len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len);
    let mut i = 0u64;
    while out.len() < len {
        out.extend_from_slice(format!("line {i}: fn value_{}() {{}}\n", i % 977).as_bytes());
        i += 1;
    }
    out.truncate(len);
    out
}

/// Bytes zstd cannot shrink: stored raw.
fn noise(len: usize) -> Vec<u8> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// Reads `stream` in pieces of `piece` bytes.
fn read_in_pieces(mut stream: impl Read, piece: usize) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; piece];
    loop {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            return Ok(out);
        }
        out.extend_from_slice(&buf[..n]);
    }
}

/// Flips a bit of the byte at `at` of the file at `path`.
fn flip_byte(path: &Path, at: u64) {
    let mut bytes = std::fs::read(path).expect("read object");
    let at = usize::try_from(at).expect("small");
    assert!(
        at < bytes.len(),
        "{} has {} bytes",
        path.display(),
        bytes.len()
    );
    bytes[at] ^= 0x20;
    std::fs::write(path, bytes).expect("write object");
}

fn only_pack(dir: &Path) -> PathBuf {
    std::fs::read_dir(dir.join("blobs/packs"))
        .expect("packs dir")
        .map(|e| e.expect("entry").path())
        .find(|p| p.extension().is_some_and(|x| x == "pack"))
        .expect("a pack")
}

#[test]
fn loose_and_packed_content_reads_back_whole_in_any_piece_size() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    let contents = [
        Vec::new(),
        b"hello".to_vec(),
        text(3 << 20),
        noise(700 << 10),
    ];
    let mut ids = Vec::new();
    for c in &contents {
        ids.push(store.put(c).expect("put").id);
    }
    let packed = [
        text(2 << 20),
        noise(300 << 10),
        b"small".to_vec(),
        b"small too".to_vec(),
    ];
    store
        .put_batch(packed.len(), |i| Ok(packed[i].clone()), &mut |_| {})
        .expect("put batch");
    for (id, content) in ids.iter().zip(&contents) {
        for piece in [1usize, 4096, 1 << 20] {
            if piece == 1 && content.len() > 1 << 20 {
                continue;
            }
            let stream = store.open_stream(id).expect("open stream");
            assert_eq!(stream.len(), content.len() as u64);
            let read = read_in_pieces(stream, piece).expect("read");
            assert!(read == *content, "loose {id}, pieces of {piece}");
        }
        store
            .open_stream(id)
            .expect("open")
            .verify()
            .expect("verify");
    }
    for content in &packed {
        let id = BlobId::of(content);
        assert!(matches!(
            store.locate(&id).expect("locate"),
            Some(crate::Location::Packed { .. })
        ));
        let stream = store.open_stream(&id).expect("open");
        // In a pack of version 2, the large objects are groups of their
        // own, streamed; the small one shares a group, read whole.
        assert_eq!(stream.read_whole(), content.len() < 4096, "packed {id}");
        let read = read_in_pieces(stream, 8192).expect("read");
        assert!(read == *content, "packed {id}");
    }
}

#[test]
fn an_unknown_id_is_not_found() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    let id = BlobId::of(b"never stored");
    assert!(matches!(store.open_stream(&id), Err(Error::NotFound { id: i, .. }) if i == id));
}

/// A flipped byte in the payload of a compressed or a raw loose object, and
/// in a packed object: the stream fails by its end with the damage named,
/// and fails again if read on.
#[test]
fn damage_is_an_error_by_the_end_of_the_stream() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    let base = dir.path().join("blobs");
    for content in [text(1 << 20), noise(200 << 10)] {
        let id = store.put(&content).expect("put").id;
        // In the payload, after the 20-byte header.
        flip_byte(&loose_path(&base, &id), 60);
        let mut stream = store.open_stream(&id).expect("the header is whole");
        let err = read_in_pieces(&mut stream, 65536).expect_err("damage found");
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidData, "{err}");
        let again = stream.read(&mut [0u8; 16]).expect_err("fails again");
        assert!(again.to_string().contains("earlier read"), "{again}");
        match store.open_stream(&id).expect("open").verify() {
            Err(Error::Corrupt { path, .. }) => {
                assert!(path.to_string_lossy().contains("objects"), "{path:?}")
            }
            other => panic!("expected damage, got {other:?}"),
        }
    }
    // A batch of one object is stored loose: two make a pack.
    // (Content not stored loose above, or the batch would skip it.)
    let packed = text((1 << 20) + 7);
    let other = text(1000);
    store
        .put_batch(2, |i| Ok([&packed, &other][i].clone()), &mut |_| {})
        .expect("put batch");
    let id = BlobId::of(&packed);
    let Some(crate::Location::Packed { offset, .. }) = store.locate(&id).expect("locate") else {
        panic!("{id} is not packed");
    };
    flip_byte(&only_pack(dir.path()), offset + 40);
    match store.open_stream(&id).expect("open").verify() {
        Err(Error::Corrupt { path, offset, .. }) => {
            assert!(path.to_string_lossy().ends_with(".pack"), "{path:?}");
            assert!(offset.is_some());
        }
        other => panic!("expected damage, got {other:?}"),
    }
}

#[test]
fn a_cut_object_and_a_damaged_header_are_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    let base = dir.path().join("blobs");
    let content = text(1 << 20);
    let id = store.put(&content).expect("put").id;
    let path = loose_path(&base, &id);
    let bytes = std::fs::read(&path).expect("read");
    std::fs::write(&path, &bytes[..bytes.len() / 2]).expect("cut");
    let err = store
        .open_stream(&id)
        .expect("open")
        .verify()
        .expect_err("cut");
    assert!(matches!(err, Error::Corrupt { .. }), "{err:?}");
    std::fs::write(&path, &bytes[..10]).expect("cut the header");
    let err = store.open_stream(&id).expect_err("header cut");
    assert!(matches!(err, Error::Corrupt { .. }), "{err:?}");
    let mut bad_magic = bytes.clone();
    bad_magic[0] ^= 1;
    std::fs::write(&path, &bad_magic).expect("write");
    let err = store.open_stream(&id).expect_err("bad magic");
    assert!(matches!(err, Error::Corrupt { .. }), "{err:?}");
}

/// An object whose zstd frame holds more than its header's raw length (a
/// decompression bomb, with a valid CRC): the stream stops at the first
/// read past the length, whatever the frame would still produce.
#[test]
fn a_frame_longer_than_the_raw_length_stops_at_the_length() {
    use crate::object::{Codec, Header};
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    let claimed = b"0123456789".to_vec();
    let id = store.put(&claimed).expect("put").id;
    let frame = zstd::bulk::compress(&vec![b'x'; 64 << 20], 3).expect("compress");
    let header = Header {
        codec: Codec::Zstd,
        raw_len: claimed.len() as u64,
    }
    .encode_with_payload(&frame);
    let path = loose_path(&dir.path().join("blobs"), &id);
    std::fs::write(&path, [&header[..], &frame].concat()).expect("write bomb");
    let mut stream = store.open_stream(&id).expect("the header is whole");
    let mut total = 0usize;
    let mut buf = vec![0u8; 4096];
    let err = loop {
        match stream.read(&mut buf) {
            Ok(0) => panic!("read to the end without an error"),
            Ok(n) => total += n,
            Err(e) => break e,
        }
    };
    assert!(total <= claimed.len(), "handed out {total} bytes");
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidData, "{err}");
}

//! The S3 backend against a real server ([`crate::testing`]): the contract
//! of the seam, and what only an object store shared by several writers
//! shows.

use std::io;
use std::path::Path;

use jpstore_blobstore::backend::{contract, read_all, Backend, BackendError};

use crate::testing::server_or_skip;

#[test]
fn the_contract_of_the_seam_holds_on_s3() {
    let Some(server) = server_or_skip("the_contract_of_the_seam_holds_on_s3") else {
        return;
    };
    for (name, check) in contract::ALL {
        let b = server.backend(server.fresh(name.get(..20).unwrap_or(name)));
        check(&format!("s3 ({name})"), &b);
    }
}

#[test]
fn two_appenders_at_the_same_end_cannot_both_succeed() {
    let Some(server) = server_or_skip("two_appenders_at_the_same_end_cannot_both_succeed") else {
        return;
    };
    let location = server.fresh("race");
    // Two backends: two processes (or machines), each with its own locks.
    let (a, b) = (
        server.backend(location.clone()),
        server.backend(location.clone()),
    );
    let k = Path::new("c/events.log");
    a.put_if_absent(k, b"HEAD", Path::new("")).expect("create");
    let (la, lb) = (
        a.open_log(k).expect("open a"),
        b.open_log(k).expect("open b"),
    );
    la.append(4, b"from-a").expect("a appends first");
    let lost = lb.append(4, b"from-b").expect_err("b must not overwrite a");
    assert!(matches!(lost, BackendError::Io { .. }), "{lost}");
    assert_eq!(lost.kind(), io::ErrorKind::AlreadyExists, "{lost}");
    assert!(lost.to_string().contains("412"), "{lost}");
    assert!(
        lost.to_string()
            .contains("events.log.seg/00000000000000000004"),
        "{lost}"
    );
    // B reads again and appends after A.
    let lb = b.open_log(k).expect("reopen b");
    assert_eq!(lb.len().expect("len"), 10);
    lb.append(10, b"from-b").expect("b appends after a");
    let whole = read_all(&*a.open(k).expect("open"), 1 << 20).expect("read");
    assert_eq!(whole, b"HEADfrom-afrom-b");
    // A retry that finds its own segment (the first attempt landed, its
    // answer was lost) is a success, not a conflict.
    let la = a.open_log(k).expect("reopen a");
    let seg = Path::new("c/events.log.seg/00000000000000000016");
    a.put_if_absent(seg, b"again", Path::new(""))
        .expect("first attempt");
    let la2 = a.open_log(k).expect("reopen");
    assert_eq!(la2.len().expect("len"), 21);
    drop(la2);
    // `la` still believes the log ends at 16: its append of the same bytes
    // is proven to be its own.
    la.append(16, b"again").expect("own segment");
    assert!(la.append(21, b"x").is_ok());
    assert!(b.open_log(k).expect("open").len().expect("len") == 22);
}

#[test]
fn listing_a_conversation_shows_the_log_whole_and_hides_segments_and_markers() {
    let Some(server) = server_or_skip("listing_hides_segments") else {
        return;
    };
    let b = server.backend(server.fresh("listing"));
    b.create_prefix(Path::new("c")).expect("prefix");
    let k = Path::new("c/events.log");
    b.put_if_absent(k, b"HEAD", Path::new("")).expect("create");
    let log = b.open_log(k).expect("open");
    log.append(4, b"12345").expect("append");
    let listed = b.list(Path::new("c")).expect("list");
    let names: Vec<(String, Option<u64>)> = listed
        .iter()
        .map(|l| (l.name.clone(), l.object().map(|m| m.len)))
        .collect();
    assert_eq!(names, vec![("events.log".to_string(), Some(9))]);
    assert_eq!(b.head(k).expect("head").len, 9);
    // Moving the conversation moves its segments; deleting the log
    // deletes them.
    b.rename(Path::new("c"), Path::new("aside")).expect("move");
    let moved = Path::new("aside/events.log");
    assert_eq!(
        read_all(&*b.open(moved).expect("open"), 1 << 20).expect("read"),
        b"HEAD12345"
    );
    assert_eq!(b.delete(&[moved.to_path_buf()]).expect("delete"), 1);
    b.remove_prefix(Path::new("aside")).expect("remove prefix");
    // Nothing is left (an S3 server may still list the empty "folders",
    // as SeaweedFS does; none holds an object).
    for gone in ["c", "aside", "c/events.log", "aside/events.log"] {
        assert_eq!(
            b.head(Path::new(gone)).map_err(|e| e.kind()).err(),
            Some(io::ErrorKind::NotFound),
            "{gone}"
        );
    }
}

#[test]
fn errors_name_the_object_and_the_status() {
    let Some(server) = server_or_skip("errors_name_the_object_and_the_status") else {
        return;
    };
    let location = server.fresh("errors");
    let b = server.backend(location.clone());
    let e = b.open(Path::new("no/such")).expect_err("missing");
    assert_eq!(e.kind(), io::ErrorKind::NotFound);
    let text = e.to_string();
    assert!(text.contains("404"), "{text}");
    assert!(
        text.contains(&format!(
            "s3://{}/{}/no/such",
            location.bucket, location.prefix
        )),
        "{text}"
    );
}

#[test]
fn a_second_read_of_a_small_object_is_one_request() {
    let Some(server) = server_or_skip("a_second_read_of_a_small_object_is_one_request") else {
        return;
    };
    let b = server.backend(server.fresh("counts"));
    b.put_if_absent(Path::new("x"), &[7u8; 1000], Path::new(""))
        .expect("put");
    let before = b.requests();
    let r = b.open(Path::new("x")).expect("open");
    assert_eq!(read_all(&*r, 1 << 20).expect("read"), vec![7u8; 1000]);
    let used = b.requests().total() - before.total();
    assert_eq!(used, 1, "open and read of 1000 bytes: {}", b.requests());
}

/// Appends `n` records of 20 bytes to a new log `k`, one append each.
fn append_many(b: &crate::S3Backend, k: &Path, n: usize) -> Vec<u8> {
    b.put_if_absent(k, b"HEAD", Path::new("")).expect("create");
    let log = b.open_log(k).expect("open");
    let mut whole = b"HEAD".to_vec();
    for i in 0..n {
        let record = format!("record {i:>12}\n");
        log.append(whole.len() as u64, record.as_bytes())
            .expect("append");
        whole.extend_from_slice(record.as_bytes());
    }
    whole
}

#[test]
fn a_long_log_is_merged_so_that_a_cold_read_takes_few_requests() {
    let Some(server) =
        server_or_skip("a_long_log_is_merged_so_that_a_cold_read_takes_few_requests")
    else {
        return;
    };
    let location = server.fresh("merge");
    let k = Path::new("c/events.log");
    // JP_STORE_TEST_LOG_APPENDS=10000 measures a longer log.
    let n = std::env::var("JP_STORE_TEST_LOG_APPENDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let whole = append_many(&server.backend(location.clone()), k, n);
    // A cold reader (another process: no cache).
    let cold = server.backend(location.clone());
    let read = read_all(&*cold.open(k).expect("open"), 1 << 20).expect("read");
    assert_eq!(read, whole);
    let used = cold.requests();
    eprintln!("a cold read of a log of {n} appends: {used}");
    // 2 LISTs (the log, then its segments after the merged objects), the
    // first object, O(log n) merged objects, fewer than MERGE_SEGMENTS
    // segments.
    let bound = 2 + 1 + 2 * u64::from(n.ilog2()) + crate::MERGE_SEGMENTS as u64;
    assert!(
        used.total() <= bound,
        "a cold read of {n} appends took {used}, more than {bound}"
    );
    assert_eq!(used.list, 2, "{used}");
    // The merged segments are tombstones, never deleted: a stale writer
    // that read an old end cannot append there.
    let stale = cold.open_log(k).expect("open");
    drop(stale);
    let seg = Path::new("c/events.log.seg/00000000000000000004");
    assert_eq!(
        cold.head(seg)
            .expect("the first segment is still there")
            .len,
        0
    );
    let again = cold
        .put_if_absent(seg, b"late", Path::new(""))
        .expect("put");
    assert_eq!(again, jpstore_blobstore::backend::Put::Existed);
    assert_eq!(
        read_all(&*cold.open(k).expect("open"), 1 << 20).expect("read"),
        whole
    );
    // The log moves and is removed whole, merged objects included.
    cold.rename(Path::new("c"), Path::new("d")).expect("move");
    let moved = Path::new("d/events.log");
    assert_eq!(
        read_all(&*cold.open(moved).expect("open"), 1 << 20).expect("read"),
        whole
    );
    assert_eq!(cold.delete(&[moved.to_path_buf()]).expect("delete"), 1);
    assert_eq!(cold.list(Path::new("d")).expect("list"), vec![]);
}

#[test]
fn a_reader_whose_merged_object_was_superseded_reads_on() {
    let Some(server) = server_or_skip("a_reader_whose_merged_object_was_superseded_reads_on")
    else {
        return;
    };
    let location = server.fresh("superseded");
    let k = Path::new("c/events.log");
    let writer = server.backend(location.clone());
    let mut whole = append_many(&writer, k, 3 * crate::MERGE_SEGMENTS);
    // A reader lists the log (merged objects), and reads it only later.
    let reader = server.backend(location.clone());
    let r = reader.open(k).expect("open");
    // Meanwhile enough appends for the merged objects to be merged again.
    let log = writer.open_log(k).expect("open");
    for i in 0..8 * crate::MERGE_SEGMENTS {
        let record = format!("later {i:>14}\n");
        log.append(whole.len() as u64, record.as_bytes())
            .expect("append");
        whole.extend_from_slice(record.as_bytes());
    }
    let len = r.len().expect("len") as usize;
    let read = read_all(&*r, 1 << 20).expect("read");
    assert_eq!(read, whole[..len]);
}

/// Pseudo-random bytes that do not compress (so sizes are what they say).
fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[test]
fn large_objects_are_read_again_from_the_cache_by_chunks() {
    let Some(server) = server_or_skip("large_objects_are_read_again_from_the_cache_by_chunks")
    else {
        return;
    };
    let location = server.fresh("chunks");
    let cache = tempfile::tempdir().expect("tempdir");
    let process = || {
        server.backend(location.clone()).with_cache(
            crate::DiskCache::open(cache.path(), crate::DEFAULT_CACHE_BYTES).expect("cache"),
        )
    };
    // An immutable object (a pack) and a log whose first object are both
    // larger than what is fetched whole.
    let pack = Path::new("blobs/packs/pack-test.pack");
    let log = Path::new("c/events.log");
    let (pack_bytes, log_bytes) = (noise(6 << 20 | 5, 1), noise(5 << 20 | 3, 2));
    let writer = server.backend(location.clone());
    writer
        .put_if_absent(pack, &pack_bytes, Path::new(""))
        .expect("put the pack");
    writer
        .put_if_absent(log, &log_bytes, Path::new(""))
        .expect("put the log");
    // A first process reads them (and fills the cache), a second one reads
    // them again: the pack with no request, the log with its listing only.
    for (round, expect_requests) in [(0, None), (1, Some(1))] {
        let b = process();
        assert_eq!(
            read_all(&*b.open(pack).expect("open"), 1 << 30).expect("read"),
            pack_bytes
        );
        assert_eq!(
            read_all(&*b.open(log).expect("open"), 1 << 30).expect("read"),
            log_bytes
        );
        if let Some(n) = expect_requests {
            assert_eq!(b.requests().total(), n, "round {round}: {}", b.requests());
        }
    }
    // A read in the middle, across a chunk boundary, from the cache.
    let b = process();
    let r = b.open(pack).expect("open");
    let mut buf = vec![0u8; 100];
    jpstore_blobstore::backend::read_exact_at(&*r, &mut buf, (3 << 20) - 50).expect("read");
    assert_eq!(buf, pack_bytes[(3 << 20) - 50..(3 << 20) + 50]);
    assert_eq!(b.requests().total(), 0, "{}", b.requests());
    // The log grows (another process appends): its first object is still
    // read from the cache, the new segment from the server.
    let appender = server.backend(location.clone());
    let l = appender.open_log(log).expect("open the log");
    l.append(log_bytes.len() as u64, b"more").expect("append");
    let b = process();
    let mut whole = log_bytes.clone();
    whole.extend_from_slice(b"more");
    assert_eq!(
        read_all(&*b.open(log).expect("open"), 1 << 30).expect("read"),
        whole
    );
    assert_eq!(b.requests().list, 1, "{}", b.requests());
    assert_eq!(
        b.requests().get,
        1,
        "only the new segment: {}",
        b.requests()
    );
}

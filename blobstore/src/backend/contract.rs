//! The contract of [`Backend`]: behaviour every implementation must
//! show, as functions of a fresh (empty) backend, so that the
//! implementations outside this crate (the S3 backend) are checked by the
//! same code as the local file system, the simulated one and the
//! in-memory object store. Each function panics on a breach, naming the
//! backend (`what`).

use std::io;
use std::path::{Path, PathBuf};

use super::*;

/// A check: the name of the backend (for messages), and a fresh backend.
pub type Check = fn(&str, &dyn Backend);

/// Every check, by name.
pub const ALL: &[(&str, Check)] = &[
    (
        "put_if_absent_creates_once_and_never_replaces",
        put_if_absent_creates_once_and_never_replaces,
    ),
    (
        "an_upload_is_invisible_until_published_and_discarded_if_dropped",
        an_upload_is_invisible_until_published_and_discarded_if_dropped,
    ),
    (
        "list_shows_objects_and_prefixes_one_level_down",
        list_shows_objects_and_prefixes_one_level_down,
    ),
    (
        "delete_counts_what_it_removed",
        delete_counts_what_it_removed,
    ),
    (
        "a_conditional_replace_fails_on_a_version_written_since",
        a_conditional_replace_fails_on_a_version_written_since,
    ),
    (
        "a_log_grows_by_appends_and_loses_only_a_cut_tail",
        a_log_grows_by_appends_and_loses_only_a_cut_tail,
    ),
    (
        "locks_exclude_as_their_kind_says_and_know_when_their_name_was_replaced",
        locks_exclude_as_their_kind_says_and_know_when_their_name_was_replaced,
    ),
    ("rename_moves_a_prefix_whole", rename_moves_a_prefix_whole),
    (
        "touch_freshens_an_object_and_reports_a_missing_one",
        touch_freshens_an_object_and_reports_a_missing_one,
    ),
    (
        "keys_that_leave_the_store_are_refused",
        keys_that_leave_the_store_are_refused,
    ),
];

/// The prefix every check writes its scratch names under.
fn prepare(b: &dyn Backend) {
    b.create_prefix(Path::new("d/tmp")).expect("prefix");
}

fn key(s: &str) -> PathBuf {
    PathBuf::from(s)
}

fn read(b: &dyn Backend, k: &str) -> Vec<u8> {
    let r = b.open(&key(k)).expect("open");
    read_all(&*r, 1 << 20).expect("read")
}

/// See the name.
pub fn put_if_absent_creates_once_and_never_replaces(what: &str, b: &dyn Backend) {
    prepare(b);
    let k = key("d/obj");
    assert_eq!(
        b.put_if_absent(&k, b"first", &key("d/tmp/1")).expect(what),
        Put::Created,
        "{what}"
    );
    assert_eq!(
        b.put_if_absent(&k, b"second", &key("d/tmp/2")).expect(what),
        Put::Existed,
        "{what}"
    );
    assert_eq!(read(b, "d/obj"), b"first", "{what}");
    let meta = b.head(&k).expect(what);
    assert_eq!((meta.len, meta.kind), (5, FileKind::Regular), "{what}");
    // Ranges.
    let r = b.open(&k).expect(what);
    let mut buf = [0u8; 3];
    read_exact_at(&*r, &mut buf, 2).expect(what);
    assert_eq!(&buf, b"rst", "{what}");
    assert_eq!(
        read_exact_at(&*r, &mut buf, 4).map_err(|e| e.kind()),
        Err(io::ErrorKind::UnexpectedEof),
        "{what}"
    );
    assert_eq!(&*b.map(&k).expect(what), b"first", "{what}");
    // Nothing left under the scratch names.
    let tmp: Vec<String> = b
        .list(&key("d/tmp"))
        .expect(what)
        .into_iter()
        .map(|l| l.name)
        .collect();
    assert!(tmp.is_empty(), "{what}: {tmp:?}");
}

/// See the name.
pub fn an_upload_is_invisible_until_published_and_discarded_if_dropped(
    what: &str,
    b: &dyn Backend,
) {
    prepare(b);
    let up = b.upload(&key("d/tmp/up")).expect(what);
    up.write_at(b"hello ", 0).expect(what);
    up.sync_partial().expect(what);
    up.write_at(b"world", 6).expect(what);
    up.sync_all().expect(what);
    assert_eq!(
        b.head(&key("d/big")).map_err(|e| e.kind()).err(),
        Some(io::ErrorKind::NotFound),
        "{what}"
    );
    assert_eq!(up.publish(&key("d/big")).expect(what), Put::Created);
    assert_eq!(up.publish(&key("d/big")).expect(what), Put::Existed);
    drop(up);
    assert_eq!(read(b, "d/big"), b"hello world", "{what}");
    let dropped = b.upload(&key("d/tmp/gone")).expect(what);
    dropped.write_at(b"x", 0).expect(what);
    drop(dropped);
    let names: Vec<String> = b
        .list(&key("d"))
        .expect(what)
        .into_iter()
        .map(|l| l.name)
        .collect();
    assert!(
        !names.iter().any(|n| n.contains("gone")),
        "{what}: {names:?}"
    );
}

/// See the name.
pub fn list_shows_objects_and_prefixes_one_level_down(what: &str, b: &dyn Backend) {
    prepare(b);
    b.create_prefix(&key("d/sub")).expect(what);
    b.put_if_absent(&key("d/sub/x"), b"1", &key("d/tmp/a"))
        .expect(what);
    b.put_if_absent(&key("d/y"), b"22", &key("d/tmp/b"))
        .expect(what);
    let mut seen: Vec<(String, Option<u64>)> = b
        .list(&key("d"))
        .expect(what)
        .into_iter()
        .map(|l| (l.name.clone(), l.object().map(|m| m.len)))
        .collect();
    seen.sort();
    assert_eq!(
        seen,
        vec![
            ("sub".to_string(), None),
            ("tmp".to_string(), None),
            ("y".to_string(), Some(2)),
        ],
        "{what}"
    );
    assert_eq!(
        b.list(&key("nothing")).map_err(|e| e.kind()).err(),
        Some(io::ErrorKind::NotFound),
        "{what}"
    );
}

/// See the name.
pub fn delete_counts_what_it_removed(what: &str, b: &dyn Backend) {
    prepare(b);
    for (i, k) in ["d/a", "d/b"].iter().enumerate() {
        b.put_if_absent(&key(k), b"x", &key(&format!("d/tmp/{i}")))
            .expect(what);
    }
    let n = b
        .delete(&[key("d/a"), key("d/b"), key("d/missing")])
        .expect(what);
    assert_eq!(n, 2, "{what}");
    assert_eq!(
        b.head(&key("d/a")).map_err(|e| e.kind()).err(),
        Some(io::ErrorKind::NotFound),
        "{what}"
    );
}

/// See the name.
pub fn a_conditional_replace_fails_on_a_version_written_since(what: &str, b: &dyn Backend) {
    prepare(b);
    let k = key("d/head");
    b.replace(&k, b"one", &key("d/head.tmp"), Expect::Any, true)
        .expect(what);
    let v1 = b.head(&k).expect(what).version;
    b.replace(
        &k,
        b"two!",
        &key("d/head.tmp"),
        Expect::Version(v1.clone()),
        false,
    )
    .expect(what);
    assert_eq!(read(b, "d/head"), b"two!", "{what}");
    let stale = b
        .replace(&k, b"three", &key("d/head.tmp"), Expect::Version(v1), false)
        .expect_err(what);
    assert_eq!(stale.kind(), io::ErrorKind::AlreadyExists, "{what}");
    assert_eq!(read(b, "d/head"), b"two!", "{what}");
}

/// See the name.
pub fn a_log_grows_by_appends_and_loses_only_a_cut_tail(what: &str, b: &dyn Backend) {
    prepare(b);
    let k = key("d/events.log");
    b.put_if_absent(&k, b"HEAD", &key("d/tmp/log")).expect(what);
    let log = b.open_log(&k).expect(what);
    log.append(4, b"rec1").expect(what);
    log.append(8, b"rec2").expect(what);
    assert_eq!(log.len().expect(what), 12, "{what}");
    log.truncate(8).expect(what);
    log.sync().expect(what);
    assert_eq!(read(b, "d/events.log"), b"HEADrec1", "{what}");
    b.sync_object(&k).expect(what);
}

/// See the name.
pub fn locks_exclude_as_their_kind_says_and_know_when_their_name_was_replaced(
    what: &str,
    b: &dyn Backend,
) {
    prepare(b);
    b.create_prefix(&key("d/c")).expect(what);
    let lock = key("d/c/x.lock");
    let shared = b
        .lock(&lock, LockKind::Shared, false)
        .expect(what)
        .expect("free");
    assert!(b
        .lock(&lock, LockKind::Shared, false)
        .expect(what)
        .is_some());
    assert!(
        b.lock(&lock, LockKind::Exclusive, false)
            .expect(what)
            .is_none(),
        "{what}: exclusive beside shared"
    );
    drop(shared);
    let held = b
        .lock(&lock, LockKind::Exclusive, true)
        .expect(what)
        .expect("waited");
    assert!(held.is_current().expect(what), "{what}");
    // What the lock guards is moved away: the lock no longer guards
    // the name.
    b.rename(&key("d/c"), &key("d/c-aside")).expect(what);
    assert!(!held.is_current().expect(what), "{what}");
    drop(held);
    assert_eq!(
        b.lock(&lock, LockKind::Exclusive, false)
            .map(|l| l.is_some())
            .map_err(|e| e.kind()),
        Err(io::ErrorKind::NotFound),
        "{what}: a lock below a removed prefix"
    );
}

/// See the name.
pub fn rename_moves_a_prefix_whole(what: &str, b: &dyn Backend) {
    prepare(b);
    b.create_prefix(&key("d/p")).expect(what);
    b.put_if_absent(&key("d/p/one"), b"1", &key("d/tmp/1"))
        .expect(what);
    b.create_prefix(&key("d/q")).expect(what);
    b.rename(&key("d/p"), &key("d/q/p")).expect(what);
    assert_eq!(read(b, "d/q/p/one"), b"1", "{what}");
    assert_eq!(
        b.head(&key("d/p/one")).map_err(|e| e.kind()).err(),
        Some(io::ErrorKind::NotFound),
        "{what}"
    );
    b.delete(&[key("d/q/p/one")]).expect(what);
    b.remove_prefix(&key("d/q/p")).expect(what);
    assert_eq!(
        b.head(&key("d/q/p")).map_err(|e| e.kind()).err(),
        Some(io::ErrorKind::NotFound),
        "{what}"
    );
}

/// See the name.
pub fn touch_freshens_an_object_and_reports_a_missing_one(what: &str, b: &dyn Backend) {
    prepare(b);
    let k = key("d/t");
    assert!(!b.touch(&k).expect(what), "{what}");
    b.put_if_absent(&k, b"x", &key("d/tmp/t")).expect(what);
    let before = b.head(&k).expect(what).modified;
    std::thread::sleep(std::time::Duration::from_millis(5));
    assert!(b.touch(&k).expect(what), "{what}");
    assert!(b.head(&k).expect(what).modified >= before, "{what}");
}

/// See the name.
pub fn keys_that_leave_the_store_are_refused(what: &str, b: &dyn Backend) {
    prepare(b);
    for bad in ["/etc/passwd", "../x", "d/../../x"] {
        assert!(b.open(&key(bad)).is_err(), "{what}: {bad}");
        assert!(
            b.put_if_absent(&key(bad), b"x", &key("d/tmp/z")).is_err(),
            "{what}: {bad}"
        );
    }
}

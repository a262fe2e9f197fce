//! JP's backend on a store it cannot write: a read-only file system (a
//! mounted backup, a snapshot: here a read-only bind mount) and a full one
//! (a tmpfs of 3 MiB). Each runs in a mount namespace of its own: this test
//! binary run again in its child mode under `unshare --mount` (root only;
//! in CI a test that cannot run fails).
//!
//! Read-only: JP lists, reads metadata and loads what a writable view of
//! the same store loads; every write (a persist, a lock, a removal, an
//! archive, a session) is refused with the file system's error in its
//! chain; `sanitize` reports nothing; the store's files are as they were.
//! Full: the persist that does not fit is refused with the file system's
//! error, a new backend loads the last acknowledged stream, the refused
//! write refused again, and the store passes fsck with `--read-data`.

use crate::common;

use std::error::Error as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use jp_conversation::ConversationStream;
use jp_storage::backend::{
    ConversationFilter, LoadBackend, LockBackend, PersistBackend, Projection, SessionBackend,
};
use jpstore_engine::fsck::FsckOptions;
use jpstore_jp::JpStoreBackend;

const CHILD: &str = "JPSTORE_JP_UNWRITABLE_CHILD";

/// The full name of the test `name` of this module in its test binary, as
/// `--exact` takes it.
fn test_path(name: &str) -> String {
    let module = module_path!()
        .split_once("::")
        .map_or("", |(_crate, module)| module);
    format!("{module}::{name}")
}

fn open(dir: &Path) -> JpStoreBackend {
    JpStoreBackend::open(dir.to_str().expect("utf-8")).expect("a store")
}

/// Whether `e` or an error of its chain is an I/O error of `kind`.
fn caused_by(e: &(dyn std::error::Error + 'static), kind: std::io::ErrorKind) -> bool {
    let mut next = Some(e);
    while let Some(e) = next {
        if e.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == kind)
        {
            return true;
        }
        next = e.source();
    }
    false
}

/// The child: `read-only <store> <mount>` or `full <mount>`, the mount made
/// by the parent's `unshare`.
#[test]
fn child_mode() {
    let Ok(how) = std::env::var(CHILD) else {
        return;
    };
    let args: Vec<PathBuf> = std::env::var_os("JPSTORE_JP_UNWRITABLE_PATHS")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    match how.as_str() {
        "read-only" => read_only_child(&args[0], &args[1]),
        "full" => full_child(&args[0]),
        other => panic!("unknown child mode {other}"),
    }
    println!("child done");
}

fn read_only_child(store: &Path, mount: &Path) {
    let ids: Vec<_> = (0..2).map(common::id).collect();
    let ro = open(mount);
    let index: Vec<_> = ro
        .load_conversation_index(ConversationFilter::default())
        .into_iter()
        .map(|e| e.id)
        .collect();
    assert_eq!(index, ids);
    let writable = open(store);
    for (id, meta) in ro.load_conversation_metadata_batch(&ids) {
        let meta = meta.expect("metadata read");
        assert_eq!(meta.title.as_deref(), Some("read only"), "{id}");
    }
    for id in &ids {
        let a = ro.load_conversation_stream(id).expect("loads");
        let b = writable.load_conversation_stream(id).expect("loads");
        assert!(
            a == b,
            "{id}: the read-only view loads what the store holds"
        );
    }
    let refused = |what: &str, r: Result<(), jp_storage::Error>| {
        let e = r.expect_err(what);
        assert!(
            caused_by(&e, std::io::ErrorKind::ReadOnlyFilesystem),
            "{what}: {e} ({:?})",
            e.source().map(ToString::to_string)
        );
    };
    let mut grown = ro.load_conversation_stream(&ids[0]).expect("loads");
    common::add_turn(&mut grown, 9, "ro");
    refused(
        "a persist",
        ro.write(
            &ids[0],
            &common::metadata(Some("read only")),
            &grown,
            Projection::Projected,
        ),
    );
    refused(
        "a lock",
        ro.try_lock(&ids[0].to_string(), Some("s")).map(|_| ()),
    );
    refused("a removal", ro.remove(&ids[1]));
    refused("an archive", ro.archive(&ids[1]));
    refused(
        "a session",
        ro.save_session("k", &serde_json::json!({"conversation": "c"})),
    );
    let report = ro.sanitize().expect("sanitize reads");
    assert!(report.trashed.is_empty(), "{report:?}");
}

fn full_child(mount: &Path) {
    let dir = mount.join("store");
    let backend = open(&dir);
    let id = common::id(7);
    let meta = common::metadata(Some("full"));
    let mut stream = common::stream(1, "full");
    let mut acknowledged: Option<ConversationStream> = None;
    let mut turn = 1;
    let refused = loop {
        // Turns of a few KiB (a new loose object each, a page of the
        // tmpfs): 3 MiB are full within a few hundred.
        common::add_turn(&mut stream, turn, &"x".repeat(200));
        turn += 1;
        assert!(turn < 2_000, "3 MiB held 2,000 turns");
        match backend.write(&id, &meta, &stream, Projection::Projected) {
            Ok(()) => acknowledged = Some(stream.clone()),
            Err(e) => break e,
        }
    };
    assert!(
        caused_by(&refused, std::io::ErrorKind::StorageFull),
        "{refused}: {:?}",
        refused.source().map(ToString::to_string)
    );
    let acknowledged = acknowledged.expect("some turns fit");
    let loaded = open(&dir).load_conversation_stream(&id).expect("loads");
    assert!(
        loaded == acknowledged.with_created_at(loaded.created_at),
        "a new backend loads the last acknowledged stream"
    );
    let again = backend.write(&id, &meta, &stream, Projection::Projected);
    assert!(
        again
            .as_ref()
            .is_err_and(|e| caused_by(e, std::io::ErrorKind::StorageFull)),
        "the refused write again: {again:?}"
    );
    drop(backend);
    let store = open(&dir);
    let report = jpstore_engine::fsck::run(
        store.store(),
        FsckOptions {
            read_data: true,
            repair: false,
        },
        &mut |_| {},
    )
    .expect("fsck runs");
    assert!(report.is_clean(), "{report:?}");
    println!("refused at turn {turn}");
}

/// Runs the child `how` under `unshare --mount`, after `script` (a shell
/// script given `paths` as its arguments) made its mount; its stdout.
fn child(how: &str, script: &str, paths: &[&Path]) -> String {
    let joined = std::env::join_paths(paths).expect("paths");
    let out = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg(format!("{script} && exec \"$0\" \"$@\""))
        .arg(std::env::current_exe().expect("this binary"))
        .args([
            "--exact",
            &test_path("child_mode"),
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, how)
        .env("JPSTORE_JP_UNWRITABLE_PATHS", &joined)
        .output()
        .expect("unshare runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success() && stdout.contains("child done"),
        "the {how} child: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Whether this process may make mount namespaces (root); else the test is
/// skipped (failed in CI).
fn can_mount(test: &str) -> bool {
    if jpstore_test_env::is_root() {
        return true;
    }
    jpstore_test_env::skip(
        test,
        jpstore_test_env::Need::Root,
        "it mounts a file system in a mount namespace of its own",
    );
    false
}

#[test]
fn on_a_read_only_file_system_jp_reads_and_every_write_is_refused() {
    if !can_mount("unwritable::read_only") {
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let store = tmp.path().join("store");
    let mount = tmp.path().join("mount");
    std::fs::create_dir_all(&mount).expect("mount point");
    let backend = open(&store);
    for (n, id) in (0..2).map(common::id).enumerate() {
        backend
            .write(
                &id,
                &common::metadata(Some("read only")),
                &common::stream(n + 2, "ro"),
                Projection::Projected,
            )
            .expect("a write");
    }
    drop(backend);
    let before = jpstore_tests::tree_snapshot(&store);
    child(
        "read-only",
        &format!(
            "mount --bind {store} {mount} && mount -o remount,bind,ro {mount}",
            store = sh_quote(&store),
            mount = sh_quote(&mount)
        ),
        &[&store, &mount],
    );
    assert_eq!(
        jpstore_tests::tree_snapshot(&store),
        before,
        "nothing written"
    );
}

#[test]
fn on_a_full_file_system_the_persist_that_does_not_fit_is_refused_and_nothing_is_lost() {
    if !can_mount("unwritable::full") {
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let mount = tmp.path().join("tmpfs");
    std::fs::create_dir_all(&mount).expect("mount point");
    let out = child(
        "full",
        &format!("mount -t tmpfs -o size=3m tmpfs {}", sh_quote(&mount)),
        &[&mount],
    );
    assert!(out.contains("refused at turn"), "{out}");
}

/// `path` quoted for `sh`.
fn sh_quote(path: &Path) -> String {
    format!("'{}'", path.display().to_string().replace('\'', r"'\''"))
}

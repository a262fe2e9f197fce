//! JP's own `Workspace` over `JpStoreBackend` (`Workspace::with_backend`):
//! conversations created, turns added with JP's API and persisted, the
//! workspace dropped, a new one opened on the store: what it loads equals
//! what was written, and the workspace projection holds the files JP's
//! `FsStorageBackend` writes for the same conversations.

use crate::common;

use std::sync::Arc;

use jp_conversation::Conversation;
use jp_storage::backend::{PersistBackend, Projection};
use jp_workspace::Workspace;
use jpstore_jp::JpStoreBackend;

#[test]
fn a_workspace_over_the_store_reopens_what_it_persisted() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let store = tmp.path().join("store");
    let open = || JpStoreBackend::open(store.to_str().expect("utf-8")).expect("store");
    reopens_what_it_persisted(tmp.path(), open(), open());
}

/// The same on S3, the workspace opened again on another machine: another
/// client with a cache directory of its own.
#[test]
fn a_workspace_over_a_store_on_s3_reopens_what_it_persisted_on_another_machine() {
    let Some(location) = common::s3_location("jp_workspace_on_s3") else {
        return;
    };
    let tmp = tempfile::tempdir().expect("tempdir");
    let lease = jpstore_jp::DEFAULT_LEASE;
    let first = common::s3_backend(&location, &tmp.path().join("cache-a"), lease);
    let second = common::s3_backend(&location, &tmp.path().join("cache-b"), lease);
    reopens_what_it_persisted(tmp.path(), first, second);
}

/// Conversations created and persisted turn by turn through JP's
/// `Workspace` over `first`, read back through a new workspace over
/// `second`; the projection, written by `first`, equal to JP's own files.
fn reopens_what_it_persisted(tmp: &std::path::Path, first: JpStoreBackend, second: JpStoreBackend) {
    let root = camino::Utf8PathBuf::from_path_buf(tmp.join("project")).expect("utf-8");
    let config = common::stream(0, "w").base_config();

    let backend = Arc::new(first.with_workspace(root.as_std_path()));
    let mut workspace = Workspace::in_memory(root.clone()).with_backend(backend);
    let mut written = Vec::new();
    for n in 0..3i64 {
        let lock = workspace
            .create_and_lock_conversation_with_id(
                common::id(n),
                Conversation {
                    title: Some(format!("conversation {n}")),
                    ..Default::default()
                },
                config.clone(),
                None,
            )
            .expect("create and lock");
        let mut conv = lock.into_mut();
        for t in 0..=n as usize {
            conv.update_events(|s| common::add_turn(s, t, "w"));
            conv.flush().expect("persist a turn");
        }
        written.push((conv.id(), conv.events().clone(), conv.metadata().clone()));
    }
    drop(workspace);

    let backend = Arc::new(second);
    let mut again = Workspace::in_memory(root.clone()).with_backend(backend.clone());
    again.load_conversation_index();
    for (id, events, metadata) in &written {
        let handle = again.acquire_conversation(id).expect("in the index");
        assert_eq!(&*again.events(&handle).expect("events"), events);
        let loaded = again.metadata(&handle).expect("metadata").clone();
        assert_eq!(loaded.title, metadata.title);
        assert!(loaded.events_count > 0);
    }

    // The projection is what JP's own file backend writes for the same.
    let reference = tmp.join("reference");
    let fs = common::fs_backend(&reference);
    for (id, events, metadata) in &written {
        fs.write(id, metadata, events, Projection::Projected)
            .expect("JP writes");
    }
    assert_eq!(
        files_below(&root.as_std_path().join(".jp/conversations")),
        files_below(&reference.join(".jp/conversations"))
    );
}

fn files_below(dir: &std::path::Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("a directory").flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let rel = p.strip_prefix(dir).expect("below").to_path_buf();
                out.push((rel, std::fs::read(&p).expect("read")));
            }
        }
    }
    out.sort();
    assert!(!out.is_empty(), "files in {}", dir.display());
    out
}

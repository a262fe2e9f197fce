//! A JP user's conversations moved into a store in one import: JP's
//! user-local storage and a workspace's `.jp/conversations`, archive
//! included. `JpStoreBackend` over the store then shows JP what JP's own
//! file backend showed, and `export --format jp` gives the files back.

use crate::common;
use jpstore_engine::internal::StoreInterior as _;

use jp_storage::backend::{
    ConversationFilter, FsStorageBackend, LoadBackend, PersistBackend, Projection,
};
use jpstore_jp::JpStoreBackend;

#[test]
fn a_users_conversations_come_in_whole_and_go_out_byte_for_byte() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let workspace = tmp.path().join("project");
    let user = tmp.path().join("user");
    let utf8 =
        |p: &std::path::Path| camino::Utf8PathBuf::from_path_buf(p.to_path_buf()).expect("utf-8");
    let fs = FsStorageBackend::new(&utf8(&workspace.join(".jp")))
        .and_then(|b| b.with_user_storage(&utf8(&user), None, "moving-in"))
        .expect("JP's file backend with user storage");
    for n in 0..6 {
        let projection = if n % 2 == 0 {
            Projection::Projected
        } else {
            Projection::LocalOnly
        };
        fs.write(
            &common::id(n),
            &common::metadata(Some(&format!("conversation {n}"))),
            &common::stream((n % 3 + 1) as usize, &n.to_string()),
            projection,
        )
        .expect("JP writes");
    }
    fs.archive(&common::id(4)).expect("archive");
    let silo = fs.user_storage_path().expect("user storage").to_path_buf();

    // One import of both places (the command: `jp-store import SILO/conversations WORKSPACE`).
    let store_dir = tmp.path().join("store");
    let ours = JpStoreBackend::open(store_dir.to_str().expect("utf-8")).expect("store");
    let report = jpstore_integrations::jp::import::import_paths(
        ours.store(),
        &[
            silo.join("conversations").into_std_path_buf(),
            workspace.clone(),
        ],
        false,
        &mut |_| {},
    )
    .expect("import");
    assert!(report.failed.is_empty(), "{:?}", report.failed);
    assert!(
        report.not_byte_identical.is_empty(),
        "{:?}",
        report.not_byte_identical
    );

    for archived in [false, true] {
        let filter = ConversationFilter { archived };
        assert_eq!(
            fs.load_conversation_ids(filter),
            ours.load_conversation_ids(filter)
        );
    }
    // Where JP finds each: both roots for the projected, the user storage
    // alone for the local ones.
    for archived in [false, true] {
        let filter = ConversationFilter { archived };
        let index = |b: &dyn LoadBackend| {
            b.load_conversation_index(filter)
                .into_iter()
                .map(|e| format!("{} {:?}", e.id, e.presence))
                .collect::<Vec<_>>()
        };
        assert_eq!(index(&fs), index(&ours), "the index (archived: {archived})");
    }
    for n in 0..6 {
        let id = common::id(n);
        assert_eq!(
            fs.load_conversation_metadata(&id).expect("JP's metadata"),
            ours.load_conversation_metadata(&id).expect("ours"),
            "metadata of {n}"
        );
        assert_eq!(
            fs.load_conversation_stream(&id)
                .map_err(|e| e.kind().is_missing()),
            ours.load_conversation_stream(&id)
                .map_err(|e| e.kind().is_missing()),
            "stream of {n}"
        );
    }

    // Out again: the files JP's user storage holds, byte for byte.
    let out = tmp.path().join("out");
    let store = ours.store();
    for id in store.ids().expect("ids") {
        let conv = store.read(&id).expect("read");
        let files = jpstore_integrations::jp::export::jp_files(store, &conv).expect("files");
        let dir = files.dir_in(&out);
        std::fs::create_dir_all(&dir).expect("mkdir");
        std::fs::write(dir.join("events.json"), &files.events).expect("events");
        std::fs::write(dir.join("metadata.json"), &files.metadata).expect("metadata");
        if let Some(base) = &files.base_config {
            std::fs::write(dir.join("base_config.json"), base).expect("base config");
        }
    }
    assert_eq!(
        files_below(&out),
        files_below(silo.join("conversations").as_std_path())
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
    assert!(out.len() >= 18, "files in {}", dir.display());
    out
}

//! Setup shared by the benches: stores, generated conversations and JP
//! workspaces, attachment trees and maintenance stores, each built the same
//! way wherever it is measured (the component benches, `quick`, `scaling`),
//! and stores on an S3 server (`s3`).

pub mod attach;
pub mod conversation;
pub mod import;
pub mod maintenance;
pub mod s3;
pub mod unsynced;

use jpstore_engine::internal::StoreInterior as _;
use std::path::{Path, PathBuf};

/// Bytes of the files below `path` (not following links; 0 if missing).
pub fn du(path: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(path) else {
        return 0;
    };
    let mut total = 0;
    for e in entries.flatten() {
        let p = e.path();
        let Ok(m) = std::fs::symlink_metadata(&p) else {
            continue;
        };
        total += if m.is_dir() { du(&p) } else { m.len() };
    }
    total
}

/// The regular files below `dir` (not following links).
pub fn files_below(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(&d).expect("list a directory") {
            let entry = entry.expect("a directory entry");
            let kind = entry.file_type().expect("a file type");
            if kind.is_dir() {
                dirs.push(entry.path());
            } else if kind.is_file() {
                out.push(entry.path());
            }
        }
    }
    out
}

/// A store in a fresh directory below `root`, with every blob fan-out
/// directory already present (as in a store used for a while), so a loose
/// put costs its steady-state syncs. The directory goes with the `TempDir`.
pub fn fresh_store(root: &Path) -> (tempfile::TempDir, jpstore_engine::Store) {
    let dir = tempfile::Builder::new()
        .prefix("store-")
        .tempdir_in(root)
        .expect("create a store directory");
    let store =
        jpstore_engine::Store::init_dir(dir.path(), Default::default()).expect("init the store");
    let backend = store.backend();
    for i in 0..=255u8 {
        let d = std::path::PathBuf::from(format!("blobs/objects/{i:02x}"));
        backend.create_prefix(&d).expect("create a fan-out dir");
    }
    (dir, store)
}

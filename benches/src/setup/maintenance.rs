//! Stores of many blobs and conversations, for gc and fsck.
//!
//! Each conversation is `turns` turns of one tool call whose response is
//! `blocks` content blocks of its own (about 500 bytes of code-like text
//! each), all stored as packs of 10,000 blobs (as an import or attach
//! stores them), plus `orphans` unreferenced loose objects for gc to find.

use jpstore_engine::internal::StoreInterior as _;
use std::path::Path;
use std::time::Duration;

use jpstore_blobstore::BlobId;
use jpstore_engine::conversation::ConversationId;
use jpstore_engine::fsck::{FsckOptions, FsckReport};
use jpstore_engine::gc::{GcOptions, GcReport};
use jpstore_engine::internal::event::input::parse_input;
use jpstore_engine::internal::event::json::ParseMode;
use jpstore_engine::timestamp::Timestamp;
use jpstore_engine::{NewConversation, Store, StoreOptions};
use serde_json::json;

use super::unsynced::{open_unsynced, sync_tree};
use crate::workload::code;
use crate::Rng;

/// The size of a maintenance store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MaintenanceShape {
    /// Conversations.
    pub conversations: usize,
    /// Turns of each conversation (one tool call each).
    pub turns: usize,
    /// Content blocks of each tool response (one blob each).
    pub blocks: usize,
    /// Unreferenced loose objects.
    pub orphans: usize,
}

impl MaintenanceShape {
    /// Referenced blobs.
    pub fn referenced(&self) -> usize {
        self.conversations * self.turns * self.blocks
    }
}

/// The content of block `b` of turn `t` of conversation `c`.
pub fn content(c: usize, t: usize, b: usize) -> String {
    let mut rng = Rng::new((c * 1_000_000 + t * 1_000 + b) as u64 + 7);
    let mut out = format!("// conversation {c} turn {t} block {b}\n").into_bytes();
    code::generate(&mut rng, 500, &mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// Builds a store of `shape` in `root` (a new directory) and returns it
/// with the raw bytes of every referenced blob. It is written without syncs
/// and synced once at the end ([`super::unsynced`]).
pub fn build(root: &Path, shape: MaintenanceShape) -> (Store, Vec<Vec<u8>>) {
    drop(Store::init_dir(root, StoreOptions::default()).expect("init"));
    let store = open_unsynced(root);
    // Generated on every core: it is most of the setup's CPU time.
    let threads = crate::floor::cores();
    let per = shape.conversations.div_ceil(threads).max(1);
    let all: Vec<Vec<u8>> = std::thread::scope(|s| {
        let parts: Vec<_> = (0..shape.conversations)
            .step_by(per)
            .map(|first| {
                s.spawn(move || {
                    let mut out = Vec::new();
                    for c in first..(first + per).min(shape.conversations) {
                        for t in 0..shape.turns {
                            for b in 0..shape.blocks {
                                out.push(content(c, t, b).into_bytes());
                            }
                        }
                    }
                    out
                })
            })
            .collect();
        parts
            .into_iter()
            .flat_map(|p| p.join().expect("a generating thread"))
            .collect()
    });
    for chunk in all.chunks(10_000) {
        store
            .blobs()
            .put_batch(chunk.len(), |i| Ok(chunk[i].clone()), &mut |_| {})
            .expect("batch");
    }
    let now = Timestamp::now();
    let mut next = all.iter();
    for c in 0..shape.conversations {
        let mut w = store
            .create(NewConversation {
                id: Some(ConversationId::parse(&format!("c{c:05}")).expect("id")),
                ..Default::default()
            })
            .expect("create");
        let mut lines = Vec::new();
        for t in 0..shape.turns {
            lines.push(json!({"type": "turn_start"}).to_string());
            lines.push(json!({"type": "tool_call_request", "id": format!("t{t}"), "name": "fs_read_file", "arguments": {}}).to_string());
            let blocks: Vec<_> = (0..shape.blocks)
                .map(|_| {
                    let bytes = next.next().expect("a blob per block");
                    json!({"type": "text", "text": {"$blob": BlobId::of(bytes).to_hex(), "size": bytes.len()}})
                })
                .collect();
            lines.push(
                json!({"type": "tool_call_response", "id": format!("t{t}"), "content": blocks})
                    .to_string(),
            );
        }
        let entries = parse_input(&lines.join("\n"), ParseMode::Strict { now })
            .expect("input")
            .entries;
        w.append(entries).expect("append");
        w.close();
    }
    put_orphans(&store, shape.orphans);
    drop(store);
    sync_tree(root);
    let store = Store::open_dir(root, StoreOptions::default()).expect("open the store");
    (store, all)
}

/// Puts `count` loose objects that nothing references (the garbage of the
/// maintenance store).
pub fn put_orphans(store: &Store, count: usize) {
    for o in 0..count {
        store
            .blobs()
            .put(format!("unreferenced object {o}").as_bytes())
            .expect("put");
    }
}

/// `gc --dry-run` with no grace: marks every log, decides for every object,
/// removes nothing (so every run does the same work).
pub fn gc_dry_run(store: &Store) -> GcReport {
    jpstore_engine::gc::run(
        store,
        GcOptions {
            grace: Duration::ZERO,
            dry_run: true,
            ..GcOptions::default()
        },
        &mut |_| {},
    )
    .expect("gc")
}

/// `fsck` (with `--read-data` if `read_data`); asserts the store is clean.
pub fn fsck(store: &Store, read_data: bool) -> FsckReport {
    let r = jpstore_engine::fsck::run(
        store,
        FsckOptions {
            read_data,
            repair: false,
        },
        &mut |_| {},
    )
    .expect("fsck");
    assert!(r.is_clean(), "fsck of a generated store is clean");
    r
}

/// The metadata floor of gc: read every file of the store but blob content
/// (logs, head caches, pack indexes, config) and stat every file, pack
/// files and loose objects included. Returns (files, bytes read).
pub fn read_metadata(dir: &Path) -> (usize, u64) {
    let files = super::files_below(dir);
    let mut bytes = 0;
    for p in &files {
        std::hint::black_box(std::fs::symlink_metadata(p).expect("stat"));
        let content = p.extension().is_some_and(|x| x == "pack")
            || p.parent()
                .and_then(Path::parent)
                .is_some_and(|g| g.ends_with("objects"));
        if !content {
            bytes += std::fs::read(p).expect("read a store file").len() as u64;
        }
    }
    (files.len(), bytes)
}

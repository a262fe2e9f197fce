//! The same operations on JP's `FsStorageBackend` and on `JpStoreBackend`
//! give the same observable results: streams and metadata by JP's own
//! `PartialEq`, the index of both partitions, expired ids, errors by kind.
//! Sequences of operations are generated (proptest): writes that grow a
//! stream, config deltas, compactions added and removed, turns retained,
//! `sanitize`, title and pin changes, archive and unarchive, expiry, and
//! the backend reopened (its memory of streams lost).

use crate::common;

use jp_conversation::{Compaction, Conversation, ConversationId, ConversationStream};
use jp_storage::backend::{
    ConversationFilter, FsStorageBackend, LoadBackend, PersistBackend, Projection,
};
use jpstore_jp::JpStoreBackend;
use proptest::prelude::*;
use serde_json::json;

/// One operation on one conversation.
#[derive(Debug, Clone)]
enum Op {
    /// Turns added, then a write.
    Grow(usize),
    /// A config delta, then a write.
    Delta,
    /// A compaction of the first turn, then a write.
    Compact,
    /// Every compaction removed (history changed), then a write.
    Uncompact,
    /// Only the last `n` turns kept (history changed), then a write.
    RetainLast(usize),
    /// JP's `sanitize`, then a write.
    Sanitize,
    /// Another title, then a write.
    Retitle,
    /// Pinned or unpinned, then a write.
    Pin,
    /// An expiry in the past, then a write.
    Expire,
    /// Archived, or unarchived when archived.
    Archive,
    /// The backend opened again (what it remembered of streams lost).
    Reopen,
    /// Written again as it is.
    Rewrite,
    /// An answer added to the last turn, then a write.
    Answer,
    /// A compaction of every turn, the last one too, then a write.
    CompactAll,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (1usize..3).prop_map(Op::Grow),
        1 => Just(Op::Delta),
        1 => Just(Op::Compact),
        1 => Just(Op::Uncompact),
        1 => (1usize..4).prop_map(Op::RetainLast),
        1 => Just(Op::Sanitize),
        1 => Just(Op::Retitle),
        1 => Just(Op::Pin),
        1 => Just(Op::Expire),
        1 => Just(Op::Archive),
        1 => Just(Op::Reopen),
        1 => Just(Op::Rewrite),
    ]
}

/// Both backends, and the conversation as JP holds it in memory.
struct Both {
    dir: tempfile::TempDir,
    fs: FsStorageBackend,
    ours: JpStoreBackend,
    id: ConversationId,
    meta: Conversation,
    stream: ConversationStream,
    turns: usize,
    archived: bool,
}

impl Both {
    fn new() -> Both {
        let dir = tempfile::tempdir().expect("tempdir");
        let fs = common::fs_backend(&dir.path().join("fs"));
        let ours = JpStoreBackend::open(dir.path().join("store").to_str().expect("utf-8"))
            .expect("store")
            .with_workspace(dir.path().join("ws"));
        Both {
            dir,
            fs,
            ours,
            id: common::id(7),
            meta: common::metadata(Some("first")),
            stream: common::stream(1, "d"),
            turns: 1,
            archived: false,
        }
    }

    fn write(&self) {
        let a = self
            .fs
            .write(&self.id, &self.meta, &self.stream, Projection::Projected);
        let b = self
            .ours
            .write(&self.id, &self.meta, &self.stream, Projection::Projected);
        assert_eq!(a.is_ok(), b.is_ok(), "write: {a:?} {b:?}");
    }

    fn apply(&mut self, op: &Op) {
        match op {
            Op::Grow(n) => {
                for _ in 0..*n {
                    common::add_turn(&mut self.stream, self.turns, "d");
                    self.turns += 1;
                }
            }
            Op::Delta => self.stream.add_config_delta(common::delta(json!({
                "assistant": {"system_prompt": {"value": format!("turn {}", self.turns),
                    "strategy": "append", "separator": "line"}}
            }))),
            Op::Compact => {
                let mut c = Compaction::new(0, 0);
                c.reasoning = Some(jp_conversation::compaction::ReasoningPolicy::Strip);
                self.stream.add_compaction(c);
            }
            Op::Uncompact => {
                self.stream.remove_compactions();
            }
            Op::RetainLast(n) => self.stream.retain_last_turns(*n),
            Op::Sanitize => self.stream.sanitize(),
            Op::Retitle => self.meta.title = Some(format!("title after {} turns", self.turns)),
            Op::Pin => {
                self.meta.pinned_at = match self.meta.pinned_at {
                    Some(_) => None,
                    None => Some(chrono::Utc::now()),
                }
            }
            Op::Expire => {
                self.meta.expires_at = Some(chrono::Utc::now() - chrono::Duration::hours(1))
            }
            Op::Archive => {
                let (a, b) = if self.archived {
                    (self.fs.unarchive(&self.id), self.ours.unarchive(&self.id))
                } else {
                    (self.fs.archive(&self.id), self.ours.archive(&self.id))
                };
                assert_eq!(a.is_ok(), b.is_ok(), "archive: {a:?} {b:?}");
                if a.is_ok() {
                    self.archived = !self.archived;
                }
                return;
            }
            Op::Reopen => {
                self.ours =
                    JpStoreBackend::open(self.dir.path().join("store").to_str().expect("utf-8"))
                        .expect("store")
                        .with_workspace(self.dir.path().join("ws"));
                return;
            }
            Op::Rewrite => {}
            Op::Answer => {
                self.stream
                    .current_turn_mut()
                    .add_chat_response(jp_conversation::event::ChatResponse::message(format!(
                        "more on turn {}",
                        self.turns
                    )))
                    .build()
                    .expect("an answer");
            }
            Op::CompactAll => {
                let mut c = Compaction::new(0, self.turns.saturating_sub(1));
                c.reasoning = Some(jp_conversation::compaction::ReasoningPolicy::Strip);
                self.stream.add_compaction(c);
            }
        }
        if !self.archived {
            self.write();
        }
    }

    /// The stream a backend opened now loads (the stream this one keeps
    /// for its next write untouched) is the one JP's backend loads.
    fn check_stream_from_a_new_backend(&self, after: &Op) {
        let other = JpStoreBackend::open(self.dir.path().join("store").to_str().expect("utf-8"))
            .expect("store");
        let a = self
            .fs
            .load_conversation_stream(&self.id)
            .map_err(|e| e.kind().is_missing());
        let b = other
            .load_conversation_stream(&self.id)
            .map_err(|e| e.kind().is_missing());
        assert_eq!(a, b, "stream after {after:?}");
    }

    /// Whether the store kept a replaced log (a write changed history).
    fn rewritten(&self) -> bool {
        self.dir
            .path()
            .join("store/quarantine/conversations")
            .exists()
    }

    /// Everything JP can observe, equal on both.
    fn check(&self, after: &Op) {
        for archived in [false, true] {
            let filter = ConversationFilter { archived };
            assert_eq!(
                self.fs.load_conversation_ids(filter),
                self.ours.load_conversation_ids(filter),
                "ids (archived: {archived}) after {after:?}"
            );
        }
        let a = self
            .fs
            .load_conversation_metadata(&self.id)
            .map_err(|e| e.kind().is_missing());
        let b = self
            .ours
            .load_conversation_metadata(&self.id)
            .map_err(|e| e.kind().is_missing());
        assert_eq!(a, b, "metadata after {after:?}");
        let ids = self.fs.load_conversation_ids(ConversationFilter::default());
        let batch = |x: &dyn LoadBackend| -> Vec<_> {
            x.load_conversation_metadata_batch(&ids)
                .into_iter()
                .map(|(id, m)| (id, m.ok()))
                .collect()
        };
        assert_eq!(
            batch(&self.fs),
            batch(&self.ours),
            "metadata batch after {after:?}"
        );
        let a = self
            .fs
            .load_conversation_stream(&self.id)
            .map_err(|e| e.kind().is_missing());
        let b = self
            .ours
            .load_conversation_stream(&self.id)
            .map_err(|e| e.kind().is_missing());
        assert_eq!(a, b, "stream after {after:?}");
        let now = chrono::Utc::now();
        assert_eq!(
            self.fs.load_expired_conversation_ids(now),
            self.ours.load_expired_conversation_ids(now),
            "expired after {after:?}"
        );
        // The workspace projection holds the files JP's backend writes.
        let conversations =
            |root: &str| files_below(&self.dir.path().join(root).join(".jp/conversations"));
        assert_eq!(
            conversations("fs"),
            conversations("ws"),
            "workspace files after {after:?}"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn operations_give_what_jps_file_backend_gives(ops in prop::collection::vec(op(), 1..10)) {
        let mut both = Both::new();
        both.write();
        both.check(&Op::Rewrite);
        for op in &ops {
            both.apply(op);
            both.check(op);
        }
    }
}

/// What JP does between two loads: writes of one stream after another.
fn written_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (1usize..3).prop_map(Op::Grow),
        2 => Just(Op::Answer),
        2 => Just(Op::Delta),
        1 => Just(Op::Compact),
        1 => Just(Op::CompactAll),
        1 => Just(Op::Uncompact),
        1 => (1usize..4).prop_map(Op::RetainLast),
        1 => Just(Op::Sanitize),
        1 => Just(Op::Retitle),
        1 => Just(Op::Rewrite),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Writes one after another, each compared with the stream the backend
    /// kept from the last (never loaded in between), store what JP's
    /// backend stores; appended, never rewritten, unless one changed the
    /// history.
    #[test]
    fn writes_one_after_another_give_what_jps_file_backend_gives(
        ops in prop::collection::vec(written_op(), 1..12),
    ) {
        let mut both = Both::new();
        both.write();
        let mut history_changed = false;
        for op in &ops {
            history_changed |= matches!(op, Op::Uncompact | Op::RetainLast(_) | Op::Sanitize);
            both.apply(op);
            both.check_stream_from_a_new_backend(op);
            prop_assert!(history_changed || !both.rewritten(), "rewritten after {:?}", op);
        }
        both.apply(&Op::Reopen);
        both.check(&Op::Reopen);
    }
}

#[test]
fn config_deltas_compactions_and_answers_in_a_compacted_turn_are_appended() {
    let mut both = Both::new();
    both.write();
    let log = both
        .dir
        .path()
        .join("store/conversations/17738400007/events.log");
    for op in [
        Op::Grow(2),
        Op::Delta,
        Op::Grow(1),
        Op::Delta,
        Op::Answer,
        // A compaction reaching into the last turn, which the next answer
        // continues: taking that answer off the stream kept would take the
        // compaction with it.
        Op::CompactAll,
        Op::Delta,
        Op::Answer,
        Op::Answer,
        Op::Compact,
        Op::Grow(1),
    ] {
        let before = std::fs::read(&log).expect("log");
        both.apply(&op);
        let after = std::fs::read(&log).expect("log");
        assert!(
            after.len() > before.len() && after.starts_with(&before),
            "{op:?}: appended to the log"
        );
        assert!(!both.rewritten(), "{op:?}: rewritten");
        both.check_stream_from_a_new_backend(&op);
    }
    both.apply(&Op::Reopen);
    both.check(&Op::Reopen);
}

#[test]
fn a_write_of_one_more_turn_appends_it_and_a_changed_history_keeps_the_old() {
    let mut both = Both::new();
    for _ in 0..4 {
        both.apply(&Op::Grow(1));
    }
    let log = both
        .dir
        .path()
        .join("store/conversations/17738400007/events.log");
    let before = std::fs::metadata(&log).expect("log").len();
    both.apply(&Op::Grow(1));
    let grown = std::fs::metadata(&log).expect("log").len() - before;
    // One turn's events and a metadata record, not the conversation again.
    assert!(grown > 0 && grown < before / 3, "grew {grown} of {before}");
    both.check(&Op::Grow(1));
    let quarantine = both.dir.path().join("store/quarantine/conversations");
    assert!(!quarantine.exists());
    both.apply(&Op::RetainLast(2));
    both.check(&Op::RetainLast(2));
    let kept: Vec<_> = std::fs::read_dir(&quarantine)
        .expect("the replaced log kept")
        .collect();
    assert_eq!(kept.len(), 1);
}

/// Every file below `dir` (relative name and bytes), sorted.
fn files_below(dir: &std::path::Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
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
    out
}

/// A turn whose texts, tool arguments and event metadata hold `values`
/// and `text`.
fn add_odd_turn(s: &mut ConversationStream, text: &str, values: &[(&str, serde_json::Value)]) {
    use jp_conversation::event::{ChatRequest, ChatResponse, ToolCallRequest, ToolCallResponse};
    use jp_conversation::ConversationEvent;
    s.start_turn(ChatRequest {
        content: text.to_owned(),
        schema: None,
        author: None,
    });
    let args: serde_json::Map<String, serde_json::Value> = values
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.clone()))
        .collect();
    let mut reasoning = ConversationEvent::now(ChatResponse::reasoning(text.to_owned()));
    for (k, v) in values {
        reasoning = reasoning.with_metadata_field(*k, v.clone());
    }
    let call = format!("call_{}", s.len());
    s.current_turn_mut()
        .add_event(reasoning)
        .add_tool_call_request(ToolCallRequest::new(call.clone(), "tool".into(), args))
        .add_tool_call_response(ToolCallResponse {
            id: call,
            result: Ok(text.to_owned()),
        })
        .add_chat_response(ChatResponse::message(text.to_owned()))
        .build()
        .expect("a turn");
}

/// `[[…[1]…]]`, `depth` arrays deep.
fn nested(depth: usize) -> serde_json::Value {
    (0..depth).fold(json!(1), |v, _| json!([v]))
}

#[test]
fn odd_values_read_back_as_jps_files_hold_them() {
    let mut both = Both::new();
    both.write();
    let odd = [
        ("negative_zero", json!(-0.0)),
        ("large", json!(1e300)),
        ("smallest", json!(5e-324)),
        ("u64_max", json!(u64::MAX)),
        ("i64_min", json!(i64::MIN)),
        ("tenth", json!(0.1)),
        ("", json!("an empty key")),
        (
            "controls",
            json!("nul \u{0} unit \u{1f} del \u{7f} separators \u{2028}\u{2029}"),
        ),
        (
            "base64_looking",
            json!("aGVsbG8gd29ybGQgaGVsbG8gd29ybGQgaGVsbG8gd29ybGQgaGVsbG8gd29ybGQgaGVsbG8="),
        ),
        ("deep", nested(100)),
    ];
    let texts = [
        "nul \u{0} and \u{2028}, a crab 🦀 and \"quotes\"".to_owned(),
        "aGVsbG8gd29ybGQgaGVsbG8gd29ybGQgaGVsbG8gd29ybGQgaGVsbG8gd29ybGQgaGVsbG8=".to_owned(),
        String::new(),
        "a line of a MiB ".repeat(1 << 16),
    ];
    for (n, text) in texts.iter().enumerate() {
        add_odd_turn(&mut both.stream, text, &odd);
        both.turns += 1;
        both.write();
        assert!(!both.rewritten(), "text {n}: appended");
        both.check(&Op::Grow(1));
        both.check_stream_from_a_new_backend(&Op::Grow(1));
    }
    // Deeper than JP's JSON reader goes (serde_json's limit of 128): JP
    // writes files it cannot load again; the store refuses the write and
    // keeps the conversation as it was.
    let before = both.stream.clone();
    add_odd_turn(&mut both.stream, "deep", &[("deep", nested(130))]);
    let ours = both
        .ours
        .write(&both.id, &both.meta, &both.stream, Projection::Projected);
    let e = ours.expect_err("a value JP cannot read back refused");
    let cause = std::error::Error::source(&e).map(ToString::to_string);
    assert!(
        cause
            .as_deref()
            .is_some_and(|c| c.contains("recursion limit")),
        "{e}: {cause:?}"
    );
    let fs = both
        .fs
        .write(&both.id, &both.meta, &both.stream, Projection::Projected);
    assert!(fs.is_ok(), "JP's file backend writes it: {fs:?}");
    assert!(
        both.fs.load_conversation_stream(&both.id).is_err(),
        "and cannot load it"
    );
    let kept = JpStoreBackend::open(both.dir.path().join("store").to_str().expect("utf-8"))
        .expect("store")
        .load_conversation_stream(&both.id)
        .expect("loads");
    assert!(
        kept == before.with_created_at(kept.created_at),
        "the store keeps the conversation as it was"
    );
}

/// Removing an archived conversation takes its workspace files with it.
/// (JP's file backend removes a conversation from its live directory
/// only: an archived one stays in its archive, files and all, where JP's
/// in-memory backend and the store remove it; so only the store's side is
/// checked here.)
#[test]
fn removing_an_archived_conversation_removes_its_workspace_files() {
    let both = Both::new();
    both.write();
    let other = common::id(8);
    let other_stream = common::stream(2, "o");
    let other_meta = common::metadata(Some("other"));
    let written = |b: &dyn PersistBackend| {
        b.write(&other, &other_meta, &other_stream, Projection::Projected)
            .expect("a write");
        b.archive(&both.id).expect("archived");
    };
    written(&both.fs);
    written(&both.ours);
    let conversations =
        |root: &str| files_below(&both.dir.path().join(root).join(".jp/conversations"));
    let archived = conversations("ws");
    assert!(conversations("fs") == archived, "archived as JP does");
    assert!(
        archived.iter().any(|(p, _)| p.starts_with(".archive")),
        "an archive partition in the workspace"
    );
    both.ours.remove(&both.id).expect("removed");
    let left = conversations("ws");
    let dirname = both.id.to_dirname(Some("first"));
    assert!(
        left.iter()
            .all(|(p, _)| !p.to_string_lossy().contains(&dirname)),
        "no file of the removed conversation left: {left:?}"
    );
    let names = |files: &[(std::path::PathBuf, Vec<u8>)]| -> Vec<std::path::PathBuf> {
        files.iter().map(|(p, _)| p.clone()).collect()
    };
    let expected: Vec<_> = archived
        .into_iter()
        .filter(|(p, _)| !p.starts_with(".archive"))
        .collect();
    assert!(
        left == expected,
        "the other conversation's files as they were: {:?}, not {:?}",
        names(&left),
        names(&expected)
    );
}

//! Upgrading a version 1 log: the same conversation after, the version 1
//! log kept, dry runs writing nothing, version 2 logs left as they are,
//! damage refused, a torn tail cut first, appends after.

use std::path::Path;

use serde_json::json;

use crate::conversation::ConversationId;
use crate::event::input::entries_at;
use crate::event::{Entry, Object, Payload};
use crate::export::ContentMode;
use crate::log::Framing;
use crate::timestamp::Timestamp;
use crate::{NewConversation, Store, StoreOptions};

fn events(text: &str) -> Vec<Entry<Payload>> {
    entries_at(text, Timestamp::from_unix(1_780_000_000, 0).expect("time"))
}

fn store(dir: &Path, framing: Framing) -> Store {
    let options = StoreOptions {
        new_log_framing: framing,
        ..StoreOptions::default()
    };
    Store::init_dir(dir, options).expect("init")
}

/// A version 1 conversation of a few batches, one of them large (packed),
/// with a signature, a compaction and a metadata change.
fn v1_conversation(store: &Store) -> ConversationId {
    let id = ConversationId::parse("old").expect("id");
    store
        .create(NewConversation {
            id: Some(id.clone()),
            title: Some("old one".into()),
            base_config: Some(Object::new()),
            ..NewConversation::default()
        })
        .expect("create")
        .close();
    let mut w = store.writer(&id).expect("writer");
    let signature = "QUJD".repeat(30);
    w.append(events(&format!(
        "{}\n{}\n{}\n",
        json!({"type": "turn_start"}),
        json!({"type": "chat_request", "content": "why?", "resources": [{"uri": "file:///a", "text": "A".repeat(500)}]}),
        json!({"type": "chat_response", "reasoning": "hmm", "metadata": {"signature": signature}}),
    )))
    .expect("append");
    let long: String = (0..3000)
        .map(|i| {
            format!(
                "{}\n",
                json!({"type": "chat_response", "message": format!("line {i} of a long answer")})
            )
        })
        .collect();
    w.append(events(&long)).expect("a long append");
    w.append(events(
        &json!({"type": "compaction", "from_turn": 0, "to_turn": 0, "reasoning": "strip"})
            .to_string(),
    ))
    .expect("compaction");
    w.set_metadata(crate::conversation::meta::MetaPatch {
        base_config: None,
        fields: [("title".to_string(), json!("renamed"))]
            .into_iter()
            .collect(),
    })
    .expect("metadata");
    drop(w);
    id
}

fn log_bytes(dir: &Path, id: &ConversationId) -> Vec<u8> {
    std::fs::read(dir.join(id.log_path())).expect("read log")
}

#[test]
fn a_v1_log_becomes_v2_with_the_same_conversation_and_is_kept() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = store(dir.path(), Framing::V1);
    let id = v1_conversation(&store);
    let old = log_bytes(dir.path(), &id);
    assert_eq!(u16::from_le_bytes([old[8], old[9]]), 1);
    let before = store.read(&id).expect("read");
    let view_before = store
        .open_view(&id)
        .expect("view")
        .render(ContentMode::Inline)
        .expect("render");

    // A dry run writes nothing.
    let snapshot = |p: &Path| -> Vec<(String, Vec<u8>)> {
        let mut out = Vec::new();
        let mut stack = vec![p.to_path_buf()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).expect("ls").flatten() {
                let path = e.path();
                if path.is_dir() {
                    stack.push(path);
                } else {
                    out.push((
                        path.display().to_string(),
                        std::fs::read(&path).expect("read"),
                    ));
                }
            }
        }
        out.sort();
        out
    };
    let tree = snapshot(dir.path());
    let dry = store.upgrade_log(&id, true).expect("dry run");
    assert!(dry.upgraded && dry.dry_run && dry.kept.is_none(), "{dry:?}");
    assert_eq!(dry.old_bytes, old.len() as u64);
    assert_eq!(snapshot(dir.path()), tree, "a dry run changed the store");

    let report = store.upgrade_log(&id, false).expect("upgrade");
    assert!(report.upgraded && !report.dry_run, "{report:?}");
    assert_eq!((report.records, report.entries), (dry.records, dry.entries));
    assert_eq!(report.new_bytes, dry.new_bytes);
    let new = log_bytes(dir.path(), &id);
    assert_eq!(u16::from_le_bytes([new[8], new[9]]), 2);
    assert_eq!(new.len() as u64, report.new_bytes);
    // The version 1 log is kept whole, where gc marks quarantined logs.
    let kept = report.kept.expect("kept");
    assert!(kept.starts_with("quarantine/conversations"), "{kept:?}");
    assert_eq!(
        std::fs::read(dir.path().join(&kept).join("events.log")).expect("kept log"),
        old
    );
    assert!(dir.path().join(&kept).join("NOTE").exists());

    // The same conversation, read, viewed and listed.
    let after = store.read(&id).expect("read");
    assert_eq!(after.entries, before.entries);
    assert_eq!(after.state, before.state);
    assert_eq!(after.state.metadata.title(), Some("renamed"));
    let view_after = store
        .open_view(&id)
        .expect("view")
        .render(ContentMode::Inline)
        .expect("render");
    assert_eq!(view_after, view_before);
    // Its head covers the new log (the whole log is proven whole).
    let head = crate::conversation::head::load(&**store.backend(), &id).expect("a trusted head");
    assert_eq!(head.log_end, new.len() as u64);
    assert_eq!(
        crate::conversation::head::proven_end(&**store.backend(), &id),
        head.log_end
    );
    let listed = store.list().expect("list");
    assert_eq!(listed[0].state, after.state);

    // Appends continue in version 2; a second upgrade changes nothing.
    let mut w = store.writer(&id).expect("writer");
    assert_eq!(w.log_format().framing, Framing::V2);
    w.append(events(
        &json!({"type": "chat_response", "message": "after"}).to_string(),
    ))
    .expect("append");
    drop(w);
    assert_eq!(
        store.read(&id).expect("read").entries.len(),
        before.entries.len() + 1
    );
    let again = store.upgrade_log(&id, false).expect("again");
    assert!(!again.upgraded && again.from_version == 2, "{again:?}");
    let report = store.fsck(Default::default(), &mut |_| {}).expect("fsck");
    assert!(
        report
            .findings
            .iter()
            .all(|f| f.severity != crate::fsck::Severity::Damage),
        "{:?}",
        report.findings
    );
    // gc keeps what both logs reference.
    let gc = store
        .gc(
            crate::gc::GcOptions {
                grace: std::time::Duration::ZERO,
                ..Default::default()
            },
            &mut |_| {},
        )
        .expect("gc");
    let _ = gc;
    assert!(store
        .open_view(&id)
        .expect("view")
        .render(ContentMode::Inline)
        .is_ok());
}

#[test]
fn damage_refuses_the_upgrade_and_a_torn_tail_is_cut_first() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = store(dir.path(), Framing::V1);
    let id = v1_conversation(&store);
    let path = dir.path().join(id.log_path());
    let good = std::fs::read(&path).expect("read");
    // A flipped byte in the first record (proven whole by the head).
    let mut bad = good.clone();
    bad[40] ^= 0x20;
    std::fs::write(&path, &bad).expect("write");
    for dry_run in [true, false] {
        let err = store
            .upgrade_log(&id, dry_run)
            .expect_err("damage upgraded");
        assert!(
            matches!(&err, super::UpgradeError::Store(e) if e.is_corruption()),
            "{err}"
        );
        assert_eq!(std::fs::read(&path).expect("read"), bad, "the log changed");
    }
    // A torn tail (no head covers it) is copied aside and cut, then the log
    // is upgraded.
    std::fs::write(&path, &good).expect("write");
    std::fs::remove_file(dir.path().join(id.dir()).join("head")).expect("rm head");
    let mut torn = good.clone();
    torn.extend_from_slice(&[7u8; 9]);
    std::fs::write(&path, &torn).expect("write");
    let report = store.upgrade_log(&id, false).expect("upgrade");
    let cut = report.cut_tail.expect("the tail was cut");
    assert_eq!((cut.offset, cut.len), (good.len() as u64, 9));
    assert_eq!(report.old_bytes, good.len() as u64);
    assert_eq!(store.read(&id).expect("read").entries.len(), 3 + 3000 + 1);
}

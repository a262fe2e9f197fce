//! JP's expectations of every storage backend (those of JP's own
//! `jp_storage/tests/backend_parity_tests.rs`, written here anew) met by
//! `JpStoreBackend` as by JP's `FsStorageBackend` and
//! `InMemoryStorageBackend`: each check runs against all three, and against
//! a `JpStoreBackend` over a store on S3 (SeaweedFS).

use crate::common;

use std::sync::Arc;

use chrono::{TimeZone as _, Utc};
use jp_conversation::{Conversation, ConversationId, ConversationStream};
use jp_storage::backend::{
    ConversationFilter, FsStorageBackend, InMemoryStorageBackend, LoadBackend, LockBackend,
    PersistBackend, Projection, SessionBackend,
};
use jpstore_jp::JpStoreBackend;

trait Bundle: PersistBackend + LoadBackend + LockBackend + SessionBackend {}
impl<T: PersistBackend + LoadBackend + LockBackend + SessionBackend> Bundle for T {}

/// Runs `check` against JP's file and memory backends and a
/// `JpStoreBackend` over a new store, naming the one that fails.
fn on_every_backend(check: impl Fn(&dyn Bundle)) {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = camino::Utf8PathBuf::from_path_buf(dir.path().join("fs")).expect("utf-8");
    let fs = FsStorageBackend::new(&root)
        .and_then(|b| b.with_user_storage(&root, None, "parity"))
        .expect("JP's file backend");
    let mut backends: Vec<(&str, Arc<dyn Bundle>)> = vec![
        ("fs", Arc::new(fs)),
        ("memory", Arc::new(InMemoryStorageBackend::new())),
        (
            "jp-store",
            Arc::new(
                JpStoreBackend::open(dir.path().join("store").to_str().expect("utf-8"))
                    .expect("a store"),
            ),
        ),
    ];
    // And over a store on S3 (SeaweedFS), where the locks are leases.
    if let Some(location) = common::s3_location("jp_backend_parity") {
        let lease = jpstore_jp::DEFAULT_LEASE;
        let s3 = common::s3_backend(&location, &dir.path().join("cache"), lease);
        backends.push(("jp-store on S3", Arc::new(s3)));
    }
    for (name, backend) in backends {
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(&*backend)));
        if let Err(panic) = run {
            eprintln!("on the {name} backend:");
            std::panic::resume_unwind(panic);
        }
    }
}

fn id(secs: i64) -> ConversationId {
    ConversationId::try_from(Utc.timestamp_opt(secs, 0).single().expect("time")).expect("id")
}

fn stream() -> ConversationStream {
    common::stream(2, "p")
}

#[test]
fn write_then_load_metadata_and_stream() {
    on_every_backend(|b| {
        let meta = Conversation {
            title: Some("hello".into()),
            ..Default::default()
        };
        let s = stream();
        b.write(&id(1_000_000), &meta, &s, Projection::Projected)
            .expect("write");
        let loaded = b
            .load_conversation_metadata(&id(1_000_000))
            .expect("metadata");
        assert_eq!(loaded.title.as_deref(), Some("hello"));
        // JP's file backend gives a stream the time of its id.
        let at = id(1_000_000).timestamp();
        assert_eq!(
            b.load_conversation_stream(&id(1_000_000))
                .expect("stream")
                .with_created_at(at),
            s.with_created_at(at)
        );
    });
}

#[test]
fn remove_then_load_fails_and_removing_nothing_is_ok() {
    on_every_backend(|b| {
        let i = id(1_000_000);
        b.write(
            &i,
            &Conversation::default(),
            &stream(),
            Projection::Projected,
        )
        .expect("write");
        b.remove(&i).expect("remove");
        assert!(b.load_conversation_metadata(&i).is_err());
        assert!(b.load_conversation_stream(&i).is_err());
        b.remove(&id(2_000_000)).expect("removing nothing");
    });
}

#[test]
fn missing_conversations_do_not_load() {
    on_every_backend(|b| {
        let e = b
            .load_conversation_metadata(&id(1_000_000))
            .expect_err("no metadata");
        assert!(e.kind().is_missing(), "{e:?}");
        let e = b
            .load_conversation_stream(&id(1_000_000))
            .expect_err("no stream");
        assert!(e.kind().is_missing(), "{e:?}");
        assert!(b
            .load_conversation_ids(ConversationFilter::default())
            .is_empty());
        assert!(b
            .load_conversation_ids(ConversationFilter { archived: true })
            .is_empty());
    });
}

#[test]
fn ids_are_those_written_in_order() {
    on_every_backend(|b| {
        for secs in [3_000_000, 1_000_000, 2_000_000] {
            b.write(
                &id(secs),
                &Conversation::default(),
                &stream(),
                Projection::Projected,
            )
            .expect("write");
        }
        assert_eq!(
            b.load_conversation_ids(ConversationFilter::default()),
            [id(1_000_000), id(2_000_000), id(3_000_000)]
        );
    });
}

#[test]
fn archive_and_unarchive_move_between_partitions() {
    on_every_backend(|b| {
        let i = id(1_000_000);
        b.write(
            &i,
            &Conversation::default(),
            &stream(),
            Projection::Projected,
        )
        .expect("write");
        b.archive(&i).expect("archive");
        assert!(b
            .load_conversation_ids(ConversationFilter::default())
            .is_empty());
        assert_eq!(
            b.load_conversation_ids(ConversationFilter { archived: true }),
            [i]
        );
        assert_eq!(
            b.load_conversation_metadata(&i).expect("metadata").title,
            None
        );
        b.unarchive(&i).expect("unarchive");
        assert_eq!(b.load_conversation_ids(ConversationFilter::default()), [i]);
        assert!(b
            .load_conversation_ids(ConversationFilter { archived: true })
            .is_empty());
        assert!(b.archive(&id(2_000_000)).is_err(), "nothing to archive");
        assert!(b.unarchive(&id(2_000_000)).is_err(), "nothing to unarchive");
    });
}

#[test]
fn expired_conversations_are_those_whose_time_has_passed() {
    on_every_backend(|b| {
        let past = Utc
            .with_ymd_and_hms(2020, 1, 1, 0, 0, 0)
            .single()
            .expect("time");
        let future = Utc::now() + chrono::Duration::hours(1);
        b.write(
            &id(1_000_000),
            &Conversation::default(),
            &stream(),
            Projection::Projected,
        )
        .expect("write");
        b.write(
            &id(2_000_000),
            &Conversation::default().with_ephemeral(Some(past)),
            &stream(),
            Projection::Projected,
        )
        .expect("write");
        b.write(
            &id(3_000_000),
            &Conversation::default().with_ephemeral(Some(future)),
            &stream(),
            Projection::Projected,
        )
        .expect("write");
        assert_eq!(b.load_expired_conversation_ids(Utc::now()), [id(2_000_000)]);
    });
}

#[test]
fn sanitize_of_a_sound_store_repairs_nothing() {
    on_every_backend(|b| {
        b.write(
            &id(1_000_000),
            &Conversation::default(),
            &stream(),
            Projection::Projected,
        )
        .expect("write");
        assert!(!b.sanitize().expect("sanitize").has_repairs());
    });
}

#[test]
fn a_lock_excludes_until_released_and_conversations_are_independent() {
    on_every_backend(|b| {
        let guard = b.try_lock("conv-1", Some("s1")).expect("lock");
        assert!(guard.is_some(), "first lock");
        assert!(
            b.try_lock("conv-1", None).expect("lock").is_none(),
            "second lock"
        );
        assert!(
            b.try_lock("conv-2", None).expect("lock").is_some(),
            "another conversation"
        );
        drop(guard);
        assert!(
            b.try_lock("conv-1", None).expect("lock").is_some(),
            "after release"
        );
    });
}

#[test]
fn sessions_round_trip_overwrite_and_list() {
    on_every_backend(|b| {
        assert!(b.load_session("nonexistent").expect("load").is_none());
        b.save_session("sess-1", &serde_json::json!({"conv": "abc"}))
            .expect("save");
        assert_eq!(
            b.load_session("sess-1").expect("load"),
            Some(serde_json::json!({"conv": "abc"}))
        );
        b.save_session("sess-1", &serde_json::json!("second"))
            .expect("save");
        assert_eq!(
            b.load_session("sess-1").expect("load"),
            Some(serde_json::json!("second"))
        );
        b.save_session("beta", &serde_json::json!(1)).expect("save");
        let mut keys = b.list_session_keys();
        keys.sort();
        assert_eq!(keys, ["beta", "sess-1"]);
    });
}

/// A conversation whose events are damaged is trashed whole by `sanitize`,
/// on JP's file backend (its `events.json` no longer JSON) as on the store
/// (a byte of its log's only record of events flipped): reported, gone
/// from the index, the others as they were; the store keeps the damaged
/// log whole in its quarantine. The store's fsck alone keeps the records
/// before the damage (here its metadata record) in the store: JP would
/// then list it without its events and never hear of the repair.
#[test]
fn sanitize_trashes_a_damaged_conversation_whole_and_reports_it() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let ids: Vec<ConversationId> = (0..3).map(common::id).collect();
    let fs = common::fs_backend(&tmp.path().join("ws"));
    let store_dir = tmp.path().join("store");
    let ours = JpStoreBackend::open(store_dir.to_str().expect("utf-8")).expect("store");
    for (n, id) in ids.iter().enumerate() {
        let s = common::stream(n + 2, "san");
        let meta = common::metadata(Some("sanitize"));
        fs.write(id, &meta, &s, Projection::Projected)
            .expect("write");
        ours.write(id, &meta, &s, Projection::Projected)
            .expect("write");
    }
    // JP's events.json of the second conversation cut in half.
    let events = tmp
        .path()
        .join("ws/.jp/conversations")
        .join(ids[1].to_dirname(Some("sanitize")))
        .join("events.json");
    let text = std::fs::read(&events).expect("events.json");
    std::fs::write(&events, &text[..text.len() / 2]).expect("damaged");
    // The store's log of it: a byte in the middle of its events.
    let log = store_dir.join(format!(
        "conversations/{}/events.log",
        ids[1].as_deciseconds()
    ));
    let mut bytes = std::fs::read(&log).expect("log");
    let middle = bytes.len() * 2 / 3;
    bytes[middle] ^= 0x55;
    std::fs::write(&log, &bytes).expect("damaged");

    let fs = common::fs_backend(&tmp.path().join("ws"));
    let ours = JpStoreBackend::open(store_dir.to_str().expect("utf-8")).expect("store");
    for b in [&fs as &dyn LoadBackend, &ours] {
        let report = b.sanitize().expect("sanitize");
        assert_eq!(report.trashed.len(), 1, "{report:?}");
        assert!(
            report.trashed[0]
                .dirname
                .starts_with(&ids[1].as_deciseconds().to_string()),
            "{report:?}"
        );
        assert_eq!(
            b.load_conversation_ids(ConversationFilter::default()),
            [ids[0], ids[2]],
            "the damaged conversation left the index"
        );
        for id in [ids[0], ids[2]] {
            b.load_conversation_stream(&id).expect("the others load");
        }
        assert!(!b.sanitize().expect("sanitize").has_repairs(), "done once");
    }
    // Nothing deleted: the damaged log is in the store's quarantine, whole.
    let quarantine = store_dir.join("quarantine/conversations");
    let kept: Vec<Vec<u8>> = std::fs::read_dir(&quarantine)
        .expect("quarantine")
        .flatten()
        .filter_map(|e| std::fs::read(e.path().join("events.log")).ok())
        .collect();
    assert_eq!(kept, [bytes], "the damaged log kept whole");
}

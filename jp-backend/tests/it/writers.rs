//! Two writers of one store: two backends on one directory (two
//! processes), and two machines sharing a store on S3 (SeaweedFS; two
//! clients, two cache directories). Each sees the other's conversations;
//! a write over the other's events is refused, nothing lost; on S3 a
//! conversation lock is a lease that excludes the other machine until it
//! is released or abandoned.

use crate::common;
use jpstore_engine::internal::StoreInterior as _;

use std::time::{Duration, Instant};

use jp_conversation::ConversationStream;
use jp_storage::backend::{
    ConversationFilter, LoadBackend, LockBackend, PersistBackend, Projection,
};
use jpstore_jp::{BackendError, JpStoreBackend};

/// The backend error inside JP's error, if there is one.
fn backend_error(e: &jp_storage::Error) -> Option<&BackendError> {
    match e {
        jp_storage::Error::Io(io) => io.get_ref()?.downcast_ref::<BackendError>(),
        _ => None,
    }
}

/// Whether `a` and `b` are the same stream, the time of creation aside
/// (a loaded stream has its conversation's, as JP's file backend gives).
fn same(a: &ConversationStream, b: &ConversationStream) -> bool {
    let at = common::id(7).timestamp();
    a.clone().with_created_at(at) == b.clone().with_created_at(at)
}

/// `a` and `b` on one store: what one writes the other loads; a write of
/// `a` made from what it read before `b` wrote is refused naming the
/// conflict, and `b`'s turn stays; `a` loads again and its turn follows.
fn writers_see_each_other_and_never_write_over_each_other(
    a: &JpStoreBackend,
    b: &JpStoreBackend,
    fresh: &dyn Fn() -> JpStoreBackend,
) {
    let id = common::id(7);
    let meta = common::metadata(Some("shared"));
    let base = common::stream(2, "a");
    a.write(&id, &meta, &base, Projection::Projected)
        .expect("a writes");
    assert!(b
        .load_conversation_ids(ConversationFilter::default())
        .contains(&id));
    let read_by_b = b.load_conversation_stream(&id).expect("b loads");
    assert!(same(&read_by_b, &base));
    let read_by_a = a.load_conversation_stream(&id).expect("a loads");

    let mut with_b = read_by_b.clone();
    common::add_turn(&mut with_b, 2, "b");
    b.write(&id, &meta, &with_b, Projection::Projected)
        .expect("b adds a turn");

    // `a` adds its turn to what it read before `b` wrote.
    let mut with_a = read_by_a.clone();
    common::add_turn(&mut with_a, 2, "a");
    let refused = a
        .write(&id, &meta, &with_a, Projection::Projected)
        .expect_err("a write over b's turn");
    assert!(
        matches!(backend_error(&refused), Some(BackendError::Conflict { .. })),
        "{refused:?}"
    );
    assert!(
        refused.to_string().contains("another writer")
            || format!("{refused:?}").contains("Conflict"),
        "{refused}"
    );
    assert!(
        same(
            &fresh().load_conversation_stream(&id).expect("load"),
            &with_b
        ),
        "b's turn is there, a's is not"
    );

    // `a` loads again, adds its turn after `b`'s: both stay.
    let mut both: ConversationStream = a.load_conversation_stream(&id).expect("a loads again");
    assert!(same(&both, &with_b));
    common::add_turn(&mut both, 3, "a");
    a.write(&id, &meta, &both, Projection::Projected)
        .expect("a adds its turn after b's");
    assert!(same(
        &fresh().load_conversation_stream(&id).expect("load"),
        &both
    ));

    // A history `a` changes after loading what is there is its to change.
    let mut trimmed = a.load_conversation_stream(&id).expect("load");
    let mut n = 0;
    trimmed.retain(|_| {
        n += 1;
        n <= 4
    });
    a.write(&id, &meta, &trimmed, Projection::Projected)
        .expect("a rewrites what it loaded");
    assert_eq!(
        fresh().load_conversation_stream(&id).expect("load"),
        trimmed
    );
}

#[test]
fn two_writers_on_one_directory_never_write_over_each_other() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let store = tmp.path().join("store");
    let open = || JpStoreBackend::open(store.to_str().expect("utf-8")).expect("store");
    writers_see_each_other_and_never_write_over_each_other(&open(), &open(), &open);
}

#[test]
fn two_machines_on_s3_see_each_other_and_never_write_over_each_other() {
    let Some(location) = common::s3_location("jp_two_machines") else {
        return;
    };
    let tmp = tempfile::tempdir().expect("tempdir");
    let lease = jpstore_jp::DEFAULT_LEASE;
    let a = common::s3_backend(&location, &tmp.path().join("cache-a"), lease);
    let b = common::s3_backend(&location, &tmp.path().join("cache-b"), lease);
    let n = std::cell::Cell::new(0);
    let fresh = || {
        n.set(n.get() + 1);
        common::s3_backend(
            &location,
            &tmp.path().join(format!("cache-{}", n.get())),
            lease,
        )
    };
    writers_see_each_other_and_never_write_over_each_other(&a, &b, &fresh);

    // Each machine's conversations in the other's index.
    let other = common::id(8);
    b.write(
        &other,
        &common::metadata(None),
        &common::stream(1, "b"),
        Projection::Projected,
    )
    .expect("b writes another");
    assert_eq!(
        a.load_conversation_ids(ConversationFilter::default()),
        vec![common::id(7), other],
        "a lists b's"
    );
}

/// Writes a lease at `conversation` as a holder that is gone left it, its
/// last renewal at `renewed_ms` by its clock.
fn abandoned_lease(backend: &JpStoreBackend, conversation: &str, renewed_ms: u64) {
    let body = serde_json::json!({
        "pid": 4_000_000,
        "acquired_at": "2026-01-01T00:00:00+00:00",
        "holder": "elsewhere:4000000:1",
        "renewed_ms": renewed_ms,
    });
    let key = std::path::Path::new("jp/locks").join(format!("{conversation}.lease"));
    let put = backend
        .store()
        .backend()
        .put_if_absent(
            &key,
            &serde_json::to_vec(&body).expect("json"),
            std::path::Path::new("jp/locks/tmp.test"),
        )
        .expect("put the lease");
    assert_eq!(put, jpstore_blobstore::backend::Put::Created);
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after the epoch")
        .as_millis() as u64
}

#[test]
fn a_lease_on_s3_excludes_another_machine_until_released_or_abandoned() {
    let Some(location) = common::s3_location("jp_leases") else {
        return;
    };
    let tmp = tempfile::tempdir().expect("tempdir");
    let lease = Duration::from_secs(4);
    let a = common::s3_backend(&location, &tmp.path().join("cache-a"), lease);
    let b = common::s3_backend(&location, &tmp.path().join("cache-b"), lease);
    let conv = common::id(1).to_string();

    let held = a
        .try_lock(&conv, Some("session-a"))
        .expect("try")
        .expect("a takes the lock");
    assert!(
        b.try_lock(&conv, None).expect("try").is_none(),
        "b is excluded"
    );
    let info = b.lock_info(&conv).expect("b sees who holds it");
    assert_eq!(info.pid, std::process::id());
    assert_eq!(info.session.as_deref(), Some("session-a"));
    assert!(b.list_orphaned_locks().is_empty());

    // A live holder renews its lease: b, trying for more than twice the
    // lease, never takes it.
    let trying = Instant::now();
    let mut tries = 0;
    while trying.elapsed() < lease * 2 + lease / 2 {
        assert!(
            b.try_lock(&conv, None).expect("try").is_none(),
            "b took a renewed lease after {:?}",
            trying.elapsed()
        );
        tries += 1;
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(tries > 10, "{tries}");

    drop(held);
    assert!(b.lock_info(&conv).is_none(), "released: the lease is gone");
    let by_b = b
        .try_lock(&conv, None)
        .expect("try")
        .expect("b takes it once released");
    assert!(a.try_lock(&conv, None).expect("try").is_none());
    drop(by_b);

    // Abandoned, by its holder's clock long ago: an orphan, taken at once.
    let old = common::id(2).to_string();
    abandoned_lease(&a, &old, now_ms() - 3_600_000);
    assert_eq!(b.list_orphaned_locks(), vec![common::id(2)]);
    let taken = b
        .try_lock(&old, None)
        .expect("try")
        .expect("an abandoned lease is taken over");
    assert_eq!(b.lock_info(&old).expect("info").pid, std::process::id());
    drop(taken);

    // Abandoned by a holder whose clock runs an hour ahead (never expired
    // by the clocks): taken once b has seen it unchanged for the lease.
    let ahead = common::id(3).to_string();
    abandoned_lease(&a, &ahead, now_ms() + 3_600_000);
    assert!(b.try_lock(&ahead, None).expect("try").is_none());
    assert!(b.list_orphaned_locks().is_empty());
    std::thread::sleep(lease + Duration::from_millis(200));
    let taken = b
        .try_lock(&ahead, None)
        .expect("try")
        .expect("a lease unchanged for its duration is taken over");
    drop(taken);
    assert!(b.lock_info(&ahead).is_none());
}

/// Two machines on S3 adding turns to one conversation at once, without
/// its lock (each loads, adds a turn, writes; loads again after a
/// conflict): every turn of both lands once, and the only refusals are
/// conflicts, never an append beaten to the log's end failing the write.
#[test]
fn two_machines_adding_turns_at_once_on_s3_lose_none() {
    let Some(location) = common::s3_location("jp_racing_writers") else {
        return;
    };
    let tmp = tempfile::tempdir().expect("tempdir");
    let lease = jpstore_jp::DEFAULT_LEASE;
    let id = common::id(9);
    let meta = common::metadata(Some("raced"));
    common::s3_backend(&location, &tmp.path().join("cache-0"), lease)
        .write(&id, &meta, &common::stream(0, "r"), Projection::Projected)
        .expect("the conversation");
    const TURNS: usize = 6;
    let writers: Vec<_> = ["a", "b"]
        .into_iter()
        .map(|who| {
            let backend =
                common::s3_backend(&location, &tmp.path().join(format!("cache-{who}")), lease);
            let meta = meta.clone();
            std::thread::spawn(move || {
                let (mut conflicts, mut others) = (0, Vec::new());
                let mut added = 0;
                while added < TURNS {
                    let mut s = backend.load_conversation_stream(&id).expect("load");
                    common::add_turn(&mut s, added, &format!("{who}{added}"));
                    match backend.write(&id, &meta, &s, Projection::Projected) {
                        Ok(()) => added += 1,
                        Err(e)
                            if matches!(backend_error(&e), Some(BackendError::Conflict { .. })) =>
                        {
                            conflicts += 1
                        }
                        Err(e) => {
                            others.push(e.to_string());
                            if others.len() > 3 {
                                break;
                            }
                        }
                    }
                }
                (conflicts, others)
            })
        })
        .collect();
    for w in writers {
        let (conflicts, others) = w.join().expect("a writer");
        assert!(
            others.is_empty(),
            "writes failed otherwise than by a conflict ({conflicts} conflicts): {others:?}"
        );
    }
    let stream = common::s3_backend(&location, &tmp.path().join("cache-z"), lease)
        .load_conversation_stream(&id)
        .expect("load");
    let requests: Vec<String> = stream
        .iter()
        .filter_map(|e| match &e.event.kind {
            jp_conversation::EventKind::ChatRequest(r) => Some(r.content.clone()),
            _ => None,
        })
        .collect();
    for who in ["a", "b"] {
        for t in 0..TURNS {
            let tag = format!("{who}{t}: question {t},");
            assert_eq!(
                requests.iter().filter(|c| c.starts_with(&tag)).count(),
                1,
                "turn {tag} once in {} requests",
                requests.len()
            );
        }
    }
}

/// A backend that never loaded a conversation writes a turn to it on S3,
/// and another machine appends first while its record is on the way (the
/// proxy holds that request): the write, tried again, is refused as a
/// conflict (the log moved since it was planned), and the other machine's
/// turn stays. Before, the second attempt took the stream it was handed,
/// which no longer follows the log, for JP's rewrite of its history, and
/// wrote it over the other turn (kept aside, not in the conversation).
#[test]
fn a_write_beaten_on_s3_by_a_turn_it_never_saw_is_refused_not_written_over_it() {
    use jpstore_tests::s3_fault_proxy::{Fault, FaultProxy, Rule};
    let Some(location) = common::s3_location("jp_unseen_turn") else {
        return;
    };
    let server = jpstore_remote::testing::server().expect("the server found before");
    let proxy = FaultProxy::start(&server.endpoint);
    let tmp = tempfile::tempdir().expect("tempdir");
    let lease = jpstore_jp::DEFAULT_LEASE;
    let id = common::id(11);
    let meta = common::metadata(Some("unseen"));
    let base = common::stream(1, "c");
    common::s3_backend(&location, &tmp.path().join("cache-c"), lease)
        .write(&id, &meta, &base, Projection::Projected)
        .expect("the conversation");
    let stored = common::s3_backend(&location, &tmp.path().join("cache-r"), lease)
        .load_conversation_stream(&id)
        .expect("load");
    let (mut with_a, mut with_b) = (stored.clone(), stored);
    common::add_turn(&mut with_a, 1, "a");
    common::add_turn(&mut with_b, 1, "b");

    // `b` has loaded nothing; its first record is held on the way.
    let b = common::s3_backend_via(
        &location,
        &tmp.path().join("cache-b"),
        lease,
        &proxy.endpoint(),
    );
    proxy.add(Rule::on(
        "PUT",
        "events.log.seg/",
        Fault::Delay(Duration::from_secs(4)),
    ));
    let writer_b = {
        let meta = meta.clone();
        std::thread::spawn(move || b.write(&id, &meta, &with_b, Projection::Projected))
    };
    while !proxy
        .seen()
        .iter()
        .any(|s| s.method == "PUT" && s.target.contains("events.log.seg/") && s.fault.is_some())
    {
        assert!(
            !writer_b.is_finished(),
            "b's write ended before its record reached the proxy: {:?}",
            proxy.seen()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // `a` appends its turn while `b`'s record waits.
    common::s3_backend(&location, &tmp.path().join("cache-a"), lease)
        .write(&id, &meta, &with_a, Projection::Projected)
        .expect("a adds its turn");

    let refused = writer_b
        .join()
        .expect("b's thread")
        .expect_err("b's write over a's turn");
    assert!(
        matches!(backend_error(&refused), Some(BackendError::Conflict { .. })),
        "{refused:?}"
    );
    let now = common::s3_backend(&location, &tmp.path().join("cache-z"), lease)
        .load_conversation_stream(&id)
        .expect("load");
    assert!(same(&now, &with_a), "a's turn is there, b's is not");
    assert!(
        proxy
            .seen()
            .iter()
            .any(|s| s.fault.is_some() && s.status == Some(412)),
        "b's held record was refused by the server: {:?}",
        proxy.seen()
    );
}

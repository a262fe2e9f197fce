//! gc on a store on S3 (format-spec.md 5.5) against a real server
//! (SeaweedFS, see `jpstore_remote::testing`): garbage goes and references
//! stay; a writer that saw a blob before gc moved it to the trash and
//! appends after gets it put back; a writer slower than the bound is
//! refused; a gc killed between its steps is finished by the next run.
//! Without a server the tests say they were skipped and why.
//!
//! The bound `B` and the request limit `T` are set to seconds here
//! (`JP_STORE_S3_WRITE_BOUND`, `JP_STORE_S3_REQUEST_TIMEOUT`,
//! `JP_STORE_S3_RETRY_TIMEOUT` for the command line; `ClientSettings` for the
//! library), the same for every process on a store, as the protocol asks.

use jpstore_engine::internal::{ConversationIdInterior as _, StoreInterior as _};
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use jpstore_blobstore::backend::{Backend, BackendError, LogObject, ObjectReader};
use jpstore_blobstore::BlobId;
use jpstore_engine::conversation::ConversationId;
use jpstore_engine::event::{Entry, Payload};
use jpstore_engine::gc::GcOptions;
use jpstore_engine::internal::event::json::{parse_entry, ParseMode};
use jpstore_engine::timestamp::Timestamp;
use jpstore_engine::{NewConversation, Store, StoreOptions};
use jpstore_remote::testing::{cache_dir, server_or_skip, TestServer};
use jpstore_remote::{ClientSettings, S3Location};
use jpstore_tests::hooked_backend::Hooked;
use jpstore_tests::{jp_store_bin, keys_below, output_of, stdout_of_success};

/// `B` of these tests.
const BOUND: Duration = Duration::from_secs(8);
/// Request and retry timeouts: `T` is their sum.
const TIMEOUT: Duration = Duration::from_secs(2);

fn settings() -> ClientSettings {
    ClientSettings {
        write_bound: BOUND,
        request_timeout: TIMEOUT,
        retry_timeout: TIMEOUT,
        ..ClientSettings::default()
    }
}

fn env(server: &TestServer) -> Vec<(&'static str, String)> {
    let mut env = server.env();
    env.push(("JP_STORE_S3_WRITE_BOUND", BOUND.as_secs().to_string()));
    env.push(("JP_STORE_S3_REQUEST_TIMEOUT", TIMEOUT.as_secs().to_string()));
    env.push(("JP_STORE_S3_RETRY_TIMEOUT", TIMEOUT.as_secs().to_string()));
    env
}

fn command(server: &TestServer, url: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(jp_store_bin());
    cmd.arg("--store").arg(url).args(args);
    for (k, v) in env(server) {
        cmd.env(k, v);
    }
    cmd.env_remove("JP_STORE_DIR");
    // Shared by this test process's commands, inside the cache directory
    // the test server's watcher removes once this process is gone (a
    // fixed name was left behind by every run).
    cmd.env("JP_STORE_CACHE_DIR", cache_dir().join("s3-gc"));
    cmd.stdin(Stdio::null());
    cmd
}

fn ok(server: &TestServer, url: &str, args: &[&str], stdin: &[u8]) -> String {
    stdout_of_success(output_of(&mut command(server, url, args), stdin), args)
}

fn store_of(backend: Arc<dyn Backend>) -> Store {
    Store::open(backend, StoreOptions::default()).expect("open the store on S3")
}

/// Entries from their JSON (the form `jp-store append` reads).
fn entries(values: serde_json::Value) -> Vec<Entry<Payload>> {
    values
        .as_array()
        .expect("an array")
        .iter()
        .map(|v| {
            parse_entry(
                v,
                ParseMode::Strict {
                    now: Timestamp::now(),
                },
            )
            .expect("a valid entry")
        })
        .collect()
}

/// A tool call `call` whose result is `content` (a string or a reference).
fn tool_call(call: &str, content: serde_json::Value) -> Vec<Entry<Payload>> {
    entries(serde_json::json!([
        {"type": "tool_call_request", "id": call, "name": "fs_read_file", "arguments": {"path": "a.rs"}},
        {"type": "tool_call_response", "id": call, "content": content},
    ]))
}

/// A backend that holds every log append for `delay` (after telling
/// `entered`), so that a writer's look at the blob store and its record
/// are far apart in time, as on a slow machine.
fn slow_appends(
    inner: Arc<dyn Backend>,
    delay: Duration,
    entered: Option<mpsc::Sender<()>>,
) -> Arc<dyn Backend> {
    Arc::new(Hooked::new(inner).wrapping_logs(move |log| {
        Box::new(SlowLog {
            inner: log,
            delay,
            entered: entered.clone(),
        })
    }))
}

#[derive(Debug)]
struct SlowLog {
    inner: Box<dyn LogObject>,
    delay: Duration,
    entered: Option<mpsc::Sender<()>>,
}

impl ObjectReader for SlowLog {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.inner.read_at(buf, offset)
    }
    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }
}

impl LogObject for SlowLog {
    fn as_reader(&self) -> &dyn ObjectReader {
        self
    }
    fn append(&self, at: u64, data: &[u8]) -> Result<(), BackendError> {
        if let Some(tx) = &self.entered {
            let _ = tx.send(());
        }
        std::thread::sleep(self.delay);
        self.inner.append(at, data)
    }
    fn truncate(&self, len: u64) -> Result<(), BackendError> {
        self.inner.truncate(len)
    }
    fn sync(&self) -> Result<(), BackendError> {
        self.inner.sync()
    }
}

/// A store on the server with one conversation whose tool result is a
/// blob, and a loose blob `garbage` nothing references.
struct Fixture {
    location: S3Location,
    id: String,
    garbage: BlobId,
    garbage_bytes: Vec<u8>,
}

fn fixture(server: &'static TestServer, name: &str) -> Fixture {
    let location = server.fresh(name);
    let url = location.to_string();
    ok(server, &url, &["init"], b"");
    let store = store_of(server.backend_with(location.clone(), settings()).shared());
    let kept = "kept content, referenced by the conversation ".repeat(200);
    let garbage_bytes = "garbage content, referenced by nothing "
        .repeat(200)
        .into_bytes();
    let mut w = store.create(NewConversation::default()).expect("create");
    let id = w.id().to_string();
    let mut first = entries(serde_json::json!([
        {"type": "turn_start"},
        {"type": "chat_request", "content": "read a.rs"},
    ]));
    first.extend(tool_call("c1", serde_json::json!(kept)));
    w.append(first).expect("append");
    drop(w);
    let garbage = store.blobs().put(&garbage_bytes).expect("put garbage").id;
    Fixture {
        location,
        id,
        garbage,
        garbage_bytes,
    }
}

fn gc_now() -> GcOptions {
    GcOptions {
        grace: Duration::ZERO,
        ..GcOptions::default()
    }
}

#[test]
fn gc_on_s3_removes_garbage_keeps_references_and_leaves_no_trash() {
    let Some(server) =
        server_or_skip("gc_on_s3_removes_garbage_keeps_references_and_leaves_no_trash")
    else {
        return;
    };
    let f = fixture(server, "gc-plain");
    let url = f.location.to_string();
    let started = Instant::now();
    let out = ok(server, &url, &["gc", "--grace", "0s", "--json"], b"");
    let report: serde_json::Value = serde_json::from_str(&out).expect("gc json");
    assert_eq!(report["loose_removed"], 1, "{report}");
    assert_eq!(report["restored"], 0, "{report}");
    // It waited B + T after moving the garbage to its trash.
    let wait = BOUND + TIMEOUT + TIMEOUT;
    assert!(
        report["waited_secs"].as_u64().expect("waited") >= wait.as_secs() - 1,
        "{report}"
    );
    assert!(started.elapsed() >= wait);
    let backend = server.backend_with(f.location.clone(), settings()).shared();
    let store = store_of(Arc::clone(&backend));
    assert!(
        !store.blobs().exists(&f.garbage).expect("exists"),
        "garbage went"
    );
    assert!(
        keys_below(&*backend, Path::new("gc")).is_empty(),
        "no lock and no trash left: {:?}",
        keys_below(&*backend, Path::new("gc"))
    );
    let fsck = ok(server, &url, &["fsck", "--read-data", "--json"], b"");
    let fsck: serde_json::Value = serde_json::from_str(&fsck).expect("fsck json");
    assert_eq!(fsck["clean"], true, "{fsck}");
    assert!(ok(server, &url, &["view", &f.id], b"").contains("kept content"));
}

#[test]
fn a_writer_that_saw_a_blob_before_gc_moved_it_gets_it_back() {
    let Some(server) = server_or_skip("a_writer_that_saw_a_blob_before_gc_moved_it_gets_it_back")
    else {
        return;
    };
    let f = fixture(server, "gc-race");
    let (tx, rx) = mpsc::channel();
    let slow = slow_appends(
        server.backend_with(f.location.clone(), settings()).shared(),
        // Longer than gc takes to mark and move, shorter than B.
        Duration::from_secs(4),
        Some(tx),
    );
    let id = ConversationId::parse(&f.id).expect("id");
    let batch = tool_call(
        "c2",
        serde_json::json!({"$blob": f.garbage.to_string(), "size": f.garbage_bytes.len()}),
    );
    let writer = {
        let slow = Arc::clone(&slow);
        let id = id.clone();
        std::thread::spawn(move || {
            let store = Store::open(slow, StoreOptions::default()).expect("open");
            let mut w = store.writer(&id).expect("writer");
            // The reference is checked (the blob is there), then the
            // append waits in the slow backend.
            w.append(batch).map(|_| ())
        })
    };
    rx.recv_timeout(Duration::from_secs(120))
        .expect("the writer reached its append");
    let gc_store = Store::open(
        server.backend_with(f.location.clone(), settings()).shared(),
        StoreOptions::default(),
    )
    .expect("open");
    let gc = std::thread::spawn(move || jpstore_engine::gc::run(&gc_store, gc_now(), &mut |_| {}));
    let appended = writer.join().expect("writer thread");
    appended.expect("the writer's append, within B, succeeds");
    // The append is acknowledged while gc waits out the writers (B + T
    // after its move) with the blob in its trash: a reader finds it there.
    let reader = Store::open(
        server.backend_with(f.location.clone(), settings()).shared(),
        StoreOptions::default(),
    )
    .expect("open");
    let hex = f.garbage.to_hex();
    let place = Path::new("blobs/objects").join(&hex[..2]).join(&hex[2..]);
    let in_place = || reader.backend().head(&place).is_ok();
    let moved_before = !in_place();
    assert_eq!(
        reader.blobs().get(&f.garbage).expect("read while gc waits"),
        f.garbage_bytes
    );
    let url = f.location.to_string();
    let exported = ok(server, &url, &["export", &f.id], b"");
    assert!(
        exported.contains(&String::from_utf8_lossy(&f.garbage_bytes).into_owned()),
        "{exported}"
    );
    if moved_before && !in_place() {
        eprintln!("read from gc's trash while it waited");
    } else {
        eprintln!("gc put the blob back before the reads: the trash was not read this run");
    }
    let report = gc.join().expect("gc thread").expect("gc");
    assert_eq!(report.loose_removed, 1, "{report:?}");
    assert_eq!(report.restored, 1, "the blob came back: {report:?}");
    let check = Store::open(
        server.backend_with(f.location.clone(), settings()).shared(),
        StoreOptions::default(),
    )
    .expect("open");
    assert_eq!(
        check
            .blobs()
            .get(&f.garbage)
            .expect("the referenced blob is there"),
        f.garbage_bytes
    );
    let fsck = ok(server, &url, &["fsck", "--read-data", "--json"], b"");
    let fsck: serde_json::Value = serde_json::from_str(&fsck).expect("fsck json");
    assert_eq!(fsck["clean"], true, "{fsck}");
    assert!(keys_below(&*check.backend().clone(), Path::new("gc")).is_empty());
}

#[test]
fn a_writer_slower_than_the_bound_is_refused_and_writes_nothing() {
    let Some(server) =
        server_or_skip("a_writer_slower_than_the_bound_is_refused_and_writes_nothing")
    else {
        return;
    };
    let f = fixture(server, "gc-bound");
    let slow = slow_appends(
        server
            .backend_with(
                f.location.clone(),
                ClientSettings {
                    write_bound: Duration::from_secs(1),
                    ..settings()
                },
            )
            .shared(),
        Duration::from_secs(2),
        None,
    );
    let id = ConversationId::parse(&f.id).expect("id");
    let store = Store::open(slow, StoreOptions::default()).expect("open");
    let before = store.read(&id).expect("read").entries.len();
    let mut w = store.writer(&id).expect("writer");
    let err = w
        .append(tool_call("late", serde_json::json!("too late")))
        .expect_err("a record after B is refused");
    let message = err.to_string();
    assert!(
        message.contains("nothing of this record was written"),
        "{message}"
    );
    drop(w);
    let after = Store::open(
        server.backend_with(f.location.clone(), settings()).shared(),
        StoreOptions::default(),
    )
    .expect("open")
    .read(&id)
    .expect("read")
    .entries
    .len();
    assert_eq!(after, before, "nothing was appended");
}

#[test]
fn a_gc_killed_between_its_steps_is_finished_by_the_next_run() {
    let Some(server) = server_or_skip("a_gc_killed_between_its_steps_is_finished_by_the_next_run")
    else {
        return;
    };
    let f = fixture(server, "gc-killed");
    let url = f.location.to_string();
    let backend = server.backend_with(f.location.clone(), settings()).shared();
    let mut first = command(server, &url, &["gc", "--grace", "0s"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start gc");
    // Killed once the garbage is in its trash (during its wait).
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let trash = keys_below(&*backend, Path::new("gc/trash"));
        if !trash.is_empty() {
            break;
        }
        assert!(
            first.try_wait().expect("poll gc").is_none(),
            "the first gc ended before it was killed"
        );
        assert!(Instant::now() < deadline, "gc never moved anything");
        std::thread::sleep(Duration::from_millis(50));
    }
    first.kill().expect("kill gc");
    first.wait().expect("reap gc");
    let store = store_of(Arc::clone(&backend));
    assert!(
        !store.blobs().exists(&f.garbage).expect("exists"),
        "the garbage was in the trash when gc died"
    );
    assert!(keys_below(&*backend, Path::new("gc")).contains(&PathBuf::from("gc/lock")));
    // The next run waits for the dead run's lock to go stale, takes it
    // over, puts its trash back, then runs.
    let out = ok(server, &url, &["gc", "--grace", "0s", "--json"], b"");
    let report: serde_json::Value = serde_json::from_str(&out).expect("gc json");
    assert_eq!(
        report["restored"], 1,
        "the dead run's trash came back: {report}"
    );
    assert_eq!(report["loose_removed"], 1, "and went again: {report}");
    let store = store_of(Arc::clone(&backend));
    assert!(!store.blobs().exists(&f.garbage).expect("exists"));
    assert!(
        keys_below(&*backend, Path::new("gc")).is_empty(),
        "{:?}",
        keys_below(&*backend, Path::new("gc"))
    );
    let fsck = ok(server, &url, &["fsck", "--read-data", "--json"], b"");
    let fsck: serde_json::Value = serde_json::from_str(&fsck).expect("fsck json");
    assert_eq!(fsck["clean"], true, "{fsck}");
}

#[test]
fn a_removal_stopped_on_s3_is_reported_by_fsck_and_removed_by_gc() {
    let Some(server) =
        server_or_skip("a_removal_stopped_on_s3_is_reported_by_fsck_and_removed_by_gc")
    else {
        return;
    };
    let f = fixture(server, "gc-leftovers");
    let url = f.location.to_string();
    let backend = server.backend_with(f.location.clone(), settings()).shared();
    let store = store_of(Arc::clone(&backend));
    let doomed = store
        .create(NewConversation::default())
        .expect("create")
        .id()
        .clone();
    // What `rm` does first, and then a crash: the directory moved aside.
    let aside = Path::new("conversations").join(format!(".removed-{doomed}-1-2"));
    backend.rename(&doomed.dir(), &aside).expect("move aside");
    assert!(!keys_below(&*backend, &aside).is_empty());
    let fsck = ok(server, &url, &["fsck", "--json"], b"");
    let fsck: serde_json::Value = serde_json::from_str(&fsck).expect("fsck json");
    assert_eq!(fsck["clean"], true, "{fsck}");
    let leftovers: Vec<_> = fsck["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .filter(|x| x["kind"] == "leftover")
        .collect();
    assert_eq!(leftovers.len(), 1, "{fsck}");
    assert!(
        leftovers[0]["path"]
            .as_str()
            .is_some_and(|p| p.contains(".removed-")),
        "{fsck}"
    );
    let out = ok(server, &url, &["gc", "--grace", "0s", "--json"], b"");
    let report: serde_json::Value = serde_json::from_str(&out).expect("gc json");
    assert_eq!(report["leftovers_removed"], 1, "{report}");
    assert!(
        keys_below(&*backend, &aside).is_empty(),
        "left: {:?}",
        keys_below(&*backend, &aside)
    );
    assert!(
        backend.list(&aside).map_or(true, |l| l.is_empty()),
        "{:?}",
        backend.list(&aside)
    );
    assert!(ok(server, &url, &["view", &f.id], b"").contains("kept content"));
    let fsck = ok(server, &url, &["fsck", "--json"], b"");
    assert!(!fsck.contains("\"leftover\""), "{fsck}");
}

#[test]
fn commands_over_every_conversation_on_s3_pass_over_those_being_removed() {
    let Some(server) =
        server_or_skip("commands_over_every_conversation_on_s3_pass_over_those_being_removed")
    else {
        return;
    };
    // `rm` on S3 copies a conversation aside, then deletes its objects:
    // meanwhile its log reads short, or not at all (a segment gone before
    // a later one). `ls` and `stats` said "cannot be listed" / "is not
    // counted" then, and fsck reported damage.
    let location = server.fresh("removal-race");
    let url = location.to_string();
    ok(server, &url, &["init"], b"");
    let store = store_of(server.backend_with(location.clone(), settings()).shared());
    let mut ids = Vec::new();
    for _ in 0..10 {
        let mut w = store.create(NewConversation::default()).expect("create");
        for k in 0..20 {
            let batch =
                serde_json::json!([{"type": "chat_request", "content": format!("message {k}")}]);
            w.append(entries(batch)).expect("append");
        }
        ids.push(w.id().clone());
    }
    let done = std::sync::atomic::AtomicBool::new(false);
    let failures = std::thread::scope(|scope| {
        let walker = scope.spawn(|| {
            let mut failures = Vec::new();
            let mut n = 0;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                let args: &[&str] = [&["ls"][..], &["stats"], &["fsck"]][n % 3];
                n += 1;
                let out = output_of(&mut command(server, &url, args), b"");
                let stdout = String::from_utf8_lossy(&out.stdout);
                if !out.status.success() || stdout.contains("damage") {
                    failures.push(format!(
                        "{args:?}: {}\n{stdout}\n{}",
                        out.status,
                        String::from_utf8_lossy(&out.stderr)
                    ));
                }
            }
            failures
        });
        for id in &ids[..ids.len() - 1] {
            store.remove(id).expect("rm");
        }
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        walker.join().expect("walker")
    });
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    let listed = ok(server, &url, &["ls", "--json"], b"");
    assert!(listed.contains(&ids[ids.len() - 1].to_string()), "{listed}");
    let fsck = ok(server, &url, &["fsck"], b"");
    assert!(fsck.contains("clean"), "{fsck}");
}

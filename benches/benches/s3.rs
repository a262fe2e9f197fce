//! Stores on S3 against a real server: the requests each operation makes,
//! and its time beside a floor measured in the same run on the same
//! server.
//!
//! The server is the tests' (`jpstore_remote::testing`): the one at
//! `JP_STORE_TEST_S3_ENDPOINT` (bucket `JP_STORE_TEST_S3_BUCKET`), or a
//! SeaweedFS (`weed mini`) started for this process on loopback ports when
//! `JP_STORE_TEST_WEED` (or `PATH`) has `weed`. Without either the bench
//! says why and stops. Every backend is made as a new `jp-store` process
//! makes it (nothing in memory; the cache directory given, or none as with
//! `--no-cache`), and its requests are its own counters, the ones `-v`
//! prints.
//!
//! - **conversation**: a generated coding-agent conversation of 10,000
//!   events (its content in a pack) built locally and copied to the server
//!   (`jp-store copy`), twice under two ids. Requests of: a view with an
//!   empty cache (cold: open + `view`, content inline, read from the pack);
//!   the same view again with the cache the first filled (warm); an append
//!   of one ~100-byte event as `jp-store append` makes it (open, writer,
//!   one record, the head cache), with the cache and without; an append
//!   through a writer held open (an agent's loop: the writer made once),
//!   averaged over 64 appends (merges included). Times, interleaved: the
//!   cold and warm views beside the same view of the local store the
//!   conversation was copied from; both appends beside one PUT of as many
//!   bytes as the record (`put_directly`: the backend's client, nothing
//!   else), and the command's beside the same command on the local store.
//! - **attach**: `attach` of a generated 1,000-file source tree (one pack,
//!   one record) into a conversation of a new store, beside one PUT of the
//!   files' bytes as one object.
//! - **gc**: `gc --dry-run` of a store of 100,000 blobs (100 conversations of
//!   100 tool responses of 10 blocks, the blobs in packs of 10,000, as an
//!   import or attach stores them: built locally and copied to the server,
//!   then 200 unreferenced loose objects put there), with an empty cache,
//!   beside one LIST of every object of the store; then, once, gc that
//!   deletes (the 200 unreferenced objects moved to trash, the wait of
//!   format-spec.md 5.5, the logs read again, the trash deleted), with a
//!   bound `B` of 1 s and request and retry timeouts of 2 s each (so a
//!   wait of 5 s, reported apart).
//!
//! `--quick` (or `JPSTORE_S3_BENCH_QUICK=1`): 1,000 events, 200 files,
//! 10,000 blobs and fewer rounds, for a run of about a minute.
//!
//! Output: one line per comparison on stderr, then, as the last line of
//! stdout, one JSON object: `requests` (per operation: total and by kind),
//! medians in nanoseconds and ratios (`A_vs_B` is A's time over B's).
//!
//! Run: `JP_STORE_TEST_WEED=/path/to/venv cargo bench --bench s3` (a few
//! minutes), or `JP_STORE_TEST_S3_ENDPOINT=http://host:port` with the
//! bucket made and `AWS_*`-free test credentials (`jpstore-test`) accepted.

use jpstore_engine::internal::StoreInterior as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use jpstore_benches::bench_dir::{describe, fresh_run_dir};
use jpstore_benches::setup::attach::{collect_and_attach, write_tree};
use jpstore_benches::setup::conversation::{small_event, store_with};
use jpstore_benches::setup::maintenance::{self, MaintenanceShape};
use jpstore_benches::setup::s3::{copy_store, open, process_backend, process_backend_with, since};
use jpstore_benches::timing::{human, interleaved, three_digits, Timings};
use jpstore_benches::ConversationShape;
use jpstore_engine::conversation::ConversationId;
use jpstore_engine::export::ContentMode;
use jpstore_engine::gc::{GcOptions, GcReport};
use jpstore_engine::timestamp::Timestamp;
use jpstore_engine::{NewConversation, Store, StoreOptions};
use jpstore_remote::testing::{list_every_object, put_directly, server, TestServer};
use jpstore_remote::{ClientSettings, RequestCounts, S3Location};
use serde_json::{json, Map, Value};

/// Seed of the conversation (the conversation bench's).
const SEED: u64 = 0x6a70_2d63_6f6e_7665;
/// Seed of the attached tree (the attach bench's).
const TREE_SEED: u64 = 0x6a70_2d61_7474_6163;
/// The conversation viewed and appended to by commands.
const VIEWED: &str = "17000000000";
/// The conversation appended to by a writer held open.
const HELD: &str = "17000000001";
/// Appends through the held writer whose requests are averaged.
const HELD_APPENDS: usize = 64;

/// What one run measures.
#[derive(Clone, Copy, Debug)]
struct Scale {
    events: usize,
    files: usize,
    gc: MaintenanceShape,
    /// Rounds of each interleaved loop: at least, at most, and the time
    /// after which it stops once it has the least.
    rounds: (usize, usize, Duration),
}

const FULL: Scale = Scale {
    events: 10_000,
    files: 1_000,
    gc: MaintenanceShape {
        conversations: 100,
        turns: 100,
        blocks: 10,
        orphans: 200,
    },
    rounds: (5, 30, Duration::from_secs(25)),
};

const QUICK: Scale = Scale {
    events: 1_000,
    files: 200,
    gc: MaintenanceShape {
        conversations: 10,
        turns: 100,
        blocks: 10,
        orphans: 200,
    },
    rounds: (3, 10, Duration::from_secs(5)),
};

fn main() {
    let quick = std::env::args().any(|a| a == "--quick")
        || std::env::var_os("JPSTORE_S3_BENCH_QUICK").is_some_and(|v| v != "0" && !v.is_empty());
    let scale = if quick { QUICK } else { FULL };
    let server = match server() {
        Ok(s) => s,
        Err(why) => {
            eprintln!("skipped: the s3 bench needs an S3 server: {why}");
            println!("{}", json!({ "skipped": why }));
            return;
        }
    };
    let run = fresh_run_dir(&Path::new(env!("CARGO_TARGET_TMPDIR")).join("s3-bench"));
    println!("{}", describe(&run));
    println!(
        "server: {} (bucket {}); {scale:?}",
        server.endpoint, server.bucket
    );
    let mut out = Map::new();
    out.insert("scale".into(), json!(if quick { "quick" } else { "full" }));
    let mut requests = Map::new();
    conversation(server, &run, scale, &mut requests, &mut out);
    attach(server, &run, scale, &mut requests, &mut out);
    gc(server, &run, scale, &mut requests, &mut out);
    out.insert("requests".into(), Value::Object(requests));
    println!("{}", Value::Object(out));
}

/// `n requests (…)` of `r` as JSON: the total and each kind.
fn counts(r: RequestCounts) -> Value {
    json!({"total": r.total(), "get": r.get, "head": r.head, "put": r.put,
           "list": r.list, "delete": r.delete})
}

/// Keeps `r` as the requests of `what`, and says so.
fn note(requests: &mut Map<String, Value>, what: &str, r: RequestCounts) {
    eprintln!("  requests of {what}: {r}");
    requests.insert(what.into(), counts(r));
}

/// Medians (ns) of every operation of `t`.
fn medians(t: &Timings) -> Value {
    Value::Object(
        t.names
            .iter()
            .enumerate()
            .map(|(i, n)| (n.clone(), json!(t.median(i).as_nanos() as u64)))
            .collect(),
    )
}

// ----- conversation: views and appends ------------------------------------

/// Open + `view` with content inline, as `jp-store view ID` runs it, of
/// the store at `location` by a new process with the cache `cache`: the
/// view's JSON and the backend's requests.
fn view_s3(
    server: &TestServer,
    location: &S3Location,
    cache: Option<&Path>,
    id: &ConversationId,
) -> (Vec<u8>, RequestCounts) {
    let backend = process_backend(server, location, cache);
    let json = view(&open(&backend), id);
    (json, backend.requests())
}

fn view(store: &Store, id: &ConversationId) -> Vec<u8> {
    store
        .open_view(id)
        .expect("open the view")
        .render(ContentMode::Inline)
        .expect("render the view")
}

/// One event appended to `id` of `store` as `jp-store append ID` appends
/// it (the writer opened, one record, an automatic compaction considered).
fn append_turn(store: &Store, id: &ConversationId) {
    let mut summarize = jpstore_integrations::summarizer::profile_summarizer(store);
    store
        .append_turn(
            id,
            vec![small_event()],
            Timestamp::now(),
            &mut |_| {},
            &mut summarize,
        )
        .expect("append");
}

/// One event appended as `jp-store append ID` appends it, by a new process
/// with the cache `cache`: its requests.
fn append_command(
    server: &TestServer,
    location: &S3Location,
    cache: Option<&Path>,
    id: &ConversationId,
) -> RequestCounts {
    let backend = process_backend(server, location, cache);
    let store = open(&backend);
    append_turn(&store, id);
    drop(store);
    backend.requests()
}

fn conversation(
    server: &TestServer,
    run: &Path,
    scale: Scale,
    requests: &mut Map<String, Value>,
    out: &mut Map<String, Value>,
) {
    let started = Instant::now();
    let entries = ConversationShape::generate(SEED, scale.events);
    let (local_dir, local) = store_with(run, &[(VIEWED, &entries), (HELD, &entries)]);
    let location = server.fresh("bench-conversation");
    let copied = copy_store(server, &local, &location);
    eprintln!(
        "conversations of {} events built and copied to {location} in {} ({copied})",
        scale.events,
        human(started.elapsed())
    );
    let viewed = ConversationId::parse(VIEWED).expect("an id");
    let held = ConversationId::parse(HELD).expect("an id");
    let cache = run.join("cache");

    // Requests: a cold view, the view that fills the cache, a warm one.
    let expected = view(&local, &viewed);
    let (cold_json, cold) = view_s3(server, &location, None, &viewed);
    assert_eq!(cold_json, expected, "the view on S3 is the local view");
    note(requests, "view (cold)", cold);
    let (_, first) = view_s3(server, &location, Some(&cache), &viewed);
    note(requests, "view (filling the cache)", first);
    let (warm_json, warm) = view_s3(server, &location, Some(&cache), &viewed);
    assert_eq!(warm_json, expected, "the warm view is the local view");
    note(requests, "view (warm)", warm);

    // Times of the views, the conversation unchanged.
    let local_path = local_dir.path().to_path_buf();
    drop(local);
    let (min, max, budget) = scale.rounds;
    let t = interleaved(
        min,
        max,
        budget,
        &mut [
            ("cold view (s3)", &mut || {
                let t = Instant::now();
                let r = view_s3(server, &location, None, &viewed);
                let d = t.elapsed();
                drop(r);
                d
            }),
            ("warm view (s3)", &mut || {
                let t = Instant::now();
                let r = view_s3(server, &location, Some(&cache), &viewed);
                let d = t.elapsed();
                drop(r);
                d
            }),
            ("view (local)", &mut || {
                let t = Instant::now();
                let store = Store::open_dir(&local_path, StoreOptions::default())
                    .expect("open the local store");
                let json = view(&store, &viewed);
                let d = t.elapsed();
                drop(json);
                d
            }),
        ],
    );
    t.print(
        &format!("open + view of {} events", scale.events),
        &[(1, 2), (0, 2), (0, 1)],
    );
    out.insert(
        "view".into(),
        json!({
            "events": scale.events,
            "median_ns": medians(&t),
            "warm_s3_vs_local": three_digits(t.ratio(1, 2)),
            "cold_s3_vs_local": three_digits(t.ratio(0, 2)),
            "cold_vs_warm_s3": three_digits(t.ratio(0, 1)),
            "rounds": t.rounds,
        }),
    );

    // Requests of appends: as the command, with the cache and without; and
    // through a writer held open (merges included).
    note(
        requests,
        "append (command, warm cache)",
        append_command(server, &location, Some(&cache), &viewed),
    );
    note(
        requests,
        "append (command, no cache)",
        append_command(server, &location, None, &viewed),
    );
    let backend = process_backend(server, &location, Some(&cache));
    let store = open(&backend);
    let mut writer = store.writer(&held).expect("open the writer");
    let opened = backend.requests();
    note(
        requests,
        "open a writer (its log not in the cache yet)",
        opened,
    );
    let mut record = 0;
    for _ in 0..HELD_APPENDS {
        let end = writer.log_end();
        writer.append(vec![small_event()]).expect("append");
        record = writer.log_end() - end;
    }
    let appended = since(&backend, opened);
    eprintln!(
        "  requests of {HELD_APPENDS} appends through a writer held open: {appended} \
         ({:.2} a append; records of {record} bytes)",
        appended.total() as f64 / HELD_APPENDS as f64
    );
    requests.insert(
        "append (held writer, mean)".into(),
        json!({"total": three_digits(appended.total() as f64 / HELD_APPENDS as f64),
               "put": three_digits(appended.put as f64 / HELD_APPENDS as f64),
               "delete": three_digits(appended.delete as f64 / HELD_APPENDS as f64),
               "get": three_digits(appended.get as f64 / HELD_APPENDS as f64),
               "list": three_digits(appended.list as f64 / HELD_APPENDS as f64)}),
    );

    // Times of the appends beside one PUT of the record's bytes.
    let floor_backend = process_backend(server, &location, None);
    let bytes = vec![b'x'; record as usize];
    let mut n = 0u64;
    let t = interleaved(
        min.max(10),
        max * 2,
        budget,
        &mut [
            ("append (command)", &mut || {
                let t = Instant::now();
                append_command(server, &location, Some(&cache), &viewed);
                t.elapsed()
            }),
            ("append (held writer)", &mut || {
                let t = Instant::now();
                writer.append(vec![small_event()]).expect("append");
                t.elapsed()
            }),
            ("PUT of the record's bytes", &mut || {
                n += 1;
                let t = Instant::now();
                put_directly(&floor_backend, &format!("floor/put-{n}"), bytes.clone())
                    .expect("put");
                t.elapsed()
            }),
            ("append (command, local)", &mut || {
                let t = Instant::now();
                let store = Store::open_dir(&local_path, StoreOptions::default())
                    .expect("open the local store");
                append_turn(&store, &viewed);
                t.elapsed()
            }),
        ],
    );
    t.print(
        &format!(
            "append of one event ({record} bytes) to {} events",
            scale.events
        ),
        &[(0, 2), (1, 2), (0, 3)],
    );
    out.insert(
        "append".into(),
        json!({
            "record_bytes": record,
            "median_ns": medians(&t),
            "command_vs_put": three_digits(t.ratio(0, 2)),
            "held_writer_vs_put": three_digits(t.ratio(1, 2)),
            "command_s3_vs_local": three_digits(t.ratio(0, 3)),
            "rounds": t.rounds,
        }),
    );
    writer.close();
    drop(store);
}

// ----- attach -------------------------------------------------------------

fn attach(
    server: &TestServer,
    run: &Path,
    scale: Scale,
    requests: &mut Map<String, Value>,
    out: &mut Map<String, Value>,
) {
    let tree = run.join("tree");
    let files = write_tree(TREE_SEED, scale.files, &tree);
    let raw: Vec<u8> = files.iter().flat_map(|f| f.bytes.iter().copied()).collect();
    eprintln!(
        "a tree of {} files, {:.1} MB",
        files.len(),
        raw.len() as f64 / 1e6
    );
    // Each attach into a conversation of a new store: every file's content
    // is new there (a store that has it stores nothing).
    let fresh = || -> (jpstore_remote::S3Backend, Store, ConversationId, RequestCounts) {
        let location = server.fresh("bench-attach");
        let backend = process_backend(server, &location, None);
        let store = Store::init(backend.clone().shared(), StoreOptions::default()).expect("init");
        let id = store
            .create(NewConversation::default())
            .expect("create")
            .id()
            .clone();
        let before = backend.requests();
        (backend, store, id, before)
    };
    let (backend, store, id, before) = fresh();
    let outcome = collect_and_attach(&tree, &store, &id, files.len());
    note(
        requests,
        &format!("attach of {} files", files.len()),
        since(&backend, before),
    );
    eprintln!(
        "  one pack of {:.1} MB for {:.1} MB of files",
        outcome.pack_bytes as f64 / 1e6,
        outcome.bytes as f64 / 1e6
    );
    drop(store);
    let floor_backend = process_backend(server, &server.fresh("bench-attach-floor"), None);
    let (min, max, budget) = scale.rounds;
    let mut n = 0u64;
    let t = interleaved(
        min,
        max,
        budget,
        &mut [
            ("attach", &mut || {
                let (_backend, store, id, _) = fresh();
                let t = Instant::now();
                collect_and_attach(&tree, &store, &id, files.len());
                t.elapsed()
            }),
            ("PUT of the files' bytes", &mut || {
                n += 1;
                let t = Instant::now();
                put_directly(&floor_backend, &format!("floor/tree-{n}"), raw.clone()).expect("put");
                t.elapsed()
            }),
        ],
    );
    t.print(
        &format!(
            "attach of {} files ({:.1} MB)",
            files.len(),
            raw.len() as f64 / 1e6
        ),
        &[(0, 1)],
    );
    let rate = |i: usize| three_digits(raw.len() as f64 / 1e6 / t.median(i).as_secs_f64());
    out.insert(
        "attach".into(),
        json!({
            "files": files.len(),
            "bytes": raw.len(),
            "median_ns": medians(&t),
            "attach_mb_per_s": rate(0),
            "put_mb_per_s": rate(1),
            "attach_vs_put": three_digits(t.ratio(0, 1)),
            "rounds": t.rounds,
        }),
    );
}

// ----- gc -----------------------------------------------------------------

/// The client settings of the gc that deletes: `B` of 1 s, `T` of 4 s.
fn short_bound() -> ClientSettings {
    ClientSettings {
        write_bound: Duration::from_secs(1),
        request_timeout: Duration::from_secs(2),
        retry_timeout: Duration::from_secs(2),
        ..ClientSettings::default()
    }
}

/// gc as `jp-store gc` runs it (no grace period), dry or not, by a new
/// process without a cache and with `settings`: its report (or why it
/// failed) and requests.
fn run_gc(
    server: &TestServer,
    location: &S3Location,
    dry_run: bool,
    settings: ClientSettings,
) -> (Result<GcReport, String>, RequestCounts) {
    let backend = process_backend_with(server, location, None, settings);
    let store = open(&backend);
    let report = jpstore_engine::gc::run(
        &store,
        GcOptions {
            grace: Duration::ZERO,
            dry_run,
            ..GcOptions::default()
        },
        &mut |_| {},
    )
    .map_err(|e| e.to_string());
    drop(store);
    (report, backend.requests())
}

fn gc(
    server: &TestServer,
    run: &Path,
    scale: Scale,
    requests: &mut Map<String, Value>,
    out: &mut Map<String, Value>,
) {
    let shape = scale.gc;
    let started = Instant::now();
    let local_dir: PathBuf = run.join("gc-store");
    let (local, _) = maintenance::build(&local_dir, shape);
    let location = server.fresh("bench-gc");
    let copied = copy_store(server, &local, &location);
    // The unreferenced loose objects, which a copy does not send.
    let backend = process_backend(server, &location, None);
    let store = open(&backend);
    maintenance::put_orphans(&store, shape.orphans);
    drop(store);
    let objects = list_every_object(&backend).expect("list the store");
    eprintln!(
        "a store of {} blobs ({} objects on the server) built and copied to {location} in {} \
         (copy: {copied})",
        shape.referenced() + shape.orphans,
        objects,
        human(started.elapsed())
    );
    let (report, dry) = run_gc(server, &location, true, ClientSettings::default());
    let report = report.expect("gc --dry-run");
    // The blobs of the tool responses, and the base config they share.
    assert!(report.referenced >= shape.referenced(), "{report:?}");
    note(
        requests,
        &format!(
            "gc --dry-run of {} blobs",
            shape.referenced() + shape.orphans
        ),
        dry,
    );
    let (min, max, budget) = scale.rounds;
    let floor_backend = process_backend(server, &location, None);
    let t = interleaved(
        min.min(5),
        max.min(10),
        budget,
        &mut [
            ("gc --dry-run", &mut || {
                let t = Instant::now();
                let (r, _) = run_gc(server, &location, true, ClientSettings::default());
                let d = t.elapsed();
                r.expect("gc --dry-run");
                d
            }),
            ("LIST of every object", &mut || {
                let t = Instant::now();
                list_every_object(&floor_backend).expect("list");
                t.elapsed()
            }),
        ],
    );
    t.print(
        &format!(
            "gc --dry-run of {} blobs",
            shape.referenced() + shape.orphans
        ),
        &[(0, 1)],
    );
    // gc that deletes, once (what it deletes is gone after): its wait
    // (B + T) apart.
    let started = Instant::now();
    let (deleting, deleting_requests) = run_gc(server, &location, false, short_bound());
    let took = started.elapsed();
    let deleting = match deleting {
        Ok(r) => {
            note(requests, "gc (deleting)", deleting_requests);
            let waited = Duration::from_secs(r.waited_secs);
            let working = took.saturating_sub(waited);
            let floor = t.median(1);
            eprintln!(
                "  gc (deleting): {} unreferenced objects removed in {} ({} of it the wait of \
                 format-spec.md 5.5): {} of work, {:.1} times the LIST of every object",
                r.objects_freed(),
                human(took),
                human(waited),
                human(working),
                working.as_secs_f64() / floor.as_secs_f64()
            );
            json!({
                "removed": r.objects_freed(),
                "ns": took.as_nanos() as u64,
                "waited_ns": waited.as_nanos() as u64,
                "work_vs_list": three_digits(working.as_secs_f64() / floor.as_secs_f64()),
            })
        }
        Err(e) => {
            eprintln!("  gc (deleting) on S3 failed: {e}");
            json!({ "failed": e })
        }
    };
    out.insert(
        "gc".into(),
        json!({
            "blobs": shape.referenced() + shape.orphans,
            "objects_on_server": objects,
            "median_ns": medians(&t),
            "dry_run_vs_list": three_digits(t.ratio(0, 1)),
            "deleting": deleting,
            "rounds": t.rounds,
        }),
    );
}

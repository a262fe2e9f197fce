//! A conversation removed (and created again under its id) while other
//! commands wait for it or walk the store: a writer that waited for the lock
//! of the removed conversation must not write into the new one, and gc must
//! take a removed conversation as simply not live.

use jpstore_engine::internal::StoreInterior as _;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use jpstore_blobstore::storage::LocalStorage;
use jpstore_engine::conversation::ConversationId;
use jpstore_engine::export::ContentMode;
use jpstore_engine::internal::event::input::parse_input;
use jpstore_engine::internal::event::json::ParseMode;
use jpstore_engine::internal::export::conversation_json;
use jpstore_engine::{Store, StoreOptions};
use jpstore_tests::{assert_fsck_clean, events_of, jp_store_bin, run_jp_store, ts};
use serde_json::json;

/// The id of the conversation every test removes and creates again (JP's
/// decisecond form, so an imported JP directory can carry it too).
const ID: &str = "17738399468";

fn request(text: &str, n: u64) -> String {
    json!([
        {"type": "turn_start", "timestamp": ts(n)},
        {"type": "chat_request", "timestamp": ts(n + 1), "content": text}
    ])
    .to_string()
}

/// A JP conversation directory named for [`ID`], with one turn.
fn jp_conversation(parent: &Path) -> PathBuf {
    let dir = parent.join(format!("{ID}-again"));
    fs::create_dir_all(&dir).expect("mkdir");
    fs::write(
        dir.join("events.json"),
        r#"[{"type": "turn_start", "timestamp": "2026-05-29 10:00:00.0"},
            {"type": "chat_request", "timestamp": "2026-05-29 10:00:01.0", "content": "imported"}]"#,
    )
    .expect("write");
    fs::write(dir.join("metadata.json"), r#"{"title": "T"}"#).expect("write");
    dir
}

/// Requests of the conversation, in order (the `content` of each
/// `chat_request`).
fn requests(store: &Store, id: &ConversationId) -> Vec<String> {
    let conv = store.read(id).expect("the conversation reads back whole");
    let export = conversation_json(store, &conv, ContentMode::Inline).expect("export");
    events_of(&export)
        .iter()
        .filter(|e| e["type"] == "chat_request")
        .map(|e| e["content"].as_str().unwrap_or_default().to_owned())
        .collect()
}

fn entries(text: &str) -> Vec<jpstore_engine::event::Entry<jpstore_engine::event::Payload>> {
    parse_input(text, ParseMode::Strict { now: ts_now() })
        .expect("valid input")
        .entries
}

fn ts_now() -> jpstore_engine::timestamp::Timestamp {
    jpstore_engine::timestamp::Timestamp::now()
}

/// Waits until process `child` has the file `path` open (it looked it up
/// and will lock that file whatever happens to the name later). Fails if
/// the child exits first.
fn wait_until_open(child: &mut Child, path: &Path) {
    let want = fs::canonicalize(path).expect("canonical lock path");
    let fds = PathBuf::from(format!("/proc/{}/fd", child.id()));
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            panic!(
                "the appender exited ({status}) before it opened {}",
                want.display()
            );
        }
        let open = fs::read_dir(&fds)
            .into_iter()
            .flatten()
            .flatten()
            .any(|fd| fs::read_link(fd.path()).is_ok_and(|target| target == want));
        if open {
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// An `append` blocked on the writer lock while the conversation is removed
/// and created again (by `new --id` or by `import --force`) would, once it
/// got the old lock, append into the new log while a writer holding the new
/// lock appends at the same offset: acknowledged records overwritten. It
/// must fail, naming the conversation, and write nothing; every record the
/// other writer acknowledged reads back.
#[test]
fn an_append_that_waited_while_its_conversation_was_replaced_writes_nothing() {
    for recreate in ["new --id", "import --force"] {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("store");
        run_jp_store(&root, &["init"], b"").ok("init");
        run_jp_store(&root, &["new", "--id", ID], b"").ok("new");
        let id = ConversationId::parse(ID).expect("id");
        let conv_dir = root.join("conversations").join(ID);
        let lock_file = conv_dir.join("events.log.lock");

        // The test plays `rm`: it holds the writer lock of the conversation
        // while the appender starts and waits for it.
        let storage = jpstore_blobstore::backend::FileBackend::new(std::sync::Arc::new(
            LocalStorage::open(&root).expect("storage"),
        ));
        let old_lock = jpstore_engine::internal::log::lock_waiting(
            &storage,
            Path::new(&format!("conversations/{ID}/events.log")),
        )
        .expect("lock");
        let mut appender = Command::new(jp_store_bin())
            .arg("--store")
            .arg(&root)
            .args(["append", ID])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn append");
        appender
            .stdin
            .take()
            .expect("stdin")
            .write_all(request("the waiting appender", 10).as_bytes())
            .expect("write stdin");
        wait_until_open(&mut appender, &lock_file);

        // `rm`'s steps under the lock: the directory moved aside, then
        // deleted. Then the id is taken again.
        let aside = root
            .join("conversations")
            .join(format!(".removed-{ID}-test"));
        fs::rename(&conv_dir, &aside).expect("move aside");
        fs::remove_dir_all(&aside).expect("delete");
        match recreate {
            "new --id" => {
                run_jp_store(&root, &["new", "--id", ID], b"").ok("new again");
            }
            _ => {
                let jp = jp_conversation(dir.path());
                let jp = jp.display().to_string();
                run_jp_store(&root, &["import", "--force", &jp], b"").ok("import --force");
            }
        }

        // Another writer of the new conversation appends, holding its lock
        // across the release of the old one.
        let store = Store::open_dir(&root, StoreOptions::default()).expect("open");
        let before = requests(&store, &id);
        let mut writer = store.writer(&id).expect("writer of the new conversation");
        writer
            .append(entries(&request("first of the new writer", 20)))
            .expect("append");
        drop(old_lock);
        let out = appender.wait_with_output().expect("wait");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(1),
            "{recreate}: the waiting append must fail; stderr: {stderr}"
        );
        assert!(
            stderr.contains(&format!(
                "conversation {ID} was removed while this command waited for its lock"
            )),
            "{recreate}: stderr: {stderr}"
        );
        writer
            .append(entries(&request("second of the new writer", 30)))
            .expect("append");
        drop(writer);

        let mut expected = before;
        expected.push("first of the new writer".into());
        expected.push("second of the new writer".into());
        assert_eq!(requests(&store, &id), expected, "{recreate}");
        assert_fsck_clean(&store, recreate);
    }
}

/// The same race for real: `append` processes against a loop of `rm` and
/// `new --id` / `import --force` of the same id. Every append succeeds or
/// fails with a message saying why; afterwards every log reads whole and
/// fsck is clean.
#[test]
fn appends_racing_removal_and_recreation_never_damage_a_log() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("store");
    run_jp_store(&root, &["init"], b"").ok("init");
    run_jp_store(&root, &["new", "--id", ID], b"").ok("new");
    let jp = jp_conversation(dir.path()).display().to_string();
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let appenders: Vec<_> = (0..3)
            .map(|w| {
                let (root, stop) = (&root, &stop);
                scope.spawn(move || {
                    let mut acknowledged = 0;
                    for i in 0.. {
                        if stop.load(Ordering::Relaxed) && i > 0 {
                            break;
                        }
                        let text = format!("appender {w} batch {i} {}", "x".repeat(i % 7 * 40));
                        let out = run_jp_store(
                            root,
                            &["append", ID],
                            request(&text, (w * 1000 + i) as u64 * 2).as_bytes(),
                        );
                        match out.code {
                            Some(0) => acknowledged += 1,
                            Some(1)
                                if out.stderr.contains("no conversation with id")
                                    || out
                                        .stderr
                                        .contains("was removed while this command waited") => {}
                            _ => panic!("append {w}/{i}: {out:?}"),
                        }
                    }
                    acknowledged
                })
            })
            .collect();
        for round in 0..24 {
            let out = run_jp_store(&root, &["rm", ID], b"");
            assert!(
                out.code == Some(0) || out.stderr.contains("no conversation with id"),
                "rm, round {round}: {out:?}"
            );
            if round % 2 == 0 {
                run_jp_store(&root, &["new", "--id", ID], b"").ok("new --id");
            } else {
                run_jp_store(&root, &["import", "--force", &jp], b"").ok("import --force");
            }
            // Let appends land in this incarnation before the next removal.
            for _ in 0..3 {
                let out = run_jp_store(&root, &["print", ID], b"");
                out.ok("print between removals");
            }
        }
        stop.store(true, Ordering::Relaxed);
        let acknowledged: usize = appenders
            .into_iter()
            .map(|a| a.join().expect("appender"))
            .sum();
        assert!(acknowledged > 0, "no append was acknowledged");
    });
    let store = Store::open_dir(&root, StoreOptions::default()).expect("open");
    let id = ConversationId::parse(ID).expect("id");
    requests(&store, &id);
    assert_fsck_clean(&store, "after the race");
}

/// gc listing the conversations while `rm` removes them: a conversation
/// removed after gc listed it is simply not live (gc used to fail with "no
/// conversation with id X", an id the user never named). Every gc run
/// succeeds, and what the remaining conversations reference reads back.
#[test]
fn gc_while_conversations_are_removed_succeeds() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("store");
    run_jp_store(&root, &["init"], b"").ok("init");
    let ids: Vec<String> = (0..40).map(|i| format!("gone{i}")).collect();
    for (i, id) in ids.iter().enumerate() {
        run_jp_store(&root, &["new", "--id", id], b"").ok("new");
        let batch = json!([
            {"type": "turn_start", "timestamp": ts(2 * i as u64)},
            {"type": "chat_request", "timestamp": ts(2 * i as u64 + 1), "content": "kept",
             "resources": [{"uri": "file:///shared.txt", "text": "content every conversation shares\n"}]}
        ]);
        run_jp_store(&root, &["append", id], batch.to_string().as_bytes()).ok("append");
    }
    let done = AtomicBool::new(false);
    let runs = std::thread::scope(|scope| {
        let gc = scope.spawn(|| {
            let mut runs = 0;
            while !done.load(Ordering::Relaxed) || runs == 0 {
                run_jp_store(&root, &["gc", "--grace", "0s"], b"")
                    .ok("gc while conversations are removed");
                runs += 1;
            }
            runs
        });
        // The last conversation stays; the others go one by one.
        for id in &ids[..ids.len() - 1] {
            run_jp_store(&root, &["rm", id], b"").ok("rm");
        }
        done.store(true, Ordering::Relaxed);
        gc.join().expect("gc thread")
    });
    assert!(runs > 0);
    let store = Store::open_dir(&root, StoreOptions::default()).expect("open");
    let last = ConversationId::parse(&ids[ids.len() - 1]).expect("id");
    assert_eq!(requests(&store, &last), ["kept"]);
    assert_fsck_clean(&store, "after gc and removals");
}

/// A store of `n` conversations `gone0`, `gone1`, ... of one turn each.
fn store_of(root: &Path, n: usize) -> Vec<String> {
    run_jp_store(root, &["init"], b"").ok("init");
    let ids: Vec<String> = (0..n).map(|i| format!("gone{i}")).collect();
    for (i, id) in ids.iter().enumerate() {
        run_jp_store(root, &["new", "--id", id], b"").ok("new");
        run_jp_store(
            root,
            &["append", id],
            request("kept", 2 * i as u64).as_bytes(),
        )
        .ok("append");
    }
    ids
}

#[test]
fn stats_of_listed_ids_leaves_out_one_removed_since() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("store");
    store_of(&root, 3);
    let store = Store::open_dir(&root, StoreOptions::default()).expect("open");
    let ids = store.ids().expect("ids");
    run_jp_store(&root, &["rm", "gone1"], b"").ok("rm");
    let stats = jpstore_engine::stats::of_conversations(&store, &ids).expect("stats");
    assert!(
        stats.failed.is_empty(),
        "a conversation removed since it was listed is a failure: {:?}",
        stats.failed
    );
    let counted: Vec<String> = stats
        .conversations
        .iter()
        .map(|(id, _)| id.to_string())
        .collect();
    assert_eq!(counted, ["gone0", "gone2"]);
}

#[test]
fn commands_over_every_conversation_pass_over_those_removed_while_they_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("store");
    let ids = store_of(&root, 60);
    // Each reads every conversation it listed: one removed in between was
    // an error (`ls`, `stats`, `export`, `upgrade`), damage (`fsck`: "cannot
    // open ... events.log"), a failed repair, or a copy "not copied".
    let commands: [&[&str]; 8] = [
        &["ls"],
        &["ls", "--json"],
        &["stats"],
        &["fsck"],
        &["fsck", "--repair"],
        &["export", "--format", "ndjson"],
        &["upgrade", "--dry-run"],
        &["copy"],
    ];
    let done = AtomicBool::new(false);
    let failures = std::thread::scope(|scope| {
        let walkers: Vec<_> = (0..2)
            .map(|t| {
                let (done, root) = (&done, &root);
                // A destination of its own: two copies into one conflict.
                let copy = dir.path().join(format!("copy{t}"));
                scope.spawn(move || {
                    let copy_args = [
                        "copy",
                        root.to_str().expect("utf-8 path"),
                        copy.to_str().expect("utf-8 path"),
                    ];
                    let mut failures = Vec::new();
                    let mut n = t;
                    while !done.load(Ordering::Relaxed) {
                        let args = match commands[n % commands.len()] {
                            ["copy"] => &copy_args[..],
                            args => args,
                        };
                        n += 1;
                        let run = run_jp_store(root, args, b"");
                        if run.code != Some(0) || run.stdout.contains("damage") {
                            failures.push(format!(
                                "{args:?}: exit {:?}\nstdout: {}\nstderr: {}",
                                run.code, run.stdout, run.stderr
                            ));
                        }
                    }
                    failures
                })
            })
            .collect();
        for id in &ids[..ids.len() - 1] {
            run_jp_store(&root, &["rm", id], b"").ok("rm");
        }
        done.store(true, Ordering::Relaxed);
        walkers
            .into_iter()
            .flat_map(|w| w.join().expect("walker"))
            .collect::<Vec<_>>()
    });
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    let store = Store::open_dir(&root, StoreOptions::default()).expect("open");
    let last = ConversationId::parse(&ids[ids.len() - 1]).expect("id");
    assert_eq!(requests(&store, &last), ["kept"]);
    assert_fsck_clean(&store, "after the removals");
}

/// Copies the files of directory `from` into a new directory `to`.
fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir(to).expect("mkdir");
    for e in fs::read_dir(from).expect("read dir") {
        let e = e.expect("entry");
        fs::copy(e.path(), to.join(e.file_name())).expect("copy");
    }
}

#[test]
fn fsck_tells_a_removal_in_progress_from_damage() {
    // On an object store, `rm` copies the conversation aside and then
    // deletes its objects: meanwhile the log at its name can be the start
    // of the one moved aside, shorter than its head cache says. Made here
    // by hand on files.
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("store");
    store_of(&root, 1);
    let conv = root.join("conversations/gone0");
    let log = conv.join("events.log");
    let kept = fs::metadata(&log).expect("log").len();
    for n in 10..13 {
        run_jp_store(&root, &["append", "gone0"], request("more", n).as_bytes()).ok("append");
    }
    let aside = root.join("conversations/.removed-gone0-1-2");
    copy_dir(&conv, &aside);
    let file = fs::OpenOptions::new()
        .write(true)
        .open(&log)
        .expect("open log");
    file.set_len(kept).expect("cut the log");
    drop(file);

    let fsck = run_jp_store(&root, &["fsck", "--json"], b"");
    let report = fsck.json("fsck of a removal in progress");
    assert_eq!(report["clean"], true, "{report}");
    let kinds: Vec<&str> = report["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .filter_map(|f| f["kind"].as_str())
        .collect();
    assert!(kinds.contains(&"being-removed"), "{report}");
    let repair = run_jp_store(&root, &["fsck", "--repair"], b"");
    assert!(
        !repair.ok("repair").contains("moved conversation"),
        "{}",
        repair.stdout
    );
    assert!(
        log.exists(),
        "the repair moved what the removal is deleting"
    );

    // A log that is not the start of the one moved aside is damage.
    let mut moved = fs::read(aside.join("events.log")).expect("read");
    moved[20] ^= 0x01;
    fs::write(aside.join("events.log"), moved).expect("write");
    let fsck = run_jp_store(&root, &["fsck", "--json"], b"");
    assert_eq!(fsck.code, Some(1), "{}", fsck.stdout);
    assert!(fsck.stdout.contains("damaged-record"), "{}", fsck.stdout);
}

#[test]
fn fsck_takes_a_removal_that_ends_while_it_looks_at_it_for_a_removal() {
    // On an object store `rm` deletes what is left at the conversation's
    // name and then the copy it moved aside. fsck, finding the log short,
    // asked whether the conversation still exists (yes: not all deleted)
    // and then looked for the copy (gone by then: the removal ended) and
    // reported damage; 1 run of about 5 of s3_gc's race. The removal is
    // made to end right after that lookup here, on files (the second
    // lookup of a log: the first is the listing's).
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("store");
    store_of(&root, 1);
    let conv = root.join("conversations/gone0");
    let log = conv.join("events.log");
    let kept = fs::metadata(&log).expect("log").len();
    for n in 10..13 {
        run_jp_store(&root, &["append", "gone0"], request("more", n).as_bytes()).ok("append");
    }
    let aside = root.join("conversations/.removed-gone0-1-2");
    copy_dir(&conv, &aside);
    let file = fs::OpenOptions::new()
        .write(true)
        .open(&log)
        .expect("open log");
    file.set_len(kept).expect("cut the log");
    drop(file);

    let files = jpstore_blobstore::backend::FileBackend::shared(std::sync::Arc::new(
        LocalStorage::open(&root).expect("storage"),
    ));
    let hooked = std::sync::Arc::new(jpstore_tests::hooked_backend::Hooked::new(files));
    let (conv_gone, aside_gone) = (conv.clone(), aside.clone());
    hooked.after_log_head(3, move || {
        fs::remove_dir_all(&conv_gone).expect("the rest of the conversation deleted");
        fs::remove_dir_all(&aside_gone).expect("the copy deleted");
    });
    let store = Store::open(hooked, StoreOptions::default()).expect("open");
    let report = jpstore_engine::fsck::run(&store, Default::default(), &mut |_| {}).expect("fsck");
    assert!(report.is_clean(), "{:?}", report.findings);
}

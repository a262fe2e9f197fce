//! The `jp-store` command on a store on S3 (`--store s3://BUCKET/PREFIX`),
//! against a real server (SeaweedFS, see `jpstore_remote::testing`): every
//! command's round trip, and two processes appending to one conversation
//! at once. Without a server the tests say they were skipped and why.

use std::path::Path;
use std::process::{Command, Output};

use jpstore_remote::testing::{server_or_skip, TestServer};
use jpstore_tests::{jp_store_bin, output_of, stdout_of_success};
use serde_json::Value;

struct S3Store {
    server: &'static TestServer,
    url: String,
    location: jpstore_remote::S3Location,
}

impl S3Store {
    fn new(server: &'static TestServer, name: &str) -> S3Store {
        let location = server.fresh(name);
        S3Store {
            server,
            url: location.to_string(),
            location,
        }
    }

    fn run(&self, args: &[&str], stdin: &[u8]) -> Output {
        run(self.server, &self.url, args, stdin)
    }

    /// Runs a command that must succeed; its standard output.
    fn ok(&self, args: &[&str], stdin: &[u8]) -> String {
        stdout_of_success(self.run(args, stdin), args)
    }
}

fn command(server: &TestServer, url: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(jp_store_bin());
    cmd.arg("--store").arg(url).args(args);
    for (k, v) in server.env() {
        cmd.env(k, v);
    }
    cmd.env_remove("JP_STORE_DIR");
    cmd.env_remove("JP_STORE_CACHE_DIR");
    cmd
}

fn run(server: &TestServer, url: &str, args: &[&str], stdin: &[u8]) -> Output {
    output_of(&mut command(server, url, args), stdin)
}

fn user(text: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!([{"type": "chat_request", "content": text}]))
        .expect("json")
}

#[test]
fn every_command_works_on_a_store_on_s3() {
    let Some(server) = server_or_skip("every_command_works_on_a_store_on_s3") else {
        return;
    };
    let s = S3Store::new(server, "cli");
    assert_eq!(s.ok(&["init"], b"").trim(), s.url);
    // A second init leaves the store as it is.
    let again = s.run(&["init"], b"");
    assert!(again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("already a jp-store store"));

    let id = s.ok(&["new"], b"").trim().to_string();
    s.ok(&["append", &id], &user("hello from s3"));
    let reply = serde_json::to_vec(&serde_json::json!([
        {"type": "chat_response", "content": "a reply", "role": "assistant"}
    ]))
    .expect("json");
    let appended = s.run(&["append", &id], &reply);
    let view: Value = serde_json::from_str(&s.ok(&["view", &id], b"")).expect("view json");
    let events = view.as_array().expect("an array");
    assert_eq!(events[0]["content"], "hello from s3");
    assert_eq!(events.len(), if appended.status.success() { 2 } else { 1 });
    assert!(s.ok(&["print", &id], b"").contains("hello from s3"));

    // Content moved into the blob store and back.
    let big = "x".repeat(10_000);
    let tool = serde_json::to_vec(&serde_json::json!([
        {"type": "chat_request", "content": "read it"},
    ]))
    .expect("json");
    s.ok(&["append", &id], &tool);
    let with_blob = serde_json::to_vec(&serde_json::json!([
        {"type": "chat_request", "content": big},
    ]))
    .expect("json");
    s.ok(&["append", &id], &with_blob);
    assert!(s.ok(&["view", &id], b"").contains(&big));

    // Import a JP workspace, export it again.
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/jp-workspace/.jp/conversations");
    let first = std::fs::read_dir(&fixture)
        .expect("fixture")
        .map(|e| e.expect("entry").path())
        .find(|p| p.is_dir())
        .expect("a fixture conversation");
    s.ok(&["import", first.to_str().expect("utf-8")], b"");
    let listed: Value = serde_json::from_str(&s.ok(&["ls", "--json"], b"")).expect("ls json");
    let ids: Vec<String> = listed
        .as_array()
        .expect("array")
        .iter()
        .map(|c| c["id"].as_str().expect("id").to_string())
        .collect();
    assert_eq!(ids.len(), 2, "{ids:?}");
    let out = tempfile::tempdir().expect("tempdir");
    let export_dir = out.path().join("export.json");
    s.ok(
        &["export", &id, "--out", export_dir.to_str().expect("utf-8")],
        b"",
    );
    assert!(export_dir.exists());

    let fork = s.ok(&["fork", &id], b"").trim().to_string();
    s.ok(&["compact", &fork], b"");
    s.ok(&["stats"], b"");
    let fsck = s.ok(&["fsck"], b"");
    assert!(fsck.contains("clean"), "{fsck}");

    // gc reports (its sweep on S3, which waits out writers elsewhere, is
    // tested in s3_gc.rs with a bound of seconds).
    s.ok(&["gc", "--dry-run"], b"");

    // Nor does upgrade replace logs there; its dry run reads and reports.
    let upgrade = s.run(&["upgrade"], b"");
    assert_eq!(upgrade.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&upgrade.stderr).contains("upgrade cannot rewrite the logs"));
    let dry: Value = serde_json::from_str(&s.ok(&["upgrade", "--dry-run", "--json"], b""))
        .expect("upgrade json");
    assert_eq!(dry["logs_upgraded"], 0, "{dry}");

    s.ok(&["rm", &fork], b"");
    let after: Value = serde_json::from_str(&s.ok(&["ls", "--json"], b"")).expect("ls json");
    assert_eq!(after.as_array().expect("array").len(), 2);
}

#[test]
fn serve_shows_a_store_on_s3() {
    let Some(server) = server_or_skip("serve_shows_a_store_on_s3") else {
        return;
    };
    let s = S3Store::new(server, "serve");
    s.ok(&["init"], b"");
    let id = s
        .ok(&["new", "--title", "seen on the web"], b"")
        .trim()
        .to_string();
    s.ok(&["append", &id], &user("hello from a bucket"));
    let web = jpstore_tests::web::Server::start_env(
        std::ffi::OsStr::new(&s.url),
        &["--addr", "127.0.0.1:0"],
        &server.env(),
    );
    let list = web.get("/");
    assert_eq!(list.status, 200);
    assert!(list.text().contains("seen on the web"), "{}", list.text());
    let page = web.get(&format!("/conversations/{id}"));
    assert_eq!(page.status, 200);
    assert!(
        page.text().contains("hello from a bucket"),
        "{}",
        page.text()
    );
    assert_eq!(web.get("/conversations/not-an-id").status, 404);
    let (status, stderr) = web.interrupt();
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains(&s.url),
        "the server names the store it serves: {stderr}"
    );
}

#[test]
fn a_store_on_s3_refuses_what_is_not_there_naming_it() {
    let Some(server) = server_or_skip("a_store_on_s3_refuses_what_is_not_there_naming_it") else {
        return;
    };
    let s = S3Store::new(server, "missing");
    let out = s.run(&["ls"], b"");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&s.url)
            && err.contains("not a jp-store store")
            && err.contains(&format!(
                "create one with `jp-store --store {} init`",
                s.url
            )),
        "{err}"
    );
    let bad = run(server, "s3://No_Such/x", &["ls"], b"");
    assert_eq!(bad.status.code(), Some(2));
    let other = run(server, "gs://bucket/x", &["ls"], b"");
    assert_eq!(other.status.code(), Some(2));
}

/// `writers` processes at a time appending `rounds` batches each to one
/// conversation, every process a `jp-store -v append` of its own
/// (`prefix` gives each its store options: on S3, a cache directory per
/// writer, as on as many machines). Every append must succeed, and the
/// conversation must hold every batch exactly once, each writer's in its
/// order. Returns the appends that took more than one attempt (another
/// writer appended first).
fn appending_loops(
    command: &(dyn Fn(&[&str]) -> Command + Sync),
    prefix: &(dyn Fn(usize) -> Vec<String> + Sync),
    writers: usize,
    rounds: usize,
) -> usize {
    let id = stdout_of_success(output_of(&mut command(&["new"]), b""), "new")
        .trim()
        .to_string();
    let results: Vec<(String, Output)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..writers)
            .map(|w| {
                let id = &id;
                scope.spawn(move || {
                    let own = prefix(w);
                    (0..rounds)
                        .map(|i| {
                            let text = format!("{w}-{i}");
                            let mut args: Vec<&str> = own.iter().map(String::as_str).collect();
                            args.extend(["-v", "append", id]);
                            (text.clone(), output_of(&mut command(&args), &user(&text)))
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("writer thread"))
            .collect()
    });
    let failed: Vec<String> = results
        .iter()
        .filter(|(_, out)| !out.status.success())
        .map(|(text, out)| format!("{text}: {}", String::from_utf8_lossy(&out.stderr)))
        .collect();
    assert!(
        failed.is_empty(),
        "{} of {} appends failed: {failed:#?}",
        failed.len(),
        results.len()
    );
    let retried = results
        .iter()
        .filter(|(_, out)| {
            String::from_utf8_lossy(&out.stderr).contains("another writer appended first")
        })
        .count();
    let view = stdout_of_success(output_of(&mut command(&["view", &id]), b""), "view");
    let view: Value = serde_json::from_str(&view).expect("view json");
    let seen: Vec<(usize, usize)> = view
        .as_array()
        .expect("array")
        .iter()
        .map(|e| {
            let text = e["content"].as_str().expect("text");
            let (w, i) = text.split_once('-').expect("w-i");
            (w.parse().expect("writer"), i.parse().expect("round"))
        })
        .collect();
    assert_eq!(seen.len(), writers * rounds, "{seen:?}");
    for w in 0..writers {
        let mine: Vec<usize> = seen.iter().filter(|s| s.0 == w).map(|s| s.1).collect();
        assert_eq!(mine, (0..rounds).collect::<Vec<_>>(), "writer {w}");
    }
    let fsck = stdout_of_success(output_of(&mut command(&["fsck"]), b""), "fsck");
    assert!(fsck.contains("clean"), "{fsck}");
    retried
}

/// Appends to one conversation from processes on as many machines (a
/// cache directory each) take turns: a writer whose segment another
/// created first (HTTP 412) reads the log again and appends after it. Of
/// 2 x 15 appends, 11 failed before (`another writer appended at offset
/// ... first`).
#[test]
fn processes_appending_to_one_conversation_on_s3_take_turns_and_none_fails() {
    let Some(server) =
        server_or_skip("processes_appending_to_one_conversation_on_s3_take_turns_and_none_fails")
    else {
        return;
    };
    let caches = tempfile::tempdir().expect("tempdir");
    let mut retried = Vec::new();
    for (writers, rounds) in [(2, 15), (4, 50)] {
        let s = S3Store::new(server, "turns");
        s.ok(&["init"], b"");
        let cache_of = |w: usize| {
            let dir = caches
                .path()
                .join(format!("{}-{writers}-{w}", s.location.prefix));
            vec!["--cache-dir".to_string(), dir.display().to_string()]
        };
        let command = |args: &[&str]| command(server, &s.url, args);
        retried.push(appending_loops(&command, &cache_of, writers, rounds));
    }
    eprintln!("appends that another writer beat at first: {retried:?} (of 30, of 200)");
    // The race was run: writers did collide (and the losers appended again).
    assert!(retried[1] > 0, "no append of 4 x 50 ever collided");
}

/// The same loops on a store in a directory never fail (there, appenders
/// wait for the log's lock) and never need a second attempt.
#[test]
fn processes_appending_to_one_conversation_in_a_directory_never_fail() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = dir.path().join("store");
    let command = |args: &[&str]| {
        let mut cmd = Command::new(jp_store_bin());
        cmd.arg("--store").arg(&store).args(args);
        cmd.env_remove("JP_STORE_DIR");
        cmd
    };
    stdout_of_success(output_of(&mut command(&["init"]), b""), "init");
    for (writers, rounds) in [(2, 15), (4, 50)] {
        assert_eq!(
            appending_loops(&command, &|_| Vec::new(), writers, rounds),
            0
        );
    }
}

/// A batch whose segment another writer created first: an `append` reads
/// the log again and appends after it; a `compact`, computed from the
/// turns it read, is not appended and says to run the command again. The
/// first writer's segment PUT is held by a proxy while another process
/// appends.
#[test]
fn a_batch_another_writer_beat_is_appended_again_or_the_command_says_to_run_it_again() {
    use jpstore_tests::s3_fault_proxy::{Fault, FaultProxy, Rule};
    let Some(server) = server_or_skip(
        "a_batch_another_writer_beat_is_appended_again_or_the_command_says_to_run_it_again",
    ) else {
        return;
    };
    let s = S3Store::new(server, "beaten");
    s.ok(&["init"], b"");
    let id = s.ok(&["new"], b"").trim().to_string();
    let turn = |i: usize| {
        format!(
            "{{\"type\":\"turn_start\"}}\n{{\"type\":\"chat_request\",\"content\":\"q{i}\"}}\n\
             {{\"type\":\"chat_response\",\"message\":\"a{i}\"}}\n"
        )
    };
    s.ok(&["append", &id], turn(0).as_bytes());
    s.ok(&["append", &id], turn(1).as_bytes());
    let proxy = FaultProxy::start(&server.endpoint);
    // Runs `args` through the proxy while its first segment PUT is held,
    // and appends `other` directly meanwhile.
    let beaten = |args: &[&str], stdin: &[u8], other: &str| -> Output {
        proxy.forget();
        proxy.add(
            Rule::on(
                "PUT",
                "events.log.seg/",
                Fault::Delay(std::time::Duration::from_secs(5)),
            )
            .times(1),
        );
        std::thread::scope(|scope| {
            let held = scope.spawn(|| {
                let mut cmd = command(server, &s.url, args);
                cmd.env("AWS_ENDPOINT_URL", proxy.endpoint());
                output_of(&mut cmd, stdin)
            });
            let mut polls = 0;
            while !proxy
                .seen()
                .iter()
                .any(|r| r.method == "PUT" && r.target.contains("events.log.seg/"))
            {
                polls += 1;
                assert!(polls < 6000, "the held command never wrote its segment");
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            s.ok(&["append", &id], &user(other));
            held.join().expect("held command")
        })
    };
    let out = beaten(&["-v", "append", &id], &user("mine"), "theirs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("appended at attempt 2: another writer appended first"),
        "{stderr}"
    );
    let view = s.ok(&["view", &id], b"");
    let theirs = view.find("\"theirs\"").expect("theirs");
    let mine = view.find("\"mine\"").expect("mine");
    assert!(theirs < mine, "{view}");
    assert_eq!(view.matches("\"mine\"").count(), 1, "{view}");

    // An attach likewise: its files are stored once, its request appended
    // after the other writer's batch.
    let files = tempfile::tempdir().expect("tempdir");
    let file = files.path().join("notes.txt");
    std::fs::write(&file, "attached while another writer appended\n").expect("write");
    let file = file.to_str().expect("UTF-8 path");
    let out = beaten(&["attach", &id, file, "-m", "attached"], b"", "theirs too");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let view = s.ok(&["view", &id], b"");
    let theirs = view.find("\"theirs too\"").expect("theirs too");
    let mine = view.find("\"attached\"").expect("attached");
    assert!(theirs < mine, "{view}");
    assert_eq!(view.matches("\"attached\"").count(), 1, "{view}");

    let before = s.ok(&["export", &id, "--format", "json"], b"");
    let out = beaten(
        &["compact", &id, "--summary", "short", "--to", "0"],
        b"",
        "late",
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("another writer appended at offset") && stderr.contains("HTTP 412"),
        "{stderr}"
    );
    assert!(
        stderr.trim_end().ends_with("run the command again"),
        "{stderr}"
    );
    let after: Value =
        serde_json::from_str(&s.ok(&["export", &id, "--format", "json"], b"")).expect("json");
    let before: Value = serde_json::from_str(&before).expect("json");
    let events = |v: &Value| jpstore_tests::events_of(v);
    // Only the other writer's batch was added: no compaction.
    assert_eq!(events(&after).len(), events(&before).len() + 1);
    assert!(!serde_json::to_string(&after)
        .expect("json")
        .contains("\"compaction\""));
}

/// The requests a command made, from the line `-v` prints:
/// `s3: N requests (G GET, H HEAD, P PUT, L LIST, D DELETE); C objects from the cache`.
fn requests(out: &Output) -> (u64, u64) {
    let err = String::from_utf8_lossy(&out.stderr);
    let line = err
        .lines()
        .find_map(|l| l.strip_prefix("jp-store: s3: "))
        .unwrap_or_else(|| panic!("no request count in {err}"));
    let number = |after: &str| -> u64 {
        line.split(after)
            .next()
            .and_then(|s| s.split([' ', '(', ';']).rfind(|w| !w.is_empty()))
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no count before {after:?} in {line}"))
    };
    (number(" requests"), number(" objects from the cache"))
}

/// The PUT and DELETE requests a `-v` run said it made (the requests that
/// change the bucket).
fn writes(out: &Output) -> u64 {
    let err = String::from_utf8_lossy(&out.stderr);
    let line = err
        .lines()
        .find_map(|l| l.strip_prefix("jp-store: s3: "))
        .unwrap_or_else(|| panic!("no request count in {err}"));
    ["PUT", "DELETE"]
        .iter()
        .map(|kind| {
            line.split(&format!(" {kind}"))
                .next()
                .and_then(|s| s.rsplit([' ', '(']).next())
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or_else(|| panic!("no {kind} count in {line}"))
        })
        .sum()
}

/// Runs `jp-store -v --cache-dir CACHE ARGS...`, which must succeed: its
/// standard output and (requests, objects from the cache).
fn with_cache(s: &S3Store, cache: &Path, args: &[&str], stdin: &[u8]) -> (String, (u64, u64)) {
    let mut all = vec!["-v", "--cache-dir", cache.to_str().expect("UTF-8 path")];
    all.extend_from_slice(args);
    let out = s.run(&all, stdin);
    assert!(
        out.status.success(),
        "jp-store {all:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        requests(&out),
    )
}

#[test]
fn append_and_view_make_a_pinned_number_of_requests_and_a_warm_view_two() {
    let Some(server) =
        server_or_skip("append_and_view_make_a_pinned_number_of_requests_and_a_warm_view_two")
    else {
        return;
    };
    let s = S3Store::new(server, "counts");
    let cache = tempfile::tempdir().expect("tempdir");
    s.ok(&["init"], b"");
    let id = s.ok(&["new", "--title", "counts"], b"").trim().to_string();
    s.ok(&["append", &id], &user("first"));
    // These counts are what the commands cost today (format-spec.md 5.8):
    // a change that makes them grow must change this test, and say why.
    let out = s.run(&["-v", "--no-cache", "append", &id], &user("second"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (append, _) = requests(&out);
    assert!(
        append <= 8,
        "append of one event, no cache: {append} requests"
    );
    let out = s.run(&["-v", "--no-cache", "view", &id], b"");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (cold, _) = requests(&out);
    // A read writes nothing: the view takes the settings cached in the
    // head when the conversation was made (5 GET, 2 LIST). It computed them
    // and wrote them back in the head: the base config found and read (a
    // LIST and a GET) and the head PUT, 10 requests.
    assert!(cold <= 7, "cold view: {cold} requests");
    assert_eq!(writes(&out), 0, "a view writes nothing");
    // With a cache: the first view fills it; the second makes two LISTs,
    // of the store's root (the layout, and the ETag of config.toml) and of
    // the log (whether it changed): the log's objects, its head cache and
    // the config come from the cache.
    let (first, _) = with_cache(&s, cache.path(), &["view", &id], b"");
    let (second, (n, hits)) = with_cache(&s, cache.path(), &["view", &id], b"");
    assert_eq!(first, second);
    assert!(hits >= 3, "{hits} objects from the cache");
    assert_eq!(n, 2, "warm view: {n} requests");
    // An append with a warm cache: the root, the log (under the lock), the
    // lock's prefix, the segment and the head.
    let (_, (warm_append, _)) = with_cache(&s, cache.path(), &["append", &id], &user("third"));
    assert!(
        warm_append <= 5,
        "append with a warm cache: {warm_append} requests"
    );
    // The head it wrote is cached for the log it appended to: the next view
    // is warm at once.
    let (_, (after, _)) = with_cache(&s, cache.path(), &["view", &id], b"");
    assert_eq!(after, 2, "view after an append: {after} requests");
    eprintln!(
        "append: {append} requests ({warm_append} with a warm cache); view: {cold} cold, {n} warm ({hits} from the cache)"
    );
}

/// The cache never makes a command read something stale: what another
/// process appends, a config.toml replaced, a conversation removed and made
/// again under its id, are all seen by the next command with a warm cache.
#[test]
fn a_warm_cache_never_hides_what_another_process_changed() {
    let Some(server) = server_or_skip("a_warm_cache_never_hides_what_another_process_changed")
    else {
        return;
    };
    let s = S3Store::new(server, "stale");
    let cache = tempfile::tempdir().expect("tempdir");
    let cache = cache.path();
    s.ok(&["init"], b"");
    let id = s
        .ok(&["new", "--id", "17000000001"], b"")
        .trim()
        .to_string();
    s.ok(&["append", &id], &user("first"));
    with_cache(&s, cache, &["view", &id], b"");
    let (before, (n, _)) = with_cache(&s, cache, &["view", &id], b"");
    assert_eq!(n, 2);
    assert!(before.contains("first") && !before.contains("second"));

    // Another process (no cache) appends: the warm view lists the log, sees
    // it changed, and reads the new segment and head.
    s.ok(&["--no-cache", "append", &id], &user("second"));
    let (after, (n, _)) = with_cache(&s, cache, &["view", &id], b"");
    assert!(
        after.contains("first") && after.contains("second"),
        "{after}"
    );
    assert!(n > 2, "the changed log is read: {n} requests");

    // config.toml replaced behind the cache's back: the next command reads
    // the new one (its ETag changed in the root's listing).
    let anthropic =
        |s: &S3Store| with_cache(s, cache, &["view", &id, "--format", "anthropic"], b"");
    let (plain, _) = anthropic(&s);
    assert!(!plain.contains("answer in haiku"), "{plain}");
    let backend = server.backend(s.location.clone());
    jpstore_blobstore::backend::Backend::replace(
        &backend,
        Path::new("config.toml"),
        b"[assistant]\nsystem_prompt = \"answer in haiku\"\n",
        Path::new(""),
        jpstore_blobstore::backend::Expect::Any,
        true,
    )
    .expect("replace config.toml");
    let (prompted, _) = anthropic(&s);
    assert!(prompted.contains("answer in haiku"), "{prompted}");

    // The conversation removed and made again under its id: nothing of the
    // old one comes back from the cache.
    s.ok(&["--no-cache", "rm", &id], b"");
    s.ok(&["--no-cache", "new", "--id", &id], b"");
    s.ok(&["--no-cache", "append", &id], &user("another"));
    let (again, _) = with_cache(&s, cache, &["view", &id], b"");
    assert!(
        again.contains("another") && !again.contains("first"),
        "{again}"
    );
    let (again2, (n, _)) = with_cache(&s, cache, &["view", &id], b"");
    assert_eq!(again, again2);
    assert_eq!(n, 2);
}

/// With no credentials in the environment, opening a store on S3 says so
/// and names the variables, instead of asking a metadata endpoint.
#[test]
fn no_credentials_are_named() {
    let mut cmd = Command::new(jp_store_bin());
    cmd.args(["--store", "s3://some-bucket/p", "ls"]);
    for (k, _) in std::env::vars() {
        if k.starts_with("AWS_") || k.starts_with("JP_STORE_") {
            cmd.env_remove(k);
        }
    }
    // No user configuration file either.
    let config = tempfile::tempdir().expect("tempdir");
    cmd.env("XDG_CONFIG_HOME", config.path());
    let out = cmd.output().expect("jp-store ran");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no credentials for s3://some-bucket/p: set AWS_ACCESS_KEY_ID"),
        "{err}"
    );
}

/// An error names the object's URL once, with the HTTP status.
#[test]
fn errors_name_the_url_once() {
    let Some(server) = server_or_skip("errors_name_the_url_once") else {
        return;
    };
    let url = "s3://jpstore-no-such-bucket/p";
    let out = run(server, url, &["ls"], b"");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.matches(url).count(), 1, "{err}");
    assert!(
        err.contains("HTTP 404: the bucket jpstore-no-such-bucket does not exist"),
        "{err}"
    );
}

#[test]
fn attach_lists_the_loose_objects_once_instead_of_asking_per_file() {
    let Some(server) =
        server_or_skip("attach_lists_the_loose_objects_once_instead_of_asking_per_file")
    else {
        return;
    };
    let s = S3Store::new(server, "attach-loose");
    s.ok(&["init"], b"");
    let id = s.ok(&["new", "--title", "attach"], b"").trim().to_string();
    let files = tempfile::tempdir().expect("tempdir");
    const FILES: usize = 60;
    for i in 0..FILES {
        std::fs::write(
            files.path().join(format!("f{i:02}.txt")),
            format!("file {i}: {}\n", "content ".repeat(i)),
        )
        .expect("write");
    }
    // Three of the files are in the store already, as loose objects.
    for i in [3, 30, 59] {
        let path = files.path().join(format!("f{i:02}.txt"));
        s.ok(&["blob", "put", path.to_str().expect("UTF-8 path")], b"");
    }
    let dir = files.path().to_str().expect("UTF-8 path");
    let out = s.run(&["-v", "--no-cache", "attach", &id, dir, "--json"], b"");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(report["files"], FILES);
    // The loose objects were seen: stored once, not again in the pack.
    assert_eq!(report["new_blobs"], FILES - 3, "{report}");
    let (n, _) = requests(&out);
    // One listing of the loose objects, not a request per file that no
    // pack holds (there were 60 more before).
    eprintln!("attach requests: {n}");
    assert!(n < 30, "attach of {FILES} files: {n} requests");
    // Every file reads back, the three loose ones included.
    let view = s.ok(&["view", &id], b"");
    for i in [0, 3, 30, 59] {
        assert!(
            view.contains(&format!("file {i}: ")),
            "file {i} in the view"
        );
    }
    assert!(s.ok(&["fsck", "--json"], b"").contains("\"clean\": true"));
}

/// The files of a cache directory (its entries, temp files left out).
fn cache_files(cache: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for store in std::fs::read_dir(cache).expect("cache").flatten() {
        for fan in std::fs::read_dir(store.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            if fan.file_name() == "tmp" {
                continue;
            }
            for entry in std::fs::read_dir(fan.path())
                .into_iter()
                .flatten()
                .flatten()
            {
                out.push(entry.path());
            }
        }
    }
    out.sort();
    out
}

/// Cache entries swapped on disk (two whole files, each under the other's
/// name) are misses: each conversation still shows its own title and
/// events, never the other's (format-spec.md 5.8: an entry is bound to its
/// name, the object's key and ETag).
#[test]
fn cache_entries_swapped_on_disk_are_misses_not_another_objects_bytes() {
    let Some(server) =
        server_or_skip("cache_entries_swapped_on_disk_are_misses_not_another_objects_bytes")
    else {
        return;
    };
    let s = S3Store::new(server, "swapped");
    let cache = tempfile::tempdir().expect("tempdir");
    let cache = cache.path();
    s.ok(&["init"], b"");
    let convs = [
        ("17000000001", "title one", "request alpha"),
        ("17000000002", "title two", "request bravo"),
    ];
    for (id, title, text) in convs {
        s.ok(&["new", "--id", id, "--title", title], b"");
        // One timestamp: the two appends are segments of one length (the
        // creation times may differ in length, and so the logs' first
        // objects).
        let request = serde_json::json!([{"type": "chat_request",
            "timestamp": "2026-05-29 10:00:00.5", "content": text}]);
        s.ok(&["append", id], request.to_string().as_bytes());
    }
    let shown = |id: &str| with_cache(&s, cache, &["print", id], b"").0;
    for (id, title, text) in convs {
        let out = shown(id);
        assert!(out.contains(title) && out.contains(text), "{out}");
    }
    // The entries holding each conversation's bytes, swapped pairwise
    // (entries of one length: the cache checks the length it expects).
    let holding = |marker: &str| -> Vec<(u64, std::path::PathBuf)> {
        let mut found: Vec<_> = cache_files(cache)
            .into_iter()
            .filter(|p| {
                std::fs::read(p)
                    .is_ok_and(|b| b.windows(marker.len()).any(|w| w == marker.as_bytes()))
            })
            .map(|p| (std::fs::metadata(&p).expect("entry").len(), p))
            .collect();
        found.sort();
        found
    };
    let mut swapped = Vec::new();
    for (one, two) in [
        ("title one", "title two"),
        ("request alpha", "request bravo"),
    ] {
        let mut others = holding(two);
        for (len, a) in holding(one) {
            let Some(at) = others.iter().position(|(l, _)| *l == len) else {
                continue;
            };
            let (_, b) = others.remove(at);
            let tmp = a.with_extension("swap");
            std::fs::rename(&a, &tmp).expect("swap");
            std::fs::rename(&b, &a).expect("swap");
            std::fs::rename(&tmp, &b).expect("swap");
            swapped.push(one);
        }
    }
    assert!(
        swapped.contains(&"request alpha"),
        "the entries of the appended segments swapped: {swapped:?}"
    );
    for (id, title, text) in convs {
        let out = shown(id);
        let (other_title, other_text) = if id == convs[0].0 {
            (convs[1].1, convs[1].2)
        } else {
            (convs[0].1, convs[0].2)
        };
        assert!(
            out.contains(title)
                && out.contains(text)
                && !out.contains(other_title)
                && !out.contains(other_text),
            "{id} shows its own title and request: {out}"
        );
    }
}

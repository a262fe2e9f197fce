//! Faults between the `jp-store` command and a real S3 server (SeaweedFS,
//! see `jpstore_remote::testing`), injected by a proxy on loopback
//! (`jpstore_tests::s3_fault_proxy`) that forwards real requests: answers
//! lost or replaced by a 5xx after the server applied the request, requests
//! dropped before it, 5xx storms, answers held past the client's timeout,
//! two writers racing through a slow proxy, and a process killed while the
//! proxy dribbles its upload.
//!
//! After each fault: a command either succeeds (its retry recognised its own
//! first attempt) or fails naming the object and the status; nothing
//! acknowledged is lost, nothing is duplicated or interleaved, `fsck` is
//! clean, and the next command works. Without a server the tests say they
//! were skipped and why.

use jpstore_engine::internal::StoreInterior as _;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use jpstore_blobstore::backend::Backend;
use jpstore_remote::testing::{server_or_skip, TestServer};
use jpstore_remote::S3Location;
use jpstore_tests::s3_fault_proxy::{Fault, FaultProxy, Rule};
use jpstore_tests::{jp_store_bin, output_of, stdout_of_success};
use serde_json::{json, Value};

/// A store on the test server, reached through a fault proxy.
struct Faulty {
    server: &'static TestServer,
    proxy: FaultProxy,
    location: S3Location,
    url: String,
    /// The cache and configuration directories of the commands.
    home: tempfile::TempDir,
}

/// What became of a batch a command was asked to append.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Outcome {
    /// Acknowledged (exit 0): in the log exactly once.
    Acked,
    /// Refused with "nothing ... written/appended": not in the log.
    Refused,
    /// Failed with an outcome the command could not know: at most once.
    Unknown,
}

impl Faulty {
    fn new(test: &str) -> Option<Faulty> {
        let server = server_or_skip(test)?;
        let location = server.fresh(test);
        Some(Faulty {
            server,
            proxy: FaultProxy::start(&server.endpoint),
            url: location.to_string(),
            location,
            home: tempfile::tempdir().expect("tempdir"),
        })
    }

    /// A command on this store through the proxy, with generous timeouts
    /// (`env` may set others).
    fn command(&self, args: &[&str], env: &[(&str, &str)]) -> Command {
        let mut cmd = Command::new(jp_store_bin());
        cmd.arg("--store").arg(&self.url).args(args);
        for (k, v) in self.server.env() {
            cmd.env(k, v);
        }
        cmd.env_remove("JP_STORE_DIR")
            .env_remove("JP_STORE_CACHE_DIR")
            .env_remove("JP_STORE_CONFIG")
            .env("AWS_ENDPOINT_URL", self.proxy.endpoint())
            .env("XDG_CACHE_HOME", self.home.path().join("cache"))
            .env("XDG_CONFIG_HOME", self.home.path().join("config"))
            .env("JP_STORE_S3_REQUEST_TIMEOUT", "30s")
            .env("JP_STORE_S3_RETRY_TIMEOUT", "60s");
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd
    }

    fn run_env(&self, args: &[&str], stdin: &[u8], env: &[(&str, &str)]) -> Output {
        output_of(&mut self.command(args, env), stdin)
    }

    /// Starts a command, its standard input written and closed.
    fn spawn(&self, args: &[&str], stdin: &[u8], env: &[(&str, &str)]) -> std::process::Child {
        let mut child = self
            .command(args, env)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start jp-store");
        {
            use std::io::Write;
            let mut input = child.stdin.take().expect("stdin");
            input.write_all(stdin).expect("write stdin");
        }
        child
    }

    fn run(&self, args: &[&str], stdin: &[u8]) -> Output {
        self.run_env(args, stdin, &[])
    }

    /// Runs a command that must succeed; its standard output.
    fn ok(&self, args: &[&str], stdin: &[u8]) -> String {
        stdout_of_success(self.run(args, stdin), args)
    }

    /// A store with one conversation; its id.
    fn init_with_conversation(&self) -> String {
        self.ok(&["init"], b"");
        self.ok(&["new"], b"").trim().to_string()
    }

    /// The backend of the store on the server itself, not through the
    /// proxy.
    fn direct(&self) -> jpstore_remote::S3Backend {
        self.server.backend(self.location.clone())
    }

    /// The full key of `rel` as errors name it.
    fn url_of(&self, rel: &str) -> String {
        format!("{}/{rel}", self.url)
    }

    /// The `content` of every `chat_request` of the conversation, in order,
    /// read with no cache.
    fn requests(&self, id: &str) -> Vec<String> {
        let view: Value =
            serde_json::from_str(&self.ok(&["--no-cache", "view", id], b"")).expect("view json");
        view.as_array()
            .expect("an array")
            .iter()
            .filter(|e| e["type"] == "chat_request")
            .map(|e| e["content"].as_str().unwrap_or("").to_string())
            .collect()
    }

    /// `fsck` (with every object read, and no cache) finds nothing wrong.
    fn assert_fsck_clean(&self, what: &str) {
        let out = self.run(&["--no-cache", "fsck", "--read-data"], b"");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && text.contains("clean"),
            "{what}: fsck: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Checks the conversation against what the commands said of each
    /// batch, in the order they were acknowledged, then that another append
    /// works.
    fn assert_consistent(&self, id: &str, history: &mut Vec<(String, Outcome)>, what: &str) {
        let seen = self.requests(id);
        for (text, outcome) in history.iter() {
            let n = seen.iter().filter(|t| *t == text).count();
            match outcome {
                Outcome::Acked => assert_eq!(n, 1, "{what}: {text} acknowledged, found {n} times"),
                Outcome::Refused => assert_eq!(n, 0, "{what}: {text} refused, found {n} times"),
                Outcome::Unknown => assert!(n <= 1, "{what}: {text} found {n} times"),
            }
        }
        let acked: Vec<&String> = history
            .iter()
            .filter(|(_, o)| *o == Outcome::Acked)
            .map(|(t, _)| t)
            .collect();
        let in_log: Vec<&String> = seen.iter().filter(|t| acked.contains(t)).collect();
        assert_eq!(in_log, acked, "{what}: acknowledged batches out of order");
        self.assert_fsck_clean(what);
        let next = format!("after {what}");
        self.ok(&["append", id], &request(&next));
        history.push((next, Outcome::Acked));
    }
}

/// A batch of one request whose content is `text`.
fn request(text: &str) -> Vec<u8> {
    serde_json::to_vec(&json!([{"type": "chat_request", "content": text}])).expect("json")
}

/// The text of the resource of [`request_with_resource`].
fn resource_text(text: &str) -> String {
    format!("{text}: {}", "resource text ".repeat(400))
}

/// The key of the loose object of the resource of
/// [`request_with_resource`]: `blobs/objects/<2 hex>/<62 hex>` of the
/// SHA-256 of its text.
fn resource_blob_key(text: &str) -> String {
    use sha2::Digest;
    let hex = hex::encode(sha2::Sha256::digest(resource_text(text).as_bytes()));
    format!("blobs/objects/{}/{}", &hex[..2], &hex[2..])
}

/// A batch of one request with a resource of its own (a new blob).
fn request_with_resource(text: &str) -> Vec<u8> {
    let body = resource_text(text);
    serde_json::to_vec(&json!([{
        "type": "chat_request",
        "content": text,
        "resources": [{"uri": format!("file:///r/{}", text.replace(' ', "-")), "text": body}],
    }]))
    .expect("json")
}

/// What became of a command, from its exit status and its error.
fn outcome(out: &Output) -> Outcome {
    if out.status.success() {
        return Outcome::Acked;
    }
    let err = String::from_utf8_lossy(&out.stderr);
    if err.contains("the outcome of this append is unknown") {
        Outcome::Unknown
    } else if err.contains("nothing of this batch was written")
        || err.contains("nothing was appended")
    {
        Outcome::Refused
    } else {
        panic!("a failed append says what became of its batch: {err}")
    }
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Every fault of an answer, for PUTs that reach the server (the first
/// three) or not (the last).
fn answer_faults() -> Vec<Fault> {
    vec![
        Fault::LoseAnswer,
        Fault::ReplaceAnswer(500),
        Fault::ReplaceAnswer(503),
        Fault::Drop,
    ]
}

/// An append whose segment PUT, head cache PUT or blob PUT reached the
/// server but whose answer was lost, or replaced by a 5xx, or that never
/// reached it: the client's retry finds its own first attempt (a 412
/// whose segment holds its bytes, a blob that exists) and the append is
/// acknowledged once.
#[test]
fn appends_whose_answers_are_lost_or_5xx_are_recognised_by_content() {
    let Some(s) = Faulty::new("faults-append") else {
        return;
    };
    let id = s.init_with_conversation();
    let mut history = Vec::new();
    for (i, fault) in answer_faults().into_iter().enumerate() {
        for (what, key, resource) in [
            ("segment", "events.log.seg/", false),
            ("head cache", "/head", false),
            ("loose blob", "", true),
            ("segment of a batch with a blob", "events.log.seg/", true),
        ] {
            let text = format!("{what} {fault:?} {i}");
            let key = match key {
                "" => resource_blob_key(&text),
                k => k.to_string(),
            };
            s.proxy.forget();
            s.proxy.add(Rule::on("PUT", &key, fault.clone()));
            let stdin = if resource {
                request_with_resource(&text)
            } else {
                request(&text)
            };
            let out = s.run(&["append", &id], &stdin);
            s.proxy.clear();
            assert_eq!(s.proxy.faults(), 1, "{text}: the fault was injected");
            assert!(out.status.success(), "{text}: {}", stderr(&out));
            history.push((text.clone(), outcome(&out)));
            s.assert_consistent(&id, &mut history, &text);
        }
    }
}

/// `new`, whose log is created with a conditional PUT: a lost answer makes
/// the client's retry get 412 for the log it created itself.
#[test]
fn a_new_conversation_whose_answers_are_lost_is_created_once() {
    let Some(s) = Faulty::new("faults-new") else {
        return;
    };
    s.ok(&["init"], b"");
    for fault in answer_faults() {
        for key in ["/events.log", "/.prefix", "/head"] {
            s.proxy.forget();
            s.proxy.add(Rule::on("PUT", key, fault.clone()));
            let out = s.run(&["new", "--title", "made under faults"], b"");
            s.proxy.clear();
            let what = format!("new, {fault:?} on {key}");
            assert_eq!(s.proxy.faults(), 1, "{what}: the fault was injected");
            assert!(out.status.success(), "{what}: {}", stderr(&out));
            let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
            let mut history = Vec::new();
            s.assert_consistent(&id, &mut history, &what);
        }
    }
    let listed: Value = serde_json::from_str(&s.ok(&["ls", "--json"], b"")).expect("ls json");
    assert_eq!(
        listed.as_array().expect("array").len(),
        answer_faults().len() * 3,
        "one conversation per new: {listed}"
    );
}

/// Attach stores its files as a pack and its index, each one conditional
/// PUT: a lost or replaced answer to either is a deduplication hit on the
/// retry (the name is the content's), and the attach is acknowledged.
#[test]
fn packs_and_indexes_whose_answers_are_lost_are_recognised() {
    let Some(s) = Faulty::new("faults-pack") else {
        return;
    };
    let id = s.init_with_conversation();
    let files = tempfile::tempdir().expect("tempdir");
    let mut history = Vec::new();
    for (i, fault) in answer_faults().into_iter().enumerate() {
        for key in [".pack", ".idx"] {
            let dir = files.path().join(format!("d{i}{key}"));
            std::fs::create_dir_all(&dir).expect("mkdir");
            for f in 0..4 {
                std::fs::write(
                    dir.join(format!("f{f}.txt")),
                    format!("file {f} of {i}{key}\n").repeat(2000),
                )
                .expect("write");
            }
            s.proxy.forget();
            s.proxy.add(Rule::on("PUT", key, fault.clone()));
            let out = s.run(&["attach", &id, dir.to_str().expect("UTF-8")], b"");
            s.proxy.clear();
            let what = format!("attach, {fault:?} on {key}");
            assert_eq!(s.proxy.faults(), 1, "{what}: the fault was injected");
            assert!(out.status.success(), "{what}: {}", stderr(&out));
            let export = s.ok(&["--no-cache", "view", &id], b"");
            assert!(
                export.contains(&format!("file 3 of {i}{key}")),
                "{what}: the attached files are in the view"
            );
            s.assert_consistent(&id, &mut history, &what);
        }
    }
}

/// Appends `texts` with the library, through the proxy, one batch each
/// (one writer: faster than a process each).
fn append_with_library(s: &Faulty, id: &str, texts: &[String]) {
    use jpstore_engine::internal::event::input::parse_input;
    use jpstore_engine::internal::event::json::ParseMode;
    use jpstore_engine::timestamp::Timestamp;
    let backend = s
        .server
        .backend_via(&s.proxy.endpoint(), s.location.clone());
    let store = jpstore_engine::Store::open(backend.shared(), Default::default()).expect("open");
    let id = jpstore_engine::conversation::ConversationId::parse(id).expect("id");
    let mut writer = store.writer(&id).expect("writer");
    for text in texts {
        let json = String::from_utf8(request(text)).expect("UTF-8");
        let input = parse_input(
            &json,
            ParseMode::Strict {
                now: Timestamp::now(),
            },
        )
        .expect("valid input");
        writer.append(input.entries).expect("append");
    }
}

/// The segments of the log of `id` after its last merged object: the
/// appends before the next merge.
fn unmerged_segments(s: &Faulty, id: &str) -> usize {
    let log = format!("conversations/{id}/events.log");
    let listed = |suffix: &str| -> Vec<(u64, u64)> {
        match s.direct().list(Path::new(&format!("{log}{suffix}"))) {
            Ok(entries) => entries
                .into_iter()
                .filter_map(|e| {
                    let start: u64 = e.name.split('.').next()?.parse().ok()?;
                    let end = match &e.entry {
                        jpstore_blobstore::backend::ListedEntry::Object(m) if m.len > 0 => {
                            start + m.len
                        }
                        _ => return None,
                    };
                    Some((start, end))
                })
                .collect(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => panic!("listing {log}{suffix}: {e}"),
        }
    };
    let merged_end = listed(".mrg").iter().map(|r| r.1).max().unwrap_or(0);
    listed(".seg")
        .iter()
        .filter(|(start, _)| *start >= merged_end)
        .count()
}

/// Every 16th append merges the segments: the merged object and the
/// tombstones are PUTs whose answers may be lost, or replaced by a 5xx, too.
/// The merge is best effort; the log stays whole and in order whatever it
/// left, and later merges go on from there.
#[test]
fn merges_whose_answers_are_lost_leave_a_whole_log() {
    let Some(s) = Faulty::new("faults-merge") else {
        return;
    };
    let id = s.init_with_conversation();
    let mut history = Vec::new();
    // The first PUT of a segment is the append's, the next ones are the
    // merge's tombstones.
    let merges: [(&str, Vec<Rule>); 4] = [
        (
            "merged object and tombstones lost",
            vec![
                Rule::on("PUT", "events.log.mrg/", Fault::LoseAnswer),
                Rule::on("PUT", "events.log.seg/", Fault::LoseAnswer)
                    .nth(2)
                    .times(3),
            ],
        ),
        (
            // The tombstones after the third fail for good: the merge stops
            // at the first one (one retry budget, not one per segment).
            "tombstones in a storm",
            vec![
                Rule::on("PUT", "events.log.seg/", Fault::ReplaceAnswer(503))
                    .nth(5)
                    .times(usize::MAX),
            ],
        ),
        (
            "merged object 500",
            vec![Rule::on(
                "PUT",
                "events.log.mrg/",
                Fault::ReplaceAnswer(500),
            )],
        ),
        (
            "merged object dropped, tombstones refused",
            vec![
                Rule::on("PUT", "events.log.mrg/", Fault::Drop),
                Rule::on("PUT", "events.log.seg/", Fault::Refuse(503))
                    .nth(2)
                    .times(2),
            ],
        ),
    ];
    let mut n = 0;
    for (what, rules) in merges {
        // Appends with no fault until the next one merges, then that one
        // through the command, with the faults.
        let before = 15usize.saturating_sub(unmerged_segments(&s, &id));
        let fillers: Vec<String> = (0..before).map(|i| format!("{what} filler {i}")).collect();
        append_with_library(&s, &id, &fillers);
        history.extend(fillers.into_iter().map(|t| (t, Outcome::Acked)));
        let mut faulted = false;
        for _ in 0..3 {
            n += 1;
            let text = format!("{what} {n}");
            s.proxy.forget();
            for rule in &rules {
                s.proxy.add(rule.clone());
            }
            let out = s.run_env(
                &["append", &id],
                &request(&text),
                &[("JP_STORE_S3_RETRY_TIMEOUT", "1s")],
            );
            s.proxy.clear();
            assert!(out.status.success(), "{text}: {}", stderr(&out));
            history.push((text, Outcome::Acked));
            if s.proxy.faults() > 0 {
                faulted = true;
                break;
            }
        }
        assert!(faulted, "{what}: a merge happened and was faulted");
        s.assert_consistent(&id, &mut history, what);
    }
    // Merges go on over what the faulted ones left.
    let last: Vec<String> = (0..20).map(|i| format!("last {i}")).collect();
    append_with_library(&s, &id, &last);
    history.extend(last.into_iter().map(|t| (t, Outcome::Acked)));
    assert!(unmerged_segments(&s, &id) < 16, "merged again");
    s.assert_consistent(&id, &mut history, "after the faulted merges");
}

/// 5xx storms shorter than the retry budget are retried with backoff and
/// the command succeeds; longer ones fail naming the object, the status
/// and the server's message, with nothing half-written acknowledged.
#[test]
fn short_5xx_storms_are_retried_and_long_ones_fail_naming_key_status_and_message() {
    let Some(s) = Faulty::new("faults-storm") else {
        return;
    };
    let id = s.init_with_conversation();
    let mut history = Vec::new();
    // Short storms: every request, whatever it is, for a few in a row.
    for (i, status) in [503, 500, 502, 503].into_iter().enumerate() {
        let text = format!("short storm {status} {i}");
        s.proxy.forget();
        s.proxy
            .add(Rule::on("*", "", Fault::Refuse(status)).times(4));
        let out = s.run(&["append", &id], &request(&text));
        s.proxy.clear();
        assert_eq!(s.proxy.faults(), 4, "{text}: the storm happened");
        assert!(out.status.success(), "{text}: {}", stderr(&out));
        history.push((text.clone(), Outcome::Acked));
        s.assert_consistent(&id, &mut history, &text);
    }
    // A short storm on the segment that reached the server each time.
    let text = "short storm after the server".to_string();
    s.proxy
        .add(Rule::on("PUT", "events.log.seg/", Fault::ReplaceAnswer(500)).times(3));
    let out = s.run(&["append", &id], &request(&text));
    s.proxy.clear();
    assert!(out.status.success(), "{text}: {}", stderr(&out));
    history.push((text.clone(), Outcome::Acked));
    s.assert_consistent(&id, &mut history, &text);

    // Long storms: one kind of request fails for good, with a short retry
    // budget.
    let budget = [("JP_STORE_S3_RETRY_TIMEOUT", "1s")];
    let conv = format!("conversations/{id}");
    for (what, rule, key) in [
        (
            "segment refused",
            Rule::on("PUT", "events.log.seg/", Fault::Refuse(503)),
            format!("{conv}/events.log.seg/"),
        ),
        (
            "segment applied, then 500s",
            Rule::on("PUT", "events.log.seg/", Fault::ReplaceAnswer(500)),
            format!("{conv}/events.log.seg/"),
        ),
        (
            "first object of the log",
            Rule::on("GET", "/events.log", Fault::Refuse(503)),
            format!("{conv}/events.log"),
        ),
        (
            "listing of the log",
            Rule::on("LIST", "events.log", Fault::Refuse(503)),
            format!("{conv}/events.log"),
        ),
    ] {
        let text = format!("long storm: {what}");
        s.proxy.add(rule.times(usize::MAX));
        let out = s.run_env(&["--no-cache", "append", &id], &request(&text), &budget);
        s.proxy.clear();
        let err = stderr(&out);
        assert!(!out.status.success(), "{what}: a long storm fails");
        assert!(
            err.contains(&s.url_of(&key)),
            "{what}: the error names {key}: {err}"
        );
        let status = if what.contains("500") { "500" } else { "503" };
        assert!(
            err.contains(&format!("HTTP {status}")),
            "{what}: the error names the status: {err}"
        );
        assert!(
            err.contains("fault injected by the test proxy"),
            "{what}: the error gives the server's message: {err}"
        );
        let o = outcome(&out);
        history.push((text.clone(), o));
        s.assert_consistent(&id, &mut history, &text);
    }
}

/// Answers held longer than the request timeout: a read is retried and
/// succeeds; a conditional create of unknown outcome fails naming the
/// object (never retried and acknowledged), and the store stays
/// consistent whatever the server did with it.
#[test]
fn answers_held_past_the_request_timeout() {
    let Some(s) = Faulty::new("faults-timeout") else {
        return;
    };
    let id = s.init_with_conversation();
    let mut history = Vec::new();
    let short = [("JP_STORE_S3_REQUEST_TIMEOUT", "1s")];
    let hold = Fault::HoldAnswer(Duration::from_secs(3));
    for (method, what, key) in [
        ("GET", "head cache read", "/head"),
        ("LIST", "log listing", "events.log"),
        ("PUT", "head cache write", "/head"),
        ("PUT", "segment", "events.log.seg/"),
        ("PUT", "blob", ""),
    ] {
        let text = format!("held {what}");
        let key = match key {
            "" => resource_blob_key(&text),
            k => k.to_string(),
        };
        s.proxy.forget();
        s.proxy.add(Rule::on(method, &key, hold.clone()));
        let out = s.run_env(&["append", &id], &request_with_resource(&text), &short);
        s.proxy.clear();
        assert_eq!(s.proxy.faults(), 1, "{what}: the answer was held");
        let o = outcome(&out);
        if o != Outcome::Acked {
            let err = stderr(&out);
            assert!(
                err.contains(&s.url) && err.contains("timed out"),
                "{what}: the error names the object and the timeout: {err}"
            );
        }
        history.push((text.clone(), o));
        s.assert_consistent(&id, &mut history, &text);
    }
}

/// Answers cut short (the head and half the body, then the connection
/// closes) to every kind of read: the client reads again, and what the
/// commands print is what they print without the fault.
#[test]
fn answers_cut_short_are_read_again_never_taken_whole() {
    let Some(s) = Faulty::new("faults-cut") else {
        return;
    };
    let id = s.init_with_conversation();
    let files = tempfile::tempdir().expect("tempdir");
    random_files(files.path(), 3, 300 << 10, 3);
    s.ok(&["attach", &id, files.path().to_str().expect("UTF-8")], b"");
    for i in 0..3 {
        s.ok(
            &["append", &id],
            &request_with_resource(&format!("cut {i}")),
        );
    }
    let clean = s.ok(&["--no-cache", "view", &id], b"");
    for (method, key) in [
        ("GET", "/events.log"),
        ("GET", "events.log.seg/"),
        ("GET", ".pack"),
        ("GET", ".idx"),
        ("GET", "blobs/objects/"),
        ("GET", "/head"),
        ("LIST", "events.log"),
        ("LIST", "conversations"),
    ] {
        s.proxy.forget();
        s.proxy
            .add(Rule::on(method, key, Fault::CutAnswer).times(2));
        let out = s.run(&["--no-cache", "view", &id], b"");
        s.proxy.clear();
        assert!(s.proxy.faults() > 0, "{method} {key}: an answer was cut");
        assert!(out.status.success(), "{method} {key}: {}", stderr(&out));
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            clean,
            "{method} {key}: the same view"
        );
    }
    s.assert_fsck_clean("after the cut answers");
}

/// Two writers (processes with caches of their own) append to one
/// conversation through a proxy that delays their requests, so that both
/// often read the same end: every acknowledged append is there exactly
/// once and in each writer's order; a refused one is absent.
#[test]
fn two_writers_racing_through_a_slow_proxy_never_lose_or_duplicate() {
    let Some(s) = Faulty::new("faults-race") else {
        return;
    };
    let id = s.init_with_conversation();
    let cache = |who: &str| {
        s.home
            .path()
            .join(format!("cache-{who}"))
            .to_str()
            .expect("UTF-8")
            .to_string()
    };
    let (cache_a, cache_b) = (cache("a"), cache("b"));

    // First, the race made certain: A's create of its segment is held
    // before it reaches the server while B appends at the same end. A's
    // create then gets 412, the segment holds B's bytes, and A appends
    // again at the new end (the refusal itself, with nothing written, is
    // s3_cli's `a_batch_another_writer_beat_...` for a compaction).
    s.proxy.add(Rule::on(
        "PUT",
        "events.log.seg/",
        Fault::Delay(Duration::from_secs(2)),
    ));
    let a = s.spawn(
        &["--cache-dir", &cache_a, "append", &id],
        &request("a, held"),
        &[],
    );
    let start = std::time::Instant::now();
    while s.proxy.faults() == 0 {
        assert!(
            start.elapsed() < Duration::from_secs(300),
            "A's segment reached the proxy"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    s.ok(
        &["--cache-dir", &cache_b, "append", &id],
        &request("b, first"),
    );
    let a = a.wait_with_output().expect("jp-store ran");
    s.proxy.clear();
    let err = stderr(&a);
    // A's first attempt lost; it read the log again and appended after B.
    assert_eq!(outcome(&a), Outcome::Acked, "{err}");
    let mut history = vec![
        ("b, first".to_string(), Outcome::Acked),
        ("a, held".to_string(), Outcome::Acked),
    ];
    s.assert_consistent(&id, &mut history, "the held race");

    // Then both at once, many times: reading the log's end is slowed down,
    // then the segment's create, so that the window between the two is
    // wide.
    s.proxy.add(
        Rule::on(
            "LIST",
            "events.log",
            Fault::Delay(Duration::from_millis(40)),
        )
        .times(usize::MAX),
    );
    s.proxy.add(
        Rule::on(
            "PUT",
            "events.log.seg/",
            Fault::Delay(Duration::from_millis(60)),
        )
        .times(usize::MAX),
    );
    let rounds = 10;
    let results: Vec<(String, Outcome, String)> = std::thread::scope(|scope| {
        let writers: Vec<_> = ["a", "b"]
            .into_iter()
            .map(|who| {
                let s = &s;
                let id = &id;
                let cache = cache(who);
                scope.spawn(move || {
                    (0..rounds)
                        .map(|i| {
                            let text = format!("{who}-{i}");
                            let out =
                                s.run(&["--cache-dir", &cache, "append", id], &request(&text));
                            (text, outcome(&out), stderr(&out))
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        writers
            .into_iter()
            .flat_map(|w| w.join().expect("writer thread"))
            .collect()
    });
    s.proxy.clear();
    let seen = s.requests(&id);
    for (text, o, err) in &results {
        let n = seen.iter().filter(|t| *t == text).count();
        match o {
            Outcome::Acked => assert_eq!(n, 1, "{text} acknowledged, found {n} times"),
            Outcome::Refused => {
                assert_eq!(n, 0, "{text} refused, found: {err}");
                assert!(
                    (err.contains("another writer appended") && err.contains("412"))
                        || err.contains("nothing was appended"),
                    "{text}: the loser says why: {err}"
                );
            }
            Outcome::Unknown => panic!("{text}: a race is not an unknown outcome: {err}"),
        }
    }
    for who in ["a", "b"] {
        let mine: Vec<usize> = seen
            .iter()
            .filter_map(|t| t.strip_prefix(&format!("{who}-")))
            .map(|n| n.parse().expect("number"))
            .collect();
        assert!(mine.windows(2).all(|w| w[0] < w[1]), "{who}: {mine:?}");
    }
    assert!(
        results.iter().any(|r| r.1 == Outcome::Acked),
        "some appends are acknowledged: {results:?}"
    );
    history.extend(results.into_iter().map(|(t, o, _)| (t, o)));
    // The order check of `assert_consistent` is per the log's order here.
    history.sort_by_key(|(t, _)| seen.iter().position(|x| x == t));
    s.assert_consistent(&id, &mut history, "the race");
}

/// Writes `n` files of `size` random (incompressible) bytes into `dir`.
fn random_files(dir: &Path, n: usize, size: usize, seed: u64) {
    use rand::{RngCore, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    std::fs::create_dir_all(dir).expect("mkdir");
    for i in 0..n {
        let mut bytes = vec![0; size];
        rng.fill_bytes(&mut bytes);
        std::fs::write(dir.join(format!("part-{i}.bin")), bytes).expect("write");
    }
}

/// The events of a view with what differs between two runs of the same
/// commands (timestamps) taken out.
fn without_times(view: &str) -> Value {
    let mut v: Value = serde_json::from_str(view).expect("view json");
    fn strip(v: &mut Value) {
        match v {
            Value::Object(m) => {
                m.remove("timestamp");
                m.values_mut().for_each(strip);
            }
            Value::Array(a) => a.iter_mut().for_each(strip),
            _ => {}
        }
    }
    strip(&mut v);
    v
}

/// Runs `jp-store ARGS` while the proxy dribbles its first upload of more
/// than 2 MiB below `blobs/` (a pack or a large loose object), and kills it
/// (SIGKILL) once a MiB of it reached the server; then the rest of the
/// upload is cut. Checks that nothing partial is visible under the
/// object's name (absent, or whole) and that fsck is clean.
fn kill_mid_upload(s: &Faulty, args: &[&str]) {
    s.proxy.add(
        Rule::on(
            "PUT",
            "/blobs/",
            Fault::Dribble {
                chunk: 64 << 10,
                pause: Duration::from_millis(10),
            },
        )
        .larger_than(2 << 20),
    );
    let mut child = s
        .command(args, &[])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start jp-store");
    let started = s.proxy.wait_dribbled(
        1 << 20,
        || matches!(child.try_wait(), Ok(Some(_))),
        Duration::from_secs(300),
    );
    if !started {
        let _ = child.kill();
        let out = child.wait_with_output().expect("jp-store ran");
        panic!(
            "{args:?}: no upload of more than 2 MiB was made: {}{}",
            String::from_utf8_lossy(&out.stdout),
            stderr(&out)
        );
    }
    child.kill().expect("SIGKILL");
    let status = child.wait().expect("wait");
    assert!(!status.success(), "killed: {status}");
    s.proxy.cut_uploads();
    let upload = s
        .proxy
        .seen()
        .into_iter()
        .find(|r| r.fault.is_some())
        .expect("the dribbled request");
    s.proxy.clear();
    assert!(s.proxy.dribbled() < upload.body_len, "cut before its end");
    // Nothing partial under the pack's name: absent, or whole.
    let key = upload
        .target
        .split_once(&format!("{}/", s.location.prefix))
        .map(|(_, k)| k.to_string())
        .expect("the pack's key");
    match s.direct().head(Path::new(&key)) {
        Ok(meta) => assert_eq!(meta.len, upload.body_len, "{key} is whole"),
        Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::NotFound, "{key}: {e}"),
    }
    s.assert_fsck_clean(&format!("after {args:?} was killed"));
}

/// A `jp-store attach` of several MB killed (SIGKILL) while the proxy
/// dribbles its pack to the server: no partial object is visible under its
/// final name, fsck is clean, nothing was appended, and the same command
/// run again gives what a run without faults gives.
#[test]
fn an_attach_killed_mid_upload_leaves_a_consistent_store() {
    let Some(s) = Faulty::new("faults-kill") else {
        return;
    };
    let id = s.init_with_conversation();
    s.ok(&["append", &id], &request("before the upload"));
    let files = tempfile::tempdir().expect("tempdir");
    let dir = files.path().join("big");
    random_files(&dir, 6, 1 << 20, 7);
    let dir_arg = dir.to_str().expect("UTF-8");

    kill_mid_upload(&s, &["attach", &id, dir_arg]);
    assert_eq!(
        s.requests(&id),
        ["before the upload"],
        "nothing was appended"
    );

    // The command again, with no fault: it succeeds, and the store holds
    // what a store where it never failed holds.
    let again = s.run(&["attach", &id, dir_arg], b"");
    assert!(again.status.success(), "{}", stderr(&again));
    let reference = Faulty::new("faults-kill-reference").expect("the server");
    let ref_id = reference.init_with_conversation();
    reference.ok(&["append", &ref_id], &request("before the upload"));
    reference.ok(&["attach", &ref_id, dir_arg], b"");
    assert_eq!(
        without_times(&s.ok(&["--no-cache", "view", &id], b"")),
        without_times(&reference.ok(&["--no-cache", "view", &ref_id], b"")),
        "the same view as without the kill"
    );
    s.assert_fsck_clean("after the command ran again");
}

/// `jp-store import` of a stream of several MB (a conversation with large
/// binary resources, exported from a store in a directory) killed while
/// its pack is dribbled: then run again, the store exports exactly what
/// the source does.
#[test]
fn an_import_killed_mid_upload_is_completed_by_running_it_again() {
    let Some(s) = Faulty::new("faults-kill-import") else {
        return;
    };
    s.ok(&["init"], b"");
    // The source: a store in a directory.
    let work = tempfile::tempdir().expect("tempdir");
    let source = work.path().join("source");
    jpstore_tests::run_jp_store(&source, &["init"], b"").ok("init");
    let id = jpstore_tests::run_jp_store(&source, &["new", "--title", "big"], b"")
        .ok("new")
        .trim()
        .to_string();
    use base64::Engine as _;
    use rand::{RngCore, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(11);
    for i in 0..2 {
        let mut bytes = vec![0; 4 << 20];
        rng.fill_bytes(&mut bytes);
        let batch = json!([{
            "type": "chat_request",
            "content": format!("binary {i}"),
            "resources": [{
                "uri": format!("file:///data/{i}.bin"),
                "mimeType": "application/octet-stream",
                "blob": base64::engine::general_purpose::STANDARD.encode(&bytes),
            }],
        }]);
        jpstore_tests::run_jp_store(&source, &["append", &id], batch.to_string().as_bytes())
            .ok("append");
    }
    let export = jpstore_tests::run_jp_store(&source, &["export", "--format", "ndjson"], b"")
        .ok("export")
        .to_string();
    let stream = work.path().join("store.ndjson");
    std::fs::write(&stream, &export).expect("write the stream");
    let stream_arg = stream.to_str().expect("UTF-8");

    kill_mid_upload(&s, &["import", stream_arg]);
    let listed: Value = serde_json::from_str(&s.ok(&["ls", "--json"], b"")).expect("ls json");
    assert_eq!(listed, json!([]), "no conversation was imported");

    let again = s.run(&["import", stream_arg], b"");
    assert!(again.status.success(), "{}", stderr(&again));
    assert_eq!(
        s.ok(&["--no-cache", "export", "--format", "ndjson"], b""),
        export,
        "the store holds what the source does"
    );
    s.assert_fsck_clean("after the import ran again");
}

//! `jp-store copy SRC DST [ID...]`: conversations and their blobs from a
//! store to another, between directories and a store on S3 (a real server:
//! SeaweedFS, see `jpstore_remote::testing`; without one the S3 tests say
//! they were skipped and why). A copy reproduces the logs byte for byte, a
//! second copy sends nothing, a source that grew extends the destination,
//! and a destination that diverged is a conflict left as it was.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use jpstore_remote::testing::{server_or_skip, TestServer};
use jpstore_tests::{jp_store_bin, log_path, run_jp_store, tree_snapshot, Run};
use serde_json::Value;

/// Runs `jp-store ARGS` (no `--store`), with the environment of `server`.
fn jp(server: Option<&TestServer>, args: &[&str]) -> Run {
    let mut cmd = Command::new(jp_store_bin());
    cmd.args(args)
        .env_remove("JP_STORE_DIR")
        .env_remove("JP_STORE_CACHE_DIR")
        .stdin(Stdio::null());
    if let Some(server) = server {
        for (k, v) in server.env() {
            cmd.env(k, v);
        }
    }
    let out = cmd.output().expect("jp-store ran");
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn at(server: Option<&TestServer>, store: &str, args: &[&str]) -> Run {
    let mut all = vec!["--store", store];
    all.extend_from_slice(args);
    jp(server, &all)
}

fn user(text: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!([{"type": "chat_request", "content": text}]))
        .expect("json")
}

/// The sample JP workspace of `jp-store demo`.
fn sample() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../cli/samples/jp-workspace")
        .to_str()
        .expect("a UTF-8 path")
        .to_owned()
}

/// A store in `dir` holding the sample workspace and a conversation with
/// content in the blob store; its ids.
fn source(dir: &Path) -> Vec<String> {
    run_jp_store(dir, &["init"], b"").ok("init");
    run_jp_store(dir, &["import", &sample()], b"").ok("import");
    let id = run_jp_store(dir, &["new", "--title", "copied"], b"")
        .ok("new")
        .trim()
        .to_string();
    let turn = serde_json::to_vec(&serde_json::json!([
        {"type": "turn_start"},
        {"type": "chat_request", "content": "read it"},
        {"type": "tool_call_request", "id": "c1", "name": "fs_read_file", "arguments": {"path": "a.rs"}},
        {"type": "tool_call_response", "id": "c1", "content": "fn main() {}\n".repeat(500)},
        {"type": "chat_response", "message": "done"},
    ]))
    .expect("json");
    run_jp_store(dir, &["append", &id], &turn).ok("append");
    ids(None, dir.to_str().expect("utf-8"))
}

fn ids(server: Option<&TestServer>, store: &str) -> Vec<String> {
    let listed = at(server, store, &["ls", "--json"]).json("ls");
    let mut ids: Vec<String> = listed
        .as_array()
        .expect("array")
        .iter()
        .map(|c| c["id"].as_str().expect("id").to_string())
        .collect();
    ids.sort();
    ids
}

/// What a person and an LLM see of conversation `id` in `store`: its view,
/// its plain export, and the files `export --format jp` writes.
fn seen(server: Option<&TestServer>, store: &str, id: &str) -> (String, String, Files) {
    let view = at(server, store, &["view", id]).ok("view").to_string();
    let export = at(server, store, &["export", id]).ok("export").to_string();
    let out = tempfile::tempdir().expect("tempdir");
    at(
        server,
        store,
        &[
            "export",
            id,
            "--format",
            "jp",
            "--out",
            out.path().to_str().expect("utf-8"),
        ],
    )
    .ok("export --format jp");
    (view, export, tree_snapshot(out.path()))
}

type Files = BTreeMap<PathBuf, Option<Vec<u8>>>;

fn copy(server: Option<&TestServer>, src: &str, dst: &str, extra: &[&str]) -> Run {
    let mut args = vec!["copy", src, dst];
    args.extend_from_slice(extra);
    jp(server, &args)
}

fn report(run: &Run, code: i32, what: &str) -> Value {
    run.expect_code(code, what);
    serde_json::from_str(&run.stdout)
        .unwrap_or_else(|e| panic!("{what}: not JSON: {e}\n{}", run.stdout))
}

#[test]
fn local_to_local_copies_extends_and_refuses_to_overwrite() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let a = tmp.path().join("a");
    let b = tmp.path().join("b");
    let (sa, sb) = (a.to_str().expect("utf-8"), b.to_str().expect("utf-8"));
    let all = source(&a);
    assert_eq!(all.len(), 2, "{all:?}");

    // A new directory becomes a store with every conversation, the same
    // bytes in every log.
    let first = report(&copy(None, sa, sb, &["--json"]), 0, "copy");
    assert_eq!(first["created"], 2);
    assert!(first["blobs_sent"].as_u64().expect("count") >= 2);
    assert_eq!(ids(None, sb), all);
    for id in &all {
        assert_eq!(
            std::fs::read(log_path(&b, id)).expect("copied log"),
            std::fs::read(log_path(&a, id)).expect("source log"),
        );
        assert_eq!(seen(None, sb, id), seen(None, sa, id));
    }
    assert_eq!(
        std::fs::read(b.join("config.toml")).expect("config"),
        std::fs::read(a.join("config.toml")).expect("config")
    );
    run_jp_store(&b, &["fsck"], b"").ok("fsck of the copy");

    // A second copy sends nothing, and says so.
    let again = copy(None, sa, sb, &[]);
    assert!(
        again.ok("second copy").starts_with("nothing to send"),
        "{}",
        again.stdout
    );
    let again = report(&copy(None, sa, sb, &["--json"]), 0, "second copy");
    assert_eq!(again["sent_nothing"], true);
    assert_eq!(again["unchanged"], 2);
    assert_eq!(again["records_sent"], 0);

    // The source grew: the destination is extended with what it lacks.
    let id = &all[1];
    run_jp_store(&a, &["append", id], &user("one more")).ok("append");
    let extended = report(&copy(None, sa, sb, &["--json", id]), 0, "extend");
    assert_eq!(extended["extended"], 1);
    assert_eq!(extended["records_sent"], 1);
    assert_eq!(extended["conversations"].as_array().expect("list").len(), 1);
    assert_eq!(
        std::fs::read(log_path(&b, id)).expect("copied log"),
        std::fs::read(log_path(&a, id)).expect("source log"),
    );

    // Both grew apart: a conflict, named, the destination left as it was.
    run_jp_store(&a, &["append", id], &user("at the source")).ok("append");
    run_jp_store(&b, &["append", id], &user("at the destination")).ok("append");
    let before = std::fs::read(log_path(&b, id)).expect("log");
    let conflict = copy(None, sa, sb, &[]);
    conflict.expect_code(1, "a diverged copy");
    assert!(
        conflict
            .stdout
            .contains(&format!("conflict: {id}: the logs diverged")),
        "{}",
        conflict.stdout
    );
    assert_eq!(std::fs::read(log_path(&b, id)).expect("log"), before);
    let json = report(&copy(None, sa, sb, &["--json"]), 1, "a diverged copy");
    assert_eq!(json["complete"], false);
    assert_eq!(json["conflicts"], 1);
    assert_eq!(json["unchanged"], 1);

    // The exit status is documented.
    let help = jp(None, &["copy", "--help"]);
    assert!(help
        .ok("help")
        .contains("Exit status: 0 when every conversation"));

    // What a copy killed while it made the destination a store leaves (the
    // config's temp file, with or without the config published): a copy
    // again completes it, as `init` completes a directory holding only such
    // a temp file.
    for with_config in [false, true] {
        let stopped = tmp.path().join(format!("stopped-{with_config}"));
        std::fs::create_dir(&stopped).expect("mkdir");
        std::fs::write(stopped.join("config.toml.tmp.4242"), "# half a con").expect("write");
        if with_config {
            std::fs::copy(a.join("config.toml"), stopped.join("config.toml")).expect("copy");
        }
        let again = report(
            &copy(None, sa, stopped.to_str().expect("utf-8"), &["--json"]),
            0,
            "a copy into what a stopped copy left",
        );
        assert_eq!(again["created"], 2);
        assert_eq!(
            std::fs::read(stopped.join("config.toml")).expect("config"),
            std::fs::read(a.join("config.toml")).expect("config")
        );
        run_jp_store(&stopped, &["fsck"], b"").ok("fsck of the completed copy");
    }
    let stopped_init = tmp.path().join("stopped-init");
    std::fs::create_dir(&stopped_init).expect("mkdir");
    std::fs::write(stopped_init.join("config.toml.tmp.4242"), "# half").expect("write");
    run_jp_store(&stopped_init, &["init"], b"").ok("init over a stopped init's temp file");
    run_jp_store(&stopped_init, &["ls"], b"").ok("ls");

    // A destination that is neither empty nor a store is refused.
    let other = tmp.path().join("other");
    std::fs::create_dir(&other).expect("mkdir");
    std::fs::write(other.join("notes.txt"), "mine").expect("write");
    let refused = copy(None, sa, other.to_str().expect("utf-8"), &[]);
    refused.expect_code(1, "copy into a directory of other files");
    assert!(refused.stderr.contains("notes.txt"), "{}", refused.stderr);
}

/// The `--json` report, pinned: its keys, their order, and the values of a
/// copy of the sample workspace.
#[test]
fn json_report_is_pinned() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let a = tmp.path().join("a");
    let b = tmp.path().join("b");
    run_jp_store(&a, &["init"], b"").ok("init");
    run_jp_store(&a, &["import", &sample()], b"").ok("import");
    let run = copy(
        None,
        a.to_str().expect("utf-8"),
        b.to_str().expect("utf-8"),
        &["--json"],
    );
    let mut value = report(&run, 0, "copy --json");
    assert_eq!(
        run.stdout,
        format!("{}\n", serde_json::to_string_pretty(&value).expect("json"))
    );
    // Compressed sizes depend on the compressor's version.
    value["blob_stored_bytes"] = Value::from("<number>");
    let log_bytes = value["conversations"][0]["log_bytes_sent"].clone();
    assert_eq!(value["log_bytes_sent"], log_bytes);
    assert_eq!(
        serde_json::to_string_pretty(&value).expect("json"),
        format!(
            r#"{{
  "complete": true,
  "sent_nothing": false,
  "created": 1,
  "extended": 0,
  "unchanged": 0,
  "conflicts": 0,
  "failed": 0,
  "records_sent": {records},
  "log_bytes_sent": {log_bytes},
  "blobs_referenced": {blobs},
  "blobs_sent": {blobs},
  "blob_bytes_sent": {blob_bytes},
  "blob_stored_bytes": "<number>",
  "blobs_present": 0,
  "workspace_config_differs": false,
  "conversations": [
    {{
      "id": "17738399468",
      "outcome": "created",
      "records_sent": {records},
      "log_bytes_sent": {log_bytes}
    }}
  ]
}}"#,
            records = value["records_sent"],
            blobs = value["blobs_sent"],
            blob_bytes = value["blob_bytes_sent"],
        )
    );
    let log = std::fs::read(log_path(&a, "17738399468")).expect("log");
    assert_eq!(
        log_bytes,
        log.len() as u64 - 16,
        "every record, not the header"
    );

    let run = copy(
        None,
        a.to_str().expect("utf-8"),
        b.to_str().expect("utf-8"),
        &["--json"],
    );
    let value = report(&run, 0, "second copy --json");
    assert_eq!(
        serde_json::to_string_pretty(&value).expect("json"),
        r#"{
  "complete": true,
  "sent_nothing": true,
  "created": 0,
  "extended": 0,
  "unchanged": 1,
  "conflicts": 0,
  "failed": 0,
  "records_sent": 0,
  "log_bytes_sent": 0,
  "blobs_referenced": 0,
  "blobs_sent": 0,
  "blob_bytes_sent": 0,
  "blob_stored_bytes": 0,
  "blobs_present": 0,
  "workspace_config_differs": false,
  "conversations": [
    {
      "id": "17738399468",
      "outcome": "unchanged",
      "records_sent": 0,
      "log_bytes_sent": 0
    }
  ]
}"#
    );
}

/// The requests line of `-v` for the store on S3.
fn requests(run: &Run) -> String {
    run.stderr
        .lines()
        .find(|l| l.contains("s3: "))
        .unwrap_or_else(|| panic!("no request count in {}", run.stderr))
        .to_string()
}

#[test]
fn local_to_s3_and_back_round_trips() {
    let Some(server) = server_or_skip("local_to_s3_and_back_round_trips") else {
        return;
    };
    let tmp = tempfile::tempdir().expect("tempdir");
    let a = tmp.path().join("a");
    let c = tmp.path().join("c");
    let (sa, sc) = (a.to_str().expect("utf-8"), c.to_str().expect("utf-8"));
    let all = source(&a);
    let s3 = server.fresh("copy").to_string();
    let s = Some(server);

    // Into a new prefix of the bucket, and back into a new directory.
    let cache = tmp.path().join("cache");
    let cache = cache.to_str().expect("utf-8");
    let up = copy(s, sa, &s3, &["-v", "--json", "--cache-dir", cache]);
    let up_report = report(&up, 0, "copy to s3");
    assert_eq!(up_report["created"], 2);
    eprintln!(
        "copy to s3: {}; {} log bytes, {} blob bytes stored",
        requests(&up),
        up_report["log_bytes_sent"],
        up_report["blob_stored_bytes"]
    );
    assert_eq!(ids(s, &s3), all);
    let down = copy(s, &s3, sc, &["--json", "--no-cache"]);
    assert_eq!(report(&down, 0, "copy from s3")["created"], 2);
    for id in &all {
        assert_eq!(
            std::fs::read(log_path(&c, id)).expect("copied log"),
            std::fs::read(log_path(&a, id)).expect("source log"),
        );
        let local = seen(None, sa, id);
        assert_eq!(seen(s, &s3, id), local);
        assert_eq!(seen(None, sc, id), local);
    }
    at(s, &s3, &["fsck"]).ok("fsck on s3");

    // A second copy sends nothing.
    let again = copy(s, sa, &s3, &["-v", "--json", "--cache-dir", cache]);
    let again_report = report(&again, 0, "second copy to s3");
    assert_eq!(again_report["sent_nothing"], true);
    eprintln!("second copy to s3: {}", requests(&again));
    assert!(
        requests(&again).contains(" 0 PUT"),
        "a second copy writes nothing: {}",
        requests(&again)
    );

    // The source grew: the store on S3 is extended (a conditional append).
    let id = &all[1];
    run_jp_store(&a, &["append", id], &user("one more")).ok("append");
    let extended = report(&copy(s, sa, &s3, &["--json"]), 0, "extend on s3");
    assert_eq!(extended["extended"], 1);
    assert_eq!(extended["records_sent"], 1);
    assert_eq!(seen(s, &s3, id), seen(None, sa, id));

    // The store on S3 grew apart from the source: a conflict, its log left
    // as it was.
    run_jp_store(&a, &["append", id], &user("at the source")).ok("append");
    let mut append = Command::new(jp_store_bin());
    for (k, v) in server.env() {
        append.env(k, v);
    }
    let appended =
        jpstore_tests::run_command(append, Path::new(&s3), &["append", id], &user("on s3"));
    appended.ok("append on s3");
    let before = at(s, &s3, &["export", id]).ok("export").to_string();
    let conflict = copy(s, sa, &s3, &[]);
    conflict.expect_code(1, "a diverged copy to s3");
    assert!(
        conflict
            .stdout
            .contains(&format!("conflict: {id}: the logs diverged")),
        "{}",
        conflict.stdout
    );
    assert_eq!(at(s, &s3, &["export", id]).ok("export"), before);
}

/// Flips one bit in the middle of the last record of the object `rel` of
/// `backend`: a log's first object, or one of its segments (`segment`).
fn damage_last_record_on_s3(backend: &jpstore_remote::S3Backend, rel: &str, segment: bool) {
    use jpstore_remote::testing::{get_directly, put_directly};
    let mut bytes = get_directly(backend, rel).expect("the object");
    let at = if segment {
        // A segment holds the bytes of one append: one record.
        bytes.len() / 2
    } else {
        let last = *jpstore_tests::record_spans(&bytes)
            .last()
            .expect("a record");
        (last.offset + last.header_len + bytes.len()) / 2
    };
    bytes[at] ^= 0x10;
    put_directly(backend, rel, bytes).expect("put back");
}

/// What fsck, print and view say of `id` at `s3` (no cache): damage to a
/// record proven whole, never a torn tail read as fewer events.
fn reported_as_damage(server: &TestServer, s3: &str, id: &str, what: &str) {
    let s = Some(server);
    let fsck = at(s, s3, &["--no-cache", "fsck"]);
    fsck.expect_code(1, &format!("{what}: fsck"));
    assert!(
        fsck.stdout.contains("damaged-record") && fsck.stdout.contains(id),
        "{what}: fsck names the damaged record: {}",
        fsck.stdout
    );
    for args in [["print", id], ["view", id], ["export", id]] {
        let out = at(s, s3, &[&["--no-cache"][..], &args].concat());
        out.expect_code(1, &format!("{what}: {args:?}"));
        assert!(
            out.stderr.contains("fsck --repair"),
            "{what}: {args:?}: {}",
            out.stderr
        );
    }
}

/// A copy to S3 publishes, with each log it creates and with the records
/// it appends to one, the head that proves them whole: a bit flipped in
/// the last record there is then damage that fsck, print and view report,
/// not a torn tail read as an empty conversation.
#[test]
fn a_copy_to_s3_publishes_the_proof_that_its_records_are_whole() {
    let Some(server) =
        server_or_skip("a_copy_to_s3_publishes_the_proof_that_its_records_are_whole")
    else {
        return;
    };
    let tmp = tempfile::tempdir().expect("tempdir");
    let a = tmp.path().join("a");
    let sa = a.to_str().expect("utf-8");
    let all = source(&a);
    let s = Some(server);

    // Created by the copy.
    let location = server.fresh("copy-proof");
    let s3 = location.to_string();
    let backend = server.backend(location);
    report(
        &copy(s, sa, &s3, &["--json", "--no-cache"]),
        0,
        "copy to s3",
    );
    let id = &all[0];
    damage_last_record_on_s3(&backend, &format!("conversations/{id}/events.log"), false);
    reported_as_damage(server, &s3, id, "created on s3");

    // Extended by a second copy: the appended record is a segment.
    let location = server.fresh("copy-proof");
    let s3 = location.to_string();
    let backend = server.backend(location);
    report(
        &copy(s, sa, &s3, &["--json", "--no-cache"]),
        0,
        "copy to s3",
    );
    let id = &all[1];
    let end = std::fs::metadata(log_path(&a, id)).expect("log").len();
    run_jp_store(&a, &["append", id], &user("one more")).ok("append");
    let extended = report(&copy(s, sa, &s3, &["--json", "--no-cache"]), 0, "extend");
    assert_eq!(extended["extended"], 1, "{extended}");
    damage_last_record_on_s3(
        &backend,
        &format!("conversations/{id}/events.log.seg/{end:020}"),
        true,
    );
    reported_as_damage(server, &s3, id, "extended on s3");
}

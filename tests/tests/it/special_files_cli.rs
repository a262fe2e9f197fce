//! The `jp-store` binary with a FIFO, a socket or a directory where the
//! store keeps a file: every log, head cache, lock, object, pack, index,
//! config and temp name of the layout (format-spec.md section 1, "Special
//! files").
//!
//! Opening a FIFO for reading waits for a writer that never comes, so each
//! command runs in a child process; one still running after a generous
//! deadline is killed and reported as a hang (the deadline only tells a
//! hang from a slow machine; nothing is timed). Every command must then
//! finish, succeed or exit 1 naming the node and what it is, and `fsck`
//! must exit 1 naming it, `fsck --repair` move it aside, and a new `fsck`
//! be clean.

use std::fs;
use std::io::Write as _;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use jpstore_tests::{copy_tree, jp_store_bin, run_jp_store, Run};
use sha2::{Digest, Sha256};

const CONV: &str = "c";
const SECRET: &str = "content stored as a loose object";
const ATTACHED: &str = "an attached file, stored in a pack";
/// Far beyond what any of these commands takes on a loaded machine: only a
/// command blocked for good is still running then.
const HANG_DEADLINE: Duration = Duration::from_secs(120);

/// Runs `jp-store --store <store> <args>`; `Err` with what it printed if it
/// was still running at the deadline (it is killed then).
fn run_or_hang(store: &Path, args: &[&str], stdin: &[u8]) -> Result<Run, String> {
    let mut child = Command::new(jp_store_bin())
        .arg("--store")
        .arg(store)
        .args(args)
        .env_remove("JP_STORE_DIR")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning jp-store");
    let mut input = child.stdin.take().expect("stdin of the child");
    let stdin = stdin.to_vec();
    // A child that fails before reading closes the pipe: not an error.
    let writer = std::thread::spawn(move || drop(input.write_all(&stdin)));
    let mut stdout = child.stdout.take().expect("stdout");
    let mut stderr = child.stderr.take().expect("stderr");
    let out = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = std::io::Read::read_to_end(&mut stdout, &mut s);
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = std::io::Read::read_to_end(&mut stderr, &mut s);
        s
    });
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break Some(status);
        }
        if started.elapsed() > HANG_DEADLINE {
            // Only this child, which is still running.
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let _ = writer.join();
    let stdout = String::from_utf8_lossy(&out.join().expect("stdout")).into_owned();
    let stderr = String::from_utf8_lossy(&err.join().expect("stderr")).into_owned();
    match status {
        Some(status) => Ok(Run {
            code: status.code(),
            stdout,
            stderr,
        }),
        None => Err(format!(
            "still running after {HANG_DEADLINE:?}: a hang\nstdout: {stdout}\nstderr: {stderr}"
        )),
    }
}

fn blob_id(content: &str) -> String {
    hex::encode(Sha256::digest(content.as_bytes()))
}

/// A tool call and its response with `content`, as `append` input.
fn response(call: &str, content: &str) -> String {
    format!(
        "{{\"type\":\"turn_start\"}}\n\
         {{\"type\":\"tool_call_request\",\"id\":\"{call}\",\"name\":\"fs_read_file\",\"arguments\":{{}}}}\n\
         {{\"type\":\"tool_call_response\",\"id\":\"{call}\",\"content\":\"{content}\"}}\n"
    )
}

/// A store with conversation `c` holding a loose object and an attached
/// file (a pack and its index).
fn template(dir: &Path) -> PathBuf {
    let root = dir.join("template");
    let run = |args: &[&str], stdin: &[u8]| {
        let run = run_or_hang(&root, args, stdin).unwrap_or_else(|e| panic!("{args:?}: {e}"));
        run.expect_code(0, &format!("{args:?}"));
    };
    run(&["init"], b"");
    run(&["new", "--id", CONV], b"");
    run(&["append", CONV], response("r1", SECRET).as_bytes());
    let attached = dir.join("notes.txt");
    fs::write(&attached, ATTACHED).expect("write");
    let attached = attached.to_str().expect("utf-8 path");
    run(&["attach", CONV, attached], b"");
    root
}

/// The one name in `dir` ending with `suffix`.
fn named(dir: &Path, suffix: &str) -> PathBuf {
    let found: Vec<PathBuf> = fs::read_dir(dir)
        .expect("ls")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.to_string_lossy().ends_with(suffix))
        .collect();
    assert_eq!(found.len(), 1, "{suffix} in {}: {found:?}", dir.display());
    found.into_iter().next().expect("one")
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Fifo,
    Socket,
    Directory,
}

impl Kind {
    fn describe(self) -> &'static str {
        match self {
            Kind::Fifo => "a FIFO",
            Kind::Socket => "a socket",
            Kind::Directory => "a directory",
        }
    }

    /// Replaces `path` (if it exists) by a node of this kind. A socket's
    /// listener is returned to keep it bound.
    fn plant(self, path: &Path) -> Option<UnixListener> {
        if fs::symlink_metadata(path).is_ok() {
            fs::remove_file(path).expect("rm");
        }
        match self {
            Kind::Fifo => {
                let status = Command::new("mkfifo")
                    .arg(path)
                    .status()
                    .expect("running mkfifo");
                assert!(status.success(), "mkfifo {}", path.display());
                None
            }
            Kind::Socket => {
                // Bound at a short name (a socket's path is limited to
                // about 100 bytes), then renamed into place.
                let short = tempfile::tempdir().expect("tempdir");
                let at = short.path().join("s");
                let listener = UnixListener::bind(&at).expect("bind");
                fs::rename(&at, path).expect("rename the socket into place");
                Some(listener)
            }
            Kind::Directory => {
                fs::create_dir(path).expect("mkdir");
                None
            }
        }
    }
}

/// The places of the layout, relative to the store root.
fn places(root: &Path) -> Vec<(&'static str, PathBuf)> {
    let id = blob_id(SECRET);
    let conv = root.join("conversations").join(CONV);
    let packs = root.join("blobs/packs");
    vec![
        ("the log", conv.join("events.log")),
        ("the head cache", conv.join("head")),
        ("the writer lock", conv.join("events.log.lock")),
        ("a head temp file", conv.join("head.tmp.1.2")),
        (
            "a loose object",
            root.join("blobs/objects").join(&id[..2]).join(&id[2..]),
        ),
        ("a pack", named(&packs, ".pack")),
        ("a pack index", named(&packs, ".idx")),
        ("the workspace config", root.join("config.toml")),
        ("the gc lock", root.join("gc.lock")),
        ("a blob temp file", root.join("blobs/tmp/1-2-3.obj")),
    ]
}

/// Every command over a store with `kind` at each place.
fn check_kind(kind: Kind) {
    let dir = tempfile::tempdir().expect("tempdir");
    let template = template(dir.path());
    let mut failures = Vec::new();
    for i in 0..places(&template).len() {
        let root = dir.path().join(format!("store-{i}"));
        copy_tree(&template, &root);
        let (place, path) = places(&root).swap_remove(i);
        let _listener = kind.plant(&path);
        let what = format!("{} at {place} ({})", kind.describe(), path.display());
        let shown = path.display().to_string();
        let names_it = |run: &Run| {
            let text = format!("{}{}", run.stdout, run.stderr);
            text.contains(&shown) && text.contains(kind.describe())
        };
        let append = response("r2", SECRET);
        // fsck first: a writer replaces a head cache and removes stale
        // temp files, and gc old temp files, which repairs those places.
        let commands: [(&[&str], &[u8]); 8] = [
            (&["fsck"], b""),
            (&["fsck", "--read-data"], b""),
            (&["ls"], b""),
            (&["view", CONV], b""),
            (&["print", CONV], b""),
            (&["blob", "ls"], b""),
            (&["append", CONV], append.as_bytes()),
            (&["gc", "--grace", "0s"], b""),
        ];
        for (args, stdin) in commands {
            let run = match run_or_hang(&root, args, stdin) {
                Ok(run) => run,
                Err(hang) => {
                    failures.push(format!("{what}: {args:?} {hang}"));
                    continue;
                }
            };
            let fsck = args[0] == "fsck";
            // A pack or index that cannot be opened is skipped as a
            // damaged index is: its objects are missing to readers (named
            // by id), and fsck names the file.
            let in_skipped_pack = place.starts_with("a pack")
                && run
                    .stderr
                    .contains(&format!("{} is not in the store", blob_id(ATTACHED)));
            let fine = match run.code {
                Some(0) => !fsck,
                Some(1) => names_it(&run) || (!fsck && in_skipped_pack),
                _ => false,
            };
            if !fine {
                failures.push(format!(
                    "{what}: {args:?} exit {:?}{}\nstdout: {}\nstderr: {}",
                    run.code,
                    if fsck {
                        ", expected 1 naming it"
                    } else {
                        ", expected 0, or 1 naming it"
                    },
                    run.stdout,
                    run.stderr
                ));
            }
        }
        // Still there unless a writer or gc replaced or removed it.
        let planted = fs::symlink_metadata(&path).is_ok_and(|m| !m.is_file());
        match run_or_hang(&root, &["fsck", "--repair"], b"") {
            Ok(run)
                if run.code == Some(if planted { 1 } else { 0 })
                    && fs::symlink_metadata(&path).map_or(true, |m| m.is_file()) => {}
            Ok(run) => failures.push(format!(
                "{what}: fsck --repair exit {:?}, {} still there\nstdout: {}\nstderr: {}",
                run.code, shown, run.stdout, run.stderr
            )),
            Err(hang) => failures.push(format!("{what}: fsck --repair {hang}")),
        }
        match run_or_hang(&root, &["fsck", "--read-data"], b"") {
            Ok(run) if run.code == Some(0) => {}
            Ok(run) => failures.push(format!(
                "{what}: fsck after the repair exit {:?}\nstdout: {}\nstderr: {}",
                run.code, run.stdout, run.stderr
            )),
            Err(hang) => failures.push(format!("{what}: fsck after the repair {hang}")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn a_fifo_anywhere_in_the_layout_hangs_nothing_and_fsck_names_it() {
    check_kind(Kind::Fifo);
}

#[test]
fn a_socket_anywhere_in_the_layout_is_refused_and_fsck_names_it() {
    check_kind(Kind::Socket);
}

#[test]
fn a_directory_where_a_file_is_kept_is_refused_and_fsck_names_it() {
    check_kind(Kind::Directory);
}

#[test]
fn a_directory_at_a_log_name_is_named_by_ls_and_stats_not_left_out() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = dir.path().join("s");
    run_jp_store(&store, &["init"], b"").ok("init");
    for id in ["good", "bad"] {
        run_jp_store(&store, &["new", "--id", id], b"").ok("new");
    }
    let bad = store.join("conversations").join("bad");
    std::fs::remove_file(bad.join("events.log")).expect("remove the log");
    let _ = std::fs::remove_file(bad.join("head"));
    std::fs::create_dir(bad.join("events.log")).expect("a directory at the log's name");
    for args in [&["ls"][..], &["stats"][..]] {
        let run = run_jp_store(&store, args, b"");
        run.expect_code(1, &format!("{args:?}"));
        assert!(
            run.stderr.contains("conversation bad") && run.stderr.contains("is a directory"),
            "{args:?} names the conversation and what is wrong: {}",
            run.stderr
        );
    }
    let listed = run_jp_store(&store, &["ls"], b"");
    assert!(listed.stdout.contains("good"), "{}", listed.stdout);
}

//! Checking a store that cannot be written: one on a read-only file system
//! (a mounted backup, a snapshot: here a read-only bind mount in a mount
//! namespace of its own) and another user's store (files readable, not
//! writable). `fsck`, `fsck --read-data` and `gc --dry-run` work and
//! report, writing nothing: a lock whose file exists is taken through a
//! read-only descriptor, and one whose file is missing and cannot be made
//! is not taken, which the report says. They failed with "cannot lock ...
//! Read-only file system" (or "Permission denied") where the store had a
//! torn tail to look at again under its writer's lock, and `gc --dry-run`
//! always.

use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use jpstore_tests::{jp_store_bin, log_path, run_command, run_jp_store, tree_snapshot, ts, Run};
use serde_json::{json, Value};

/// The user and group the commands run as to find another user's store
/// (this process being root, whom permissions do not bind).
const NOBODY: (u32, u32) = (65534, 65534);

/// A test that cannot run here (it needs root, for a mount namespace or
/// another user): skipped, except in CI, where a missing environment fails
/// (`jpstore_test_env::skip`).
fn skip(why: &str) {
    jpstore_test_env::skip("read_only_store_cli", jpstore_test_env::Need::Root, why);
}

/// A store (directory `name` in `dir`) with one conversation that
/// references an attached file and ends in a torn tail, and one
/// unreferenced blob. Returns the store and the conversation.
fn store(dir: &Path, name: &str) -> (PathBuf, String) {
    let root = dir.join(name);
    run_jp_store(&root, &["init"], b"").ok("init");
    let id = run_jp_store(&root, &["new"], b"")
        .ok("new")
        .trim()
        .to_string();
    let batch = json!([
        {"type": "turn_start", "timestamp": ts(1)},
        {"type": "chat_request", "timestamp": ts(2), "content": "a question"}
    ]);
    run_jp_store(&root, &["append", &id], batch.to_string().as_bytes()).ok("append");
    let file = dir.join(format!("{name}-attached.txt"));
    fs::write(&file, "attached content\n").expect("write the file");
    run_jp_store(&root, &["attach", &id, &file.display().to_string()], b"").ok("attach");
    let orphan = dir.join(format!("{name}-orphan.bin"));
    fs::write(&orphan, "referenced by nothing").expect("write the orphan");
    run_jp_store(&root, &["blob", "put", &orphan.display().to_string()], b"").ok("blob put");
    let log = log_path(&root, &id);
    let mut bytes = fs::read(&log).expect("read the log");
    bytes.extend(b"the start of a record cut short");
    fs::write(&log, bytes).expect("write the log");
    (root, id)
}

/// Removes the lock files of the store `root` (the writer's lock of `id`
/// and `gc.lock`), as a copy that left them out has it.
fn remove_locks(root: &Path, id: &str) {
    fs::remove_file(root.join("gc.lock")).expect("remove gc.lock");
    let lock = log_path(root, id).with_file_name("events.log.lock");
    fs::remove_file(lock).expect("remove the writer's lock");
}

/// How the store is made unwritable.
#[derive(Debug, Clone, Copy)]
enum Unwritable {
    /// A read-only bind mount of it, in a mount namespace of its own.
    Mount,
    /// Its files readable and not writable, run as another user.
    OtherUser,
}

/// Runs `jp-store` on `root` made unwritable by `how` (the mount at
/// `mount`).
fn run(how: Unwritable, root: &Path, mount: &Path, args: &[&str]) -> Run {
    match how {
        Unwritable::Mount => {
            let mut sh = Command::new("unshare");
            sh.args([
                "--mount",
                "--propagation",
                "private",
                "sh",
                "-c",
                r#"mount --bind "$1" "$2" && mount -o remount,bind,ro "$2" && b="$3" && shift 3 && exec "$b" "$@""#,
                "sh",
            ])
            .arg(root)
            .arg(mount)
            .arg(jp_store_bin());
            run_command(sh, mount, args, b"")
        }
        Unwritable::OtherUser => jpstore_tests::run_jp_store_as(root, Some(NOBODY), args, b""),
    }
}

/// Whether `how` can be made here; if not, why.
fn available(how: Unwritable, dir: &Path) -> Result<(), String> {
    let probe = dir.join("probe");
    fs::create_dir_all(&probe).expect("mkdir");
    let mount = dir.join("probe-mount");
    fs::create_dir_all(&mount).expect("mkdir");
    let out = match how {
        Unwritable::Mount => Command::new("unshare")
            .args([
                "--mount",
                "--propagation",
                "private",
                "sh",
                "-c",
                r#"mount --bind "$1" "$2" && mount -o remount,bind,ro "$2" && ! touch "$2/x" 2>/dev/null"#,
                "sh",
            ])
            .arg(&probe)
            .arg(&mount)
            .output(),
        Unwritable::OtherUser => {
            use std::os::unix::process::CommandExt as _;
            Command::new("sh")
                .args(["-c", r#"test -r "$1" && ! touch "$1/x" 2>/dev/null"#, "sh"])
                .arg(&probe)
                .uid(NOBODY.0)
                .gid(NOBODY.1)
                .output()
        }
    };
    match out {
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => Err(format!(
            "{how:?} cannot be made here: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Err(e) => Err(format!("{how:?} cannot be made here: {e}")),
    }
}

/// Sets every directory below `root` (and `root`) to `dir_mode` and every
/// file to `file_mode`.
fn chmod_tree(root: &Path, dir_mode: u32, file_mode: u32) {
    let set = |p: &Path, mode| {
        fs::set_permissions(p, fs::Permissions::from_mode(mode))
            .unwrap_or_else(|e| panic!("chmod {}: {e}", p.display()));
    };
    set(root, dir_mode);
    for (rel, content) in tree_snapshot(root) {
        set(
            &root.join(rel),
            if content.is_some() {
                file_mode
            } else {
                dir_mode
            },
        );
    }
}

fn findings<'a>(report: &'a Value, kind: &str) -> Vec<&'a Value> {
    report["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .filter(|f| f["kind"] == kind)
        .collect()
}

fn checks_without_writing(how: Unwritable) {
    let dir = tempfile::tempdir().expect("tempdir");
    // Another user reaches the store: its directories are open to all.
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).expect("chmod");
    if let Err(why) = available(how, dir.path()) {
        return skip(&why);
    }
    let refusal = match how {
        Unwritable::Mount => "Read-only file system",
        Unwritable::OtherUser => "Permission denied",
    };
    for locks in [true, false] {
        let name = if locks { "locks" } else { "no-locks" };
        let (root, id) = store(dir.path(), name);
        // What a dry run counts where it can write, to compare.
        let writable = run_jp_store(&root, &["gc", "--dry-run", "--json"], b"").json("gc");
        if !locks {
            remove_locks(&root, &id);
        }
        let mount = dir.path().join(format!("{name}-mount"));
        fs::create_dir_all(&mount).expect("mkdir");
        chmod_tree(&root, 0o755, 0o644);
        let before = tree_snapshot(&root);
        let what = |args: &str| format!("{how:?}, {name}: {args}");

        for args in [
            vec!["fsck", "--json"],
            vec!["fsck", "--read-data", "--json"],
        ] {
            let report = run(how, &root, &mount, &args).json(&what(&args.join(" ")));
            assert_eq!(
                report["clean"],
                true,
                "{}: {report:#}",
                what(&args.join(" "))
            );
            let torn = findings(&report, "torn-tail");
            assert_eq!(torn.len(), 1, "{}: {report:#}", what(&args.join(" ")));
            assert_eq!(torn[0]["conversation"], id.as_str());
            let notes = findings(&report, "no-lock");
            if locks {
                // Its lock file is there: locked without writing it.
                assert!(notes.is_empty(), "{}: {report:#}", what(&args.join(" ")));
            } else {
                assert_eq!(notes.len(), 1, "{}: {report:#}", what(&args.join(" ")));
                let message = notes[0]["message"].as_str().expect("message");
                assert!(
                    message.contains("events.log.lock") && message.contains(refusal),
                    "{}: {message}",
                    what(&args.join(" "))
                );
            }
            assert_eq!(
                findings(&report, "orphan-blobs").len(),
                1,
                "{}: {report:#}",
                what(&args.join(" "))
            );
        }
        let text = run(how, &root, &mount, &["fsck"]);
        assert!(
            text.ok(&what("fsck")).contains("warning: torn-tail"),
            "{}",
            text.stdout
        );

        let dry = run(how, &root, &mount, &["gc", "--dry-run", "--json"]).json(&what("gc"));
        let mut counted = dry.clone();
        let notes = counted.as_object_mut().expect("an object").remove("notes");
        assert_eq!(counted, writable, "{}", what("gc --dry-run"));
        match notes {
            None => assert!(locks, "{}: {dry:#}", what("gc --dry-run")),
            Some(notes) => {
                assert!(!locks, "{}: {dry:#}", what("gc --dry-run"));
                let note = notes[0].as_str().expect("a note");
                assert!(note.contains("gc.lock") && note.contains(refusal), "{note}");
            }
        }
        let human = run(how, &root, &mount, &["gc", "--dry-run"]);
        human.ok(&what("gc --dry-run"));
        assert_eq!(
            human.stderr.contains("without the gc lock"),
            !locks,
            "{}: {}",
            what("gc --dry-run"),
            human.stderr
        );

        // Repairing writes: refused, naming why.
        let repair = run(how, &root, &mount, &["fsck", "--repair"]);
        repair.expect_code(1, &what("fsck --repair"));
        assert!(repair.stderr.contains(refusal), "{}", repair.stderr);

        assert_eq!(
            tree_snapshot(&root),
            before,
            "{}: the store changed",
            what("all")
        );
        chmod_tree(&root, 0o700, 0o600);
    }
}

#[test]
fn a_store_on_a_read_only_file_system_is_checked_without_writing() {
    checks_without_writing(Unwritable::Mount);
}

#[test]
fn another_users_store_is_checked_without_writing() {
    // Permissions bind root only through another user.
    if !is_root() {
        return skip("not root: the store is this user's, whom its modes bind as they are");
    }
    checks_without_writing(Unwritable::OtherUser);
}

/// Whether this process is root (the owner of what it makes: a file it
/// made read-only is still its own to write as anyone else).
fn is_root() -> bool {
    fs::read_to_string("/proc/self/status").is_ok_and(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|ids| ids.split_whitespace().nth(1))
            == Some("0")
    })
}

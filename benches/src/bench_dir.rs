//! Where benchmarks put their stores, what file system that is, and what
//! machine they run on.
//!
//! Stores live below `JPSTORE_BENCH_DIR` if set, else below a directory the
//! bench chooses inside cargo's target directory: `/tmp` is a tmpfs on many
//! systems, where fsync costs nothing and sync figures would be meaningless.

use std::path::{Path, PathBuf};

/// The directory holding a bench's stores: `$JPSTORE_BENCH_DIR`, else
/// `default` (created if missing).
pub fn bench_dir(default: &Path) -> PathBuf {
    let dir = std::env::var_os("JPSTORE_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| default.to_path_buf());
    std::fs::create_dir_all(&dir).expect("create the bench directory");
    dir
}

/// "fstype source (mounted at ...)" of the mount holding `path` (Linux), for
/// the log.
pub fn file_system_of(path: &Path) -> String {
    let path = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return "unknown file system".into();
    };
    let mut best: Option<(usize, String)> = None;
    for line in info.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let Some(dash) = fields.iter().position(|f| *f == "-") else {
            continue;
        };
        let (Some(mount), Some(fstype), Some(source)) =
            (fields.get(4), fields.get(dash + 1), fields.get(dash + 2))
        else {
            continue;
        };
        if path.starts_with(mount) && best.as_ref().is_none_or(|(len, _)| mount.len() >= *len) {
            best = Some((
                mount.len(),
                format!("{fstype} on {source} (mounted at {mount})"),
            ));
        }
    }
    best.map_or_else(|| "unknown file system".into(), |(_, s)| s)
}

/// "N cores (CPU model), M GB RAM, Linux x.y" (Linux; what cannot be read
/// is left out), for the log.
pub fn machine() -> String {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut parts = Vec::new();
    let cpu = std::fs::read_to_string("/proc/cpuinfo").ok().and_then(|s| {
        s.lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_owned())
    });
    parts.push(match cpu {
        Some(cpu) => format!("{cores} cores ({cpu})"),
        None => format!("{cores} cores"),
    });
    let kib = std::fs::read_to_string("/proc/meminfo").ok().and_then(|s| {
        s.lines()
            .find(|l| l.starts_with("MemTotal:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
    });
    if let Some(kib) = kib {
        parts.push(format!("{:.0} GB RAM", kib as f64 / (1 << 20) as f64));
    }
    if let Ok(release) = std::fs::read_to_string("/proc/sys/kernel/osrelease") {
        parts.push(format!("Linux {}", release.trim()));
    }
    parts.join(", ")
}

/// An empty directory `run` below [`bench_dir`]`(default)`, for one run's
/// stores (what an earlier run left there is removed first).
pub fn fresh_run_dir(default: &Path) -> PathBuf {
    let run = bench_dir(default).join("run");
    let _ = std::fs::remove_dir_all(&run);
    std::fs::create_dir_all(&run).expect("create the run directory");
    run
}

/// `"<machine>; stores in <dir> (<file system>)"`: the first line of a
/// bench's output, which `benches/report.py` reads.
pub fn describe(dir: &Path) -> String {
    format!(
        "{}; stores in {} ({})",
        machine(),
        dir.display(),
        file_system_of(dir)
    )
}

//! The commands: one file per command (`blob`: its subcommands); each
//! parses nothing (clap does, in `main.rs`), calls the library and prints.
//! `--json` output is the `Serialize` of the library's report types.

mod append;
mod attach;
pub mod blob;
mod compact;
mod export;
mod fork;
mod fsck;
mod gc;
mod import;
mod init;
mod ls;
mod new;
mod print;
mod rm;
mod stats;
mod view;

pub use append::*;
pub use attach::*;
pub use compact::*;
pub use export::*;
pub use fork::*;
pub use fsck::*;
pub use gc::*;
pub use import::*;
pub use init::*;
pub use ls::*;
pub use new::*;
pub use print::*;
pub use rm::*;
pub use stats::*;
pub use view::*;

use anyhow::{Context, Result};
use jpstore_engine::conversation::ConversationId;
use jpstore_engine::timestamp::Timestamp;
use jpstore_engine::{Store, StoreOptions};
use std::io::Write;
use std::path::Path;

/// Opens the store at `dir`.
pub(crate) fn open_store(dir: &Path) -> Result<Store> {
    crate::output::detail(&format!("store {}", dir.display()));
    Ok(Store::open_dir(dir, StoreOptions::default())?)
}

pub(crate) fn parse_id(s: &str) -> Result<ConversationId> {
    Ok(ConversationId::parse(s)?)
}

pub(crate) fn short_time(t: &Timestamp) -> String {
    let s = t.to_jp_string();
    s.split('.').next().unwrap_or(&s).to_owned()
}

/// A human-readable size.
pub(crate) fn size(n: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.1} {}", UNITS[u])
}

/// The first line of `s`, at most `max` characters, with an ellipsis when
/// cut.
pub(crate) fn excerpt(s: &str, max: usize) -> String {
    let line = s.lines().next().unwrap_or("");
    let cut: String = line.chars().take(max).collect();
    if cut.len() < s.trim_end().len() {
        format!("{cut}…")
    } else {
        cut
    }
}

pub(crate) fn write_file_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    write_file_atomically_with(path, &mut |out| {
        out.write_all(bytes)
            .with_context(|| format!("writing {}", path.display()))
    })
}

/// Writes `path` with what `write` writes, atomically: into a temp file
/// beside it, synced, then renamed over it (a reader sees the old file or
/// the whole new one; a failure leaves the old file as it was).
pub(crate) fn write_file_atomically_with(
    path: &Path,
    write: &mut dyn FnMut(&mut dyn Write) -> Result<()>,
) -> Result<()> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let tmp = tempfile::NamedTempFile::new_in(dir)
        .with_context(|| format!("creating a temp file in {}", dir.display()))?;
    let mut out = std::io::BufWriter::new(tmp);
    write(&mut out)?;
    let tmp = out
        .into_inner()
        .map_err(|e| e.into_error())
        .with_context(|| format!("writing {}", path.display()))?;
    tmp.as_file()
        .sync_all()
        .with_context(|| format!("writing {}", path.display()))?;
    tmp.persist(path)
        .with_context(|| format!("replacing {}", path.display()))?;
    Ok(())
}

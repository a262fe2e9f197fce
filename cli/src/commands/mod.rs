//! The commands: one file per command (`blob`: its subcommands); each
//! parses nothing (clap does, in `main.rs`), calls the library and prints.
//! `--json` output is the `Serialize` of the library's report types.

mod append;
mod attach;
pub mod blob;
mod compact;
mod copy;
mod export;
mod fork;
mod fsck;
mod gc;
mod grep;
mod import;
mod init;
mod ls;
mod new;
mod print;
mod rm;
mod stats;
mod upgrade;
mod view;

pub use append::*;
pub use attach::*;
pub use compact::*;
pub use copy::*;
pub use export::*;
pub use fork::*;
pub use fsck::*;
pub use gc::*;
pub use grep::*;
pub use import::*;
pub use init::*;
pub use ls::*;
pub use new::*;
pub use print::*;
pub use rm::*;
pub use stats::*;
pub use upgrade::*;
pub use view::*;

use anyhow::{Context, Result};
use jpstore_blobstore::backend::Backend;
use jpstore_engine::conversation::ConversationId;
use jpstore_engine::timestamp::Timestamp;
use jpstore_engine::{Store, StoreOptions};
use jpstore_remote::{RequestCounts, S3Backend, S3Config, S3Location, UserConfig};
use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

/// Where the store of `--store` is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreLocation {
    /// A directory.
    Dir(PathBuf),
    /// A bucket and a prefix on S3.
    S3(S3Location),
}

impl StoreLocation {
    /// The location as a person should see it.
    pub fn display(&self) -> &Self {
        self
    }
}

impl fmt::Display for StoreLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreLocation::Dir(d) => write!(f, "{}", d.display()),
            StoreLocation::S3(l) => write!(f, "{l}"),
        }
    }
}

/// The S3 backends this process opened (`copy` opens two), for their
/// request counts.
static S3_BACKENDS: Mutex<Vec<(S3Location, S3Backend)>> = Mutex::new(Vec::new());

/// The cache of stores on S3 as the command line sets it (`--cache-dir`,
/// `--cache-size`, `--no-cache`), over the user configuration file and the
/// environment (`JP_STORE_CACHE_DIR`, `JP_STORE_CACHE_SIZE`).
#[derive(Clone, Debug, Default)]
pub struct CacheFlags {
    /// `--cache-dir`.
    pub dir: Option<PathBuf>,
    /// `--cache-size`.
    pub size: Option<u64>,
    /// `--no-cache`.
    pub off: bool,
}

static CACHE: OnceLock<CacheFlags> = OnceLock::new();

/// Sets the cache of the stores on S3 this process opens.
pub fn configure_cache(flags: CacheFlags) {
    let _ = CACHE.set(flags);
}

/// The settings of stores on S3: the `[s3]` table of the user configuration
/// file, the environment over it, the flags over both; read once.
fn s3_config() -> Result<S3Config> {
    static CONFIG: OnceLock<Result<S3Config, String>> = OnceLock::new();
    let loaded = CONFIG.get_or_init(|| {
        let mut config = UserConfig::load_default()
            .and_then(|c| c.s3.with_env())
            .map_err(|e| e.to_string())?;
        let flags = CACHE.get().cloned().unwrap_or_default();
        if let Some(dir) = flags.dir {
            config.cache_dir = Some(dir);
        }
        if let Some(size) = flags.size {
            config.cache_size = Some(size);
        }
        Ok(config)
    });
    loaded.clone().map_err(anyhow::Error::msg)
}

/// The cache directory of the store at `location`: one per endpoint, bucket
/// and prefix, below the cache directory of the settings (or the user's
/// cache directory).
fn cache_dir_of(location: &S3Location, config: &S3Config) -> Option<PathBuf> {
    if CACHE.get().is_some_and(|f| f.off) {
        return None;
    }
    jpstore_remote::cache_dir_for(location, config)
}

/// The backend of a store on S3, configured by the user configuration file
/// and the environment (`AWS_ENDPOINT_URL`, `AWS_REGION`,
/// `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_ALLOW_HTTP`, ...).
pub(crate) fn s3_backend(location: &S3Location) -> Result<Arc<dyn Backend>> {
    let config = s3_config()?;
    let mut backend = S3Backend::from_config(location.clone(), &config)?;
    if config.endpoint.is_none() {
        crate::output::note(&format!(
            "note: no S3 endpoint is configured (AWS_ENDPOINT_URL, or endpoint in the [s3] table \
             of the user configuration file): {location} is on AWS's default endpoint, \
             https://s3.{}.amazonaws.com",
            config.region.as_deref().unwrap_or("us-east-1")
        ));
    }
    if let Some(dir) = cache_dir_of(location, &config) {
        let size = config
            .cache_size
            .unwrap_or(jpstore_remote::DEFAULT_CACHE_BYTES);
        match jpstore_remote::DiskCache::open(&dir, size) {
            Ok(cache) => {
                crate::output::detail(&format!("cache {}", dir.display()));
                backend = backend.with_cache(cache);
            }
            Err(e) => crate::output::note(&format!(
                "note: no cache for {location}: cannot create {}: {e}",
                dir.display()
            )),
        }
    }
    if std::env::var_os("JP_STORE_TRACE_S3").is_some_and(|v| !v.is_empty() && v != "0") {
        backend.set_trace(true);
    }
    if let Ok(mut opened) = S3_BACKENDS.lock() {
        opened.push((location.clone(), backend.clone()));
    }
    Ok(backend.shared())
}

/// The requests made to S3 by this process, for each store it opened
/// there: its location, the requests, the objects read from the cache.
pub(crate) fn s3_requests() -> Vec<(S3Location, RequestCounts, u64)> {
    S3_BACKENDS.lock().map_or_else(
        |_| Vec::new(),
        |opened| {
            opened
                .iter()
                .map(|(l, b)| (l.clone(), b.requests(), b.cache_hits()))
                .collect()
        },
    )
}

/// Opens the store at `dir`.
pub(crate) fn open_store(dir: &StoreLocation) -> Result<Store> {
    open_store_with(dir, StoreOptions::default())
}

/// Opens the store at `dir` with `options`.
pub(crate) fn open_store_with(dir: &StoreLocation, options: StoreOptions) -> Result<Store> {
    crate::output::detail(&format!("store {dir}"));
    let opened = match dir {
        StoreLocation::Dir(path) => Store::open_dir(path, options),
        StoreLocation::S3(location) => Store::open(s3_backend(location)?, options),
    };
    opened.map_err(|e| match e {
        // The command that makes it, for this store.
        jpstore_engine::error::Error::NotAStore { path, reason } => anyhow::anyhow!(
            "{} is not a jp-store store ({reason}); create one with `{}`",
            path.display(),
            init_command(dir)
        ),
        e => e.into(),
    })
}

/// The `init` command of the store at `dir`: `jp-store init` for the
/// default store, else with its `--store`.
pub(crate) fn init_command(dir: &StoreLocation) -> String {
    let text = dir.to_string();
    if matches!(dir, StoreLocation::Dir(p) if p == Path::new(DEFAULT_STORE)) {
        return "jp-store init".to_string();
    }
    let plain = !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-:~+=@%,".contains(c));
    if plain {
        format!("jp-store --store {text} init")
    } else {
        format!("jp-store --store '{}' init", text.replace('\'', "'\\''"))
    }
}

/// The store of a command without `--store` (nor `JP_STORE_DIR`).
pub const DEFAULT_STORE: &str = ".jp-store";

/// The warning a command that shows a conversation prints when its read
/// left bytes after the last whole record out (format-spec.md 3): shown
/// whatever the verbosity, as records left out may be records lost.
pub(crate) fn torn_tail_warning(
    id: &ConversationId,
    tail: Option<jpstore_engine::internal::log::TornTail>,
) -> Option<String> {
    tail.map(|t| format!("jp-store: warning: {}", t.warning(id)))
}

/// Prints [`torn_tail_warning`] on standard error.
pub(crate) fn warn_torn_tail(
    id: &ConversationId,
    tail: Option<jpstore_engine::internal::log::TornTail>,
) {
    if let Some(w) = torn_tail_warning(id, tail) {
        crate::errln!("{w}");
    }
}

pub(crate) fn parse_id(s: &str) -> Result<ConversationId> {
    ConversationId::parse(s).map_err(|e| usage(e.to_string()))
}

/// The value parser of a conversation id on the command line: an id that
/// cannot be one is bad usage (exit 2), said before the store is opened.
pub(crate) fn conversation_id(s: &str) -> std::result::Result<String, String> {
    ConversationId::parse(s)
        .map(|_| s.to_owned())
        .map_err(|e| e.to_string())
}

/// A command line that asks for something that cannot be done whatever the
/// store holds (a flag that does not apply, a value out of its range): exit
/// status 2, as for the errors clap finds.
#[derive(Debug)]
pub struct Usage(pub String);

impl fmt::Display for Usage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Usage {}

/// A [`Usage`] error.
pub(crate) fn usage(message: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(Usage(message.into()))
}

pub(crate) fn short_time(t: &Timestamp) -> String {
    let s = t.to_string();
    s.split('.').next().unwrap_or(&s).to_owned()
}

pub(crate) use crate::output::size;

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
/// the whole new one; a failure leaves the old file as it was). A new file
/// gets the mode the umask gives (as any program's), a file replaced keeps
/// its own.
pub(crate) fn write_file_atomically_with(
    path: &Path,
    write: &mut dyn FnMut(&mut dyn Write) -> Result<()>,
) -> Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let replaced = std::fs::symlink_metadata(path)
        .ok()
        .filter(|m| m.file_type().is_file())
        .map(|m| m.permissions());
    let tmp = tempfile::Builder::new()
        .permissions(std::fs::Permissions::from_mode(0o666))
        .tempfile_in(dir)
        .with_context(|| format!("creating a temp file in {}", dir.display()))?;
    if let Some(mode) = replaced {
        tmp.as_file()
            .set_permissions(mode)
            .with_context(|| format!("setting the mode of a temp file in {}", dir.display()))?;
    }
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

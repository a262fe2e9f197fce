//! The S3 backend of jp-store: the storage seam
//! ([`jpstore_blobstore::backend::Backend`]) over an S3-compatible object
//! store, so that the engine runs unchanged on a bucket.
//!
//! This crate is apart from the blob store and the engine so that those
//! build without an HTTP client: the `object_store` crate, its TLS stack and
//! a tokio runtime are needed only by programs that open `s3://` stores.
//!
//! The sync trait is implemented over the async client by a private
//! multi-threaded tokio runtime (`block_on` in each method). Every request
//! is made by `object_store`, which retries with exponential backoff on
//! 5xx answers and on timeouts; what it gives up on is reported, naming
//! the key and the HTTP status.
//!
//! How each operation of the seam maps onto S3, and why that keeps the
//! protocols of the store safe, is in format-spec.md ("Stores on S3").
//! In short:
//!
//! - immutable objects (blobs, packs, indexes, a new log) are created with
//!   `If-None-Match: *` (a 412 is a deduplication hit);
//! - a log (a key ending in `.log`) is its first object plus immutable
//!   *segments* `<log>.seg/<offset>`, one per append, each created with
//!   `If-None-Match: *` at the offset the appender believes is the end: two
//!   appenders on two machines cannot both succeed, and neither overwrites
//!   the other;
//! - a conditional replace is `If-Match` on the ETag;
//! - a prefix ("directory") that must exist while empty holds the marker
//!   object `<prefix>/.prefix`, whose unique content tells a prefix created
//!   again from the one a lock was taken under;
//! - locks exclude the threads of one process only: across processes and
//!   machines, appends are ordered by the conditional creates, and gc
//!   refuses to run on a store whose locks do not span its writers
//!   ([`Backend::locks_span_writers`]).

#![warn(missing_docs, unreachable_pub)]

mod cache;
mod config;
mod location;
mod log;
mod reader;
#[doc(hidden)]
pub mod testing;

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::ThreadId;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use jpstore_blobstore::backend::{
    Backend, BackendError, BufferedUpload, Expect, FileKind, Listed, ListedEntry, LockGuard,
    LockKind, LogObject, Mapping, ObjectMeta, ObjectReader, Put, Upload, Version, WriterClock,
    DEFAULT_WRITE_BOUND,
};
use jpstore_blobstore::storage::check_relative;
use object_store::aws::{AmazonS3, AmazonS3Builder, AmazonS3ConfigKey};
use object_store::list::{PaginatedListOptions, PaginatedListStore};
use object_store::path::Path as ObjectPath;
use object_store::{
    ClientConfigKey, ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, RetryConfig,
    UpdateVersion,
};

pub use cache::{cache_dir_for, DiskCache, DEFAULT_CACHE_BYTES};
pub use config::{
    parse_duration, parse_size, ConfigError, S3Config, UserConfig, CACHE_DIR_VAR, CACHE_SIZE_VAR,
    CONFIG_VAR,
};
pub use location::{LocationError, S3Location};
pub use log::MERGE_SEGMENTS;
use reader::{Piece, PieceReader};

/// The name of the marker object of a prefix that exists while empty.
pub const PREFIX_MARKER: &str = ".prefix";

/// The suffix of the keys that are logs (append-only objects stored as a
/// first object and segments).
pub const LOG_SUFFIX: &str = ".log";

/// The suffix of the prefix that holds a log's segments: `<log>.seg/`.
pub const SEGMENTS_SUFFIX: &str = ".seg";

/// The suffix of the prefix that holds a log's merged objects:
/// `<log>.mrg/`.
pub const MERGED_SUFFIX: &str = ".mrg";

/// Why an S3 backend could not be made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RemoteError {
    /// The client could not be configured from the environment (a bad
    /// endpoint URL, say).
    #[error("cannot configure the S3 client for {url}: {source}")]
    Configure {
        /// The store's URL.
        url: String,
        /// What the client said.
        #[source]
        source: object_store::Error,
    },
    /// The runtime the client runs on could not be started.
    #[error("cannot start the runtime of the S3 client: {0}")]
    Runtime(#[source] io::Error),
    /// The endpoint is a plain HTTP URL and plain HTTP was not allowed
    /// (the client would refuse every request: "URL scheme is not
    /// allowed").
    #[error("the S3 endpoint {endpoint} of {url} is plain HTTP, which is refused unless allowed: set AWS_ALLOW_HTTP=true (or allow_http = true in the [s3] table of the user configuration file), or use an https:// endpoint")]
    PlainHttp {
        /// The store's URL.
        url: String,
        /// The endpoint.
        endpoint: String,
    },
    /// The environment holds no credentials (and the instance metadata
    /// endpoint was not asked for).
    #[error("no credentials for {url}: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN for temporary ones), or access_key_id and secret_access_key in the [s3] table of the user configuration file, or AWS_WEB_IDENTITY_TOKEN_FILE with AWS_ROLE_ARN, or AWS_CONTAINER_CREDENTIALS_RELATIVE_URI; on a cloud instance whose role gives them, set {METADATA_CREDENTIALS}=true to ask its metadata endpoint")]
    NoCredentials {
        /// The store's URL.
        url: String,
    },
    /// A setting of the environment has a value that is not of its form.
    #[error("{name}={value:?}: expected {expected}")]
    BadSetting {
        /// The variable.
        name: &'static str,
        /// Its value.
        value: String,
        /// What it should be.
        expected: &'static str,
    },
    /// The user configuration (its file, or the environment) is not valid.
    #[error(transparent)]
    Config(#[from] ConfigError),
}

/// The variable that lets [`S3Backend::from_env`] take its credentials
/// from the instance metadata endpoint when the environment has none.
pub const METADATA_CREDENTIALS: &str = "JP_STORE_S3_METADATA_CREDENTIALS";

/// Whether the environment gives credentials (or asks for none, or for the
/// instance metadata endpoint): otherwise the client would spend its
/// retries asking a metadata endpoint that is not there.
fn credentials_in_env() -> bool {
    let set = |name: &str| std::env::var_os(name).is_some_and(|v| !v.is_empty());
    let yes = |name: &str| {
        std::env::var(name).is_ok_and(|v| matches!(v.to_ascii_lowercase().as_str(), "1" | "true"))
    };
    (set("AWS_ACCESS_KEY_ID") && set("AWS_SECRET_ACCESS_KEY"))
        || (set("AWS_WEB_IDENTITY_TOKEN_FILE") && set("AWS_ROLE_ARN"))
        || set("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI")
        || set("AWS_CONTAINER_CREDENTIALS_FULL_URI")
        || yes("AWS_SKIP_SIGNATURE")
        || yes(METADATA_CREDENTIALS)
}

/// How many requests of each kind a backend made (for measurements and
/// `--verbose`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RequestCounts {
    /// GET requests (whole objects and ranges).
    pub get: u64,
    /// HEAD requests.
    pub head: u64,
    /// PUT requests (creates, replaces, copies).
    pub put: u64,
    /// LIST requests (pages).
    pub list: u64,
    /// DELETE requests.
    pub delete: u64,
}

impl RequestCounts {
    /// All requests.
    pub fn total(&self) -> u64 {
        self.get + self.head + self.put + self.list + self.delete
    }
}

impl fmt::Display for RequestCounts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} requests ({} GET, {} HEAD, {} PUT, {} LIST, {} DELETE)",
            self.total(),
            self.get,
            self.head,
            self.put,
            self.list,
            self.delete
        )
    }
}

#[derive(Debug, Default)]
struct Counters {
    get: AtomicU64,
    head: AtomicU64,
    put: AtomicU64,
    list: AtomicU64,
    delete: AtomicU64,
}

/// The kinds of request, for the counters and the trace.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Req {
    Get,
    Head,
    Put,
    List,
    Delete,
}

impl S3Backend {
    /// Counts one request of `kind` on `rel` (and traces it, if asked).
    pub(crate) fn bump(&self, kind: Req, rel: &str) {
        let c = &self.inner.counters;
        let counter = match kind {
            Req::Get => &c.get,
            Req::Head => &c.head,
            Req::Put => &c.put,
            Req::List => &c.list,
            Req::Delete => &c.delete,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        if self.inner.trace.load(Ordering::Relaxed) {
            let method = match kind {
                Req::Get => "GET",
                Req::Head => "HEAD",
                Req::Put => "PUT",
                Req::List => "LIST",
                Req::Delete => "DELETE",
            };
            eprintln!("jp-store: s3 {method} {}", self.display_rel(rel));
        }
    }

    /// Prints every request to standard error (`s3 GET s3://...`) from now
    /// on, or stops.
    pub fn set_trace(&self, on: bool) {
        self.inner.trace.store(on, Ordering::Relaxed);
    }
}

/// A [`Backend`] over an S3 bucket, below a prefix. Clones share the
/// client, the runtime and the locks.
#[derive(Clone)]
pub struct S3Backend {
    inner: Arc<Inner>,
}

struct Inner {
    store: Arc<dyn ObjectStore>,
    s3: Arc<AmazonS3>,
    cache: cache::Cache,
    /// The prefixes at the store's root (the layout's, which exist as long
    /// as the store does), listed once.
    layout: Mutex<Option<Vec<String>>>,
    /// The objects at the store's root as the LIST that learnt the layout
    /// found them, until the first read of one (`config.toml`): its ETag
    /// then names its bytes in the cache, so that reading it needs no
    /// request of its own. Forgotten when this backend writes at the root.
    root_objects: Mutex<Option<BTreeMap<String, object_store::ObjectMeta>>>,
    /// The identity of each log (its objects as listed: keys, ETags, sizes)
    /// as this thread last listed it or appended to it: what the head
    /// cache beside it is cached by ([`S3Backend::derived_cache_name`]).
    log_ids: Mutex<HashMap<(ThreadId, String), String>>,
    /// What a thread learnt of an object by one request, for the one
    /// request of that thread that follows and would ask the same
    /// ([`S3Backend::take_memo`]).
    memos: Mutex<HashMap<(ThreadId, String), Memo>>,
    runtime: tokio::runtime::Runtime,
    location: S3Location,
    counters: Counters,
    /// The client's timeouts and retries, for errors.
    settings: ClientSettings,
    trace: AtomicBool,
    locks: Mutex<BTreeMap<String, (usize, bool)>>,
    released: Condvar,
    /// The writers' clock of format-spec.md 5.5.
    clock: Arc<WriterClock>,
}

impl fmt::Debug for S3Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("S3Backend")
            .field("location", &self.inner.location)
            .finish()
    }
}

/// The settings of the client that are not taken from the environment.
#[derive(Clone, Debug)]
pub struct ClientSettings {
    /// Timeout of one request (retried with backoff up to
    /// `retry_timeout`).
    pub request_timeout: Duration,
    /// Longest time spent retrying one operation.
    pub retry_timeout: Duration,
    /// Most retries of one operation.
    pub max_retries: usize,
    /// The bound `B` of format-spec.md 5.5: the longest time from a
    /// writer's first look at the blob store to the start of the write of
    /// its record. Every process on one store, gc included, must use the
    /// same (default [`DEFAULT_WRITE_BOUND`], 10 min;
    /// [`WRITE_BOUND_ENV`] sets it in seconds).
    pub write_bound: Duration,
}

/// The environment variable that sets [`ClientSettings::write_bound`], in
/// seconds. Every process working on one store must see the same value, or
/// gc may delete what a slower writer still uses.
pub const WRITE_BOUND_ENV: &str = "JP_STORE_S3_WRITE_BOUND";
/// The environment variable that sets [`ClientSettings::request_timeout`],
/// in seconds.
pub const REQUEST_TIMEOUT_ENV: &str = "JP_STORE_S3_REQUEST_TIMEOUT";
/// The environment variable that sets [`ClientSettings::retry_timeout`], in
/// seconds.
pub const RETRY_TIMEOUT_ENV: &str = "JP_STORE_S3_RETRY_TIMEOUT";

impl ClientSettings {
    /// The settings with what the environment sets ([`WRITE_BOUND_ENV`],
    /// [`REQUEST_TIMEOUT_ENV`], [`RETRY_TIMEOUT_ENV`]).
    pub fn from_env() -> Result<Self, RemoteError> {
        let mut settings = ClientSettings::default();
        let secs = |name: &'static str| -> Result<Option<Duration>, RemoteError> {
            let Some(v) = std::env::var_os(name).filter(|v| !v.is_empty()) else {
                return Ok(None);
            };
            let text = v.to_string_lossy();
            match parse_duration(&text) {
                Some(d) => Ok(Some(d)),
                None => Err(RemoteError::BadSetting {
                    name,
                    value: text.to_string(),
                    expected: config::DURATION,
                }),
            }
        };
        if let Some(d) = secs(WRITE_BOUND_ENV)? {
            settings.write_bound = d;
        }
        if let Some(d) = secs(REQUEST_TIMEOUT_ENV)? {
            settings.request_timeout = d;
        }
        if let Some(d) = secs(RETRY_TIMEOUT_ENV)? {
            settings.retry_timeout = d;
        }
        Ok(settings)
    }

    /// `T` of format-spec.md 5.5: the longest a request may take, retries
    /// included, before its outcome is unknown (the retry budget, plus one
    /// request started at its end).
    pub fn request_limit(&self) -> Duration {
        self.retry_timeout.saturating_add(self.request_timeout)
    }
}

impl ClientSettings {
    /// The settings of the environment ([`ClientSettings::from_env`]) with
    /// the timeouts `config` gives over them (the user configuration with
    /// the environment over it, [`S3Config::with_env`]).
    pub fn of_config(config: &S3Config) -> Result<Self, RemoteError> {
        let mut settings = ClientSettings::from_env()?;
        if let Some(t) = config.request_timeout {
            settings.request_timeout = t;
        }
        if let Some(t) = config.retry_timeout {
            settings.retry_timeout = t;
        }
        Ok(settings)
    }
}

/// The client's builder: the environment's `AWS_*` variables, with the
/// settings of `config` over them.
fn builder_of(config: &S3Config) -> AmazonS3Builder {
    let mut builder = AmazonS3Builder::from_env();
    if let Some(v) = &config.endpoint {
        builder = builder.with_endpoint(v);
    }
    if let Some(v) = &config.region {
        builder = builder.with_region(v);
    }
    if let Some(v) = config.allow_http {
        builder = builder.with_allow_http(v);
    }
    if let Some(v) = &config.access_key_id {
        builder = builder.with_access_key_id(v);
    }
    if let Some(v) = &config.secret_access_key {
        builder = builder.with_secret_access_key(v);
    }
    if let Some(v) = &config.session_token {
        builder = builder.with_token(v);
    }
    builder
}

impl Default for ClientSettings {
    fn default() -> Self {
        ClientSettings {
            request_timeout: Duration::from_secs(30),
            retry_timeout: Duration::from_secs(120),
            max_retries: 8,
            write_bound: DEFAULT_WRITE_BOUND,
        }
    }
}

impl S3Backend {
    /// The backend of the store at `location`, with the endpoint, region
    /// and credentials of the environment (`AWS_ENDPOINT_URL`,
    /// `AWS_REGION`, `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
    /// `AWS_SESSION_TOKEN`, `AWS_ALLOW_HTTP`, ...). With no credentials
    /// there, [`RemoteError::NoCredentials`], unless
    /// [`METADATA_CREDENTIALS`] asks for the instance metadata endpoint.
    pub fn from_env(location: S3Location) -> Result<Self, RemoteError> {
        Self::from_config(location, &S3Config::default().with_env()?)
    }

    /// The backend of the store at `location`, with the settings of
    /// `config` (the user configuration with the environment over it,
    /// [`S3Config::with_env`]) over the rest of the environment's `AWS_*`
    /// variables (web identity, container credentials, ...). Without
    /// credentials in either, [`RemoteError::NoCredentials`], unless
    /// [`METADATA_CREDENTIALS`] asks for the instance metadata endpoint.
    pub fn from_config(location: S3Location, config: &S3Config) -> Result<Self, RemoteError> {
        if let Some(endpoint) = &config.endpoint {
            let plain = endpoint
                .get(..7)
                .is_some_and(|s| s.eq_ignore_ascii_case("http://"));
            if plain && config.allow_http != Some(true) {
                return Err(RemoteError::PlainHttp {
                    url: location.to_string(),
                    endpoint: endpoint.clone(),
                });
            }
        }
        if !config.has_credentials() && !credentials_in_env() {
            return Err(RemoteError::NoCredentials {
                url: location.to_string(),
            });
        }
        Self::with_builder(
            location,
            builder_of(config),
            ClientSettings::of_config(config)?,
        )
    }

    /// The backend of the store at `location`, configured by `builder`
    /// (its bucket is set here).
    pub fn with_builder(
        location: S3Location,
        builder: AmazonS3Builder,
        settings: ClientSettings,
    ) -> Result<Self, RemoteError> {
        let retry = RetryConfig {
            max_retries: settings.max_retries,
            retry_timeout: settings.retry_timeout,
            ..RetryConfig::default()
        };
        let store = builder
            .with_bucket_name(&location.bucket)
            .with_retry(retry)
            // Set as a key, not with `with_client_options`, which would
            // replace the options of the environment (AWS_ALLOW_HTTP...).
            .with_config(
                AmazonS3ConfigKey::Client(ClientConfigKey::Timeout),
                format!("{}ms", settings.request_timeout.as_millis().max(1)),
            )
            .build()
            .map_err(|source| RemoteError::Configure {
                url: location.to_string(),
                source,
            })?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("jpstore-s3")
            .enable_all()
            .build()
            .map_err(RemoteError::Runtime)?;
        let s3 = Arc::new(store);
        Ok(S3Backend {
            inner: Arc::new(Inner {
                store: s3.clone(),
                s3,
                cache: cache::Cache::default(),
                layout: Mutex::new(None),
                root_objects: Mutex::new(None),
                log_ids: Mutex::new(HashMap::new()),
                memos: Mutex::new(HashMap::new()),
                runtime,
                location,
                counters: Counters::default(),
                settings: settings.clone(),
                trace: AtomicBool::new(false),
                locks: Mutex::new(BTreeMap::new()),
                released: Condvar::new(),
                clock: WriterClock::new(settings.write_bound, settings.request_limit()),
            }),
        })
    }

    /// The backend with a cache directory of immutable objects
    /// ([`DiskCache`]): set before any request is made.
    pub fn with_cache(self, cache: DiskCache) -> Self {
        match Arc::try_unwrap(self.inner) {
            Ok(mut inner) => {
                inner.cache.disk = Some(cache);
                S3Backend {
                    inner: Arc::new(inner),
                }
            }
            Err(inner) => S3Backend { inner },
        }
    }

    /// How many objects were read from the cache instead of the server.
    pub fn cache_hits(&self) -> u64 {
        self.inner.cache.hits.load(Ordering::Relaxed)
    }

    /// The backend, shared.
    pub fn shared(self) -> Arc<dyn Backend> {
        Arc::new(self)
    }

    /// Where the store is.
    pub fn location(&self) -> &S3Location {
        &self.inner.location
    }

    /// The requests made so far.
    pub fn requests(&self) -> RequestCounts {
        let c = &self.inner.counters;
        RequestCounts {
            get: c.get.load(Ordering::Relaxed),
            head: c.head.load(Ordering::Relaxed),
            put: c.put.load(Ordering::Relaxed),
            list: c.list.load(Ordering::Relaxed),
            delete: c.delete.load(Ordering::Relaxed),
        }
    }

    fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        self.inner.runtime.block_on(f)
    }

    fn store(&self) -> &dyn ObjectStore {
        &*self.inner.store
    }

    /// The key relative to the store (`a/b/c`; "" for the root), refusing
    /// what could leave the store.
    fn rel(&self, key: &Path) -> io::Result<String> {
        if key == Path::new(".") || key.as_os_str().is_empty() {
            return Ok(String::new());
        }
        check_relative(key)?;
        let mut parts = Vec::new();
        for c in key.iter() {
            let c = c.to_str().ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "{} is not UTF-8: not a key of an object store",
                        key.display()
                    ),
                )
            })?;
            if c != "." {
                parts.push(c);
            }
        }
        Ok(parts.join("/"))
    }

    /// The full object key of a relative key.
    fn full(&self, rel: &str) -> String {
        match (self.inner.location.prefix.as_str(), rel) {
            ("", r) => r.to_string(),
            (p, "") => p.to_string(),
            (p, r) => format!("{p}/{r}"),
        }
    }

    fn object_path(&self, rel: &str) -> io::Result<ObjectPath> {
        ObjectPath::parse(self.full(rel)).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{rel:?} is not a valid object key: {e}"),
            )
        })
    }

    /// The relative key of a full object path, if it is below the prefix.
    fn rel_of(&self, path: &ObjectPath) -> Option<String> {
        let full = path.as_ref();
        match self.inner.location.prefix.as_str() {
            "" => Some(full.to_string()),
            p => full
                .strip_prefix(p)
                .and_then(|r| r.strip_prefix('/'))
                .map(str::to_string),
        }
    }

    /// An error of the client as an I/O error naming the HTTP status
    /// where the client's error tells it.
    fn io_error(&self, rel: &str, e: object_store::Error) -> io::Error {
        use object_store::Error as E;
        let (kind, status) = match &e {
            E::NotFound { .. } => (io::ErrorKind::NotFound, Some("HTTP 404 Not Found")),
            E::AlreadyExists { .. } | E::Precondition { .. } => (
                io::ErrorKind::AlreadyExists,
                Some("HTTP 412 Precondition Failed"),
            ),
            E::PermissionDenied { .. } => {
                (io::ErrorKind::PermissionDenied, Some("HTTP 403 Forbidden"))
            }
            E::Unauthenticated { .. } => (
                io::ErrorKind::PermissionDenied,
                Some("HTTP 401 Unauthorized"),
            ),
            E::NotSupported { .. } | E::NotImplemented { .. } => (io::ErrorKind::Unsupported, None),
            _ => (io::ErrorKind::Other, None),
        };
        let url = format!("s3://{}/{}", self.inner.location.bucket, self.full(rel));
        if e.to_string().contains("<Code>NoSuchBucket</Code>") {
            // Not `NotFound`: no object of the store is absent, the
            // store's bucket is.
            return io::Error::other(format!(
                "{url}: HTTP 404: the bucket {} does not exist",
                self.inner.location.bucket
            ));
        }
        let said = e.to_string();
        let retried = retried_request(&said);
        let mut text = match (status, &retried) {
            (Some(status), _) => format!("{url}: {status} ({e})"),
            (None, Some((what, _))) => format!("{url}: {what}"),
            (None, None) => format!("{url}: {e}"),
        };
        // The causes the client's message leaves out (a connection refused,
        // a TLS failure, a timeout).
        let mut cause = std::error::Error::source(&e);
        while let Some(c) = cause {
            let cause_text = c.to_string();
            if !said.contains(&cause_text) && !text.contains(&cause_text) {
                text.push_str(": ");
                text.push_str(&cause_text);
            }
            cause = c.source();
        }
        if let Some((_, tried)) = retried {
            text.push_str(&format!(" ({tried})"));
        }
        if text.contains("timed out") {
            let settings = &self.inner.settings;
            text.push_str(&format!(
                "; no answer within the request timeout of {} ({REQUEST_TIMEOUT_ENV}, or \
                 request_timeout in the [s3] table of the user configuration file)",
                humantime::format_duration(settings.request_timeout)
            ));
        }
        io::Error::new(kind, text)
    }

    /// A failed write: [`BackendError::Unsynced`] when its outcome is
    /// unknown (the client gave up after retries or a timeout: the request
    /// may have been applied), [`BackendError::Io`] when the server refused
    /// it.
    fn write_error(
        &self,
        op: &'static str,
        key: &Path,
        rel: &str,
        e: object_store::Error,
    ) -> BackendError {
        let unknown = matches!(
            e,
            object_store::Error::Generic { .. } | object_store::Error::JoinError { .. }
        );
        let io = self.io_error(rel, e);
        if unknown {
            BackendError::unsynced(key, io)
        } else {
            BackendError::io(op, key, io)
        }
    }

    // ----- requests -------------------------------------------------------

    /// One PUT; returns the new object's ETag.
    fn put(&self, rel: &str, data: Bytes, mode: PutMode) -> object_store::Result<Option<String>> {
        let path = ObjectPath::parse(self.full(rel))?;
        self.wrote(rel);
        self.bump(Req::Put, rel);
        self.block_on(
            self.store()
                .put_opts(&path, PutPayload::from(data), PutOptions::from(mode)),
        )
        .map(|r| r.e_tag)
    }

    /// Whether the object `rel` never changes once created, whatever its
    /// ETag: content-addressed objects (loose blobs, packs, indexes).
    fn immutable(rel: &str) -> bool {
        rel.starts_with("blobs/objects/") || rel.starts_with("blobs/packs/")
    }

    /// The cache's name of `rel` as of `etag`, if it may be cached: an
    /// immutable object by its key alone, any other by its key and ETag.
    fn cache_name(&self, rel: &str, etag: Option<&str>) -> Option<String> {
        let tag = match etag {
            _ if Self::immutable(rel) => "",
            Some(t) => t.trim_matches('"'),
            None => return None,
        };
        Some(format!(
            "{}\n{}\n{tag}",
            self.inner.location.bucket,
            self.full(rel)
        ))
    }

    /// The bytes of the object `rel` (of `len` bytes) from the cache.
    pub(crate) fn cached(&self, rel: &str, etag: Option<&str>, len: u64) -> Option<Bytes> {
        let name = self.cache_name(rel, etag)?;
        self.inner
            .cache
            .get(&name)
            .filter(|b| b.len() as u64 == len)
    }

    /// Keeps the whole object `rel` in the cache, if it may be.
    pub(crate) fn keep(&self, rel: &str, etag: Option<&str>, bytes: &Bytes) {
        if let Some(name) = self.cache_name(rel, etag) {
            self.inner.cache.put(&name, bytes);
        }
    }

    /// The cache's name of `what` (`size`, `chunk N`) of the object `rel`
    /// as of `etag` (immutable objects: whatever it is), for an object too
    /// large to be cached whole.
    fn part_name(&self, rel: &str, etag: Option<&str>, what: &str) -> Option<String> {
        Some(format!("{}\n\n{what}", self.cache_name(rel, etag)?))
    }

    /// The size of the immutable object `rel`, if the cache knows it.
    fn cached_size(&self, rel: &str) -> Option<u64> {
        let b = self.inner.cache.get(&self.part_name(rel, None, "size")?)?;
        Some(u64::from_le_bytes(b.as_ref().try_into().ok()?))
    }

    /// Chunk `n` (bytes `[n * RANGE_CHUNK, ...)`) of the object `rel` as of
    /// `etag`, if cached.
    pub(crate) fn cached_chunk(&self, rel: &str, etag: Option<&str>, n: u64) -> Option<Bytes> {
        self.inner
            .cache
            .get(&self.part_name(rel, etag, &format!("chunk {n}"))?)
    }

    /// Keeps chunk `n` of the object `rel` as of `etag`, if it may be.
    pub(crate) fn keep_chunk(&self, rel: &str, etag: Option<&str>, n: u64, bytes: &Bytes) {
        if let Some(name) = self.part_name(rel, etag, &format!("chunk {n}")) {
            self.inner.cache.put(&name, bytes);
        }
    }

    /// One page of a listing of the raw key prefix `prefix` (full, not
    /// ended by `/`), after the key `start_after` (full), continuing from
    /// `token`.
    pub(crate) fn list_page(
        &self,
        prefix: &str,
        delimiter: bool,
        start_after: Option<String>,
        token: Option<String>,
    ) -> io::Result<Page> {
        let rel = self.rel_of_str(prefix);
        self.bump(Req::List, &rel);
        let opts = PaginatedListOptions {
            offset: start_after,
            delimiter: delimiter.then_some(std::borrow::Cow::Borrowed("/")),
            page_token: token,
            ..PaginatedListOptions::default()
        };
        let p = (!prefix.is_empty()).then_some(prefix);
        let got = self
            .listing(|| self.inner.s3.list_paginated(p, opts.clone()))
            .map_err(|e| self.io_error(&rel, e))?;
        Ok(Page {
            objects: got.result.objects,
            more: got.page_token,
        })
    }

    /// Runs a listing, asked again (up to [`LISTING_RETRIES`] times) when
    /// its answer's body was cut short: the client retries a request that
    /// failed, but not the reading of a body that ended early.
    fn listing<T, F, Fut>(&self, list: F) -> object_store::Result<T>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = object_store::Result<T>>,
    {
        let mut tries = 0;
        loop {
            match self.block_on(list()) {
                Err(e) if tries < LISTING_RETRIES && body_cut_short(&e) => tries += 1,
                done => return done,
            }
        }
    }

    /// The relative form of a full key (itself if not below the prefix).
    fn rel_of_str(&self, full: &str) -> String {
        match self.inner.location.prefix.as_str() {
            "" => full.to_string(),
            p => full
                .strip_prefix(p)
                .and_then(|r| r.strip_prefix('/'))
                .unwrap_or(full)
                .to_string(),
        }
    }

    fn get(&self, rel: &str) -> io::Result<Bytes> {
        let immutable = Self::immutable(rel);
        if immutable {
            if let Some(name) = self.cache_name(rel, None) {
                if let Some(b) = self.inner.cache.get(&name) {
                    return Ok(b);
                }
            }
        }
        let path = self.object_path(rel)?;
        self.bump(Req::Get, rel);
        let got = self
            .block_on(async { self.store().get(&path).await?.bytes().await })
            .map_err(|e| self.io_error(rel, e))?;
        if immutable {
            self.keep(rel, None, &got);
        }
        Ok(got)
    }

    fn head_raw(&self, rel: &str) -> io::Result<object_store::ObjectMeta> {
        let path = self.object_path(rel)?;
        self.bump(Req::Head, rel);
        self.block_on(self.store().head(&path))
            .map_err(|e| self.io_error(rel, e))
    }

    fn delete_raw(&self, rel: &str) -> object_store::Result<()> {
        let path = ObjectPath::parse(self.full(rel))?;
        self.wrote(rel);
        self.bump(Req::Delete, rel);
        self.block_on(self.store().delete(&path))
    }

    /// The objects and common prefixes one level below `rel`.
    fn list_level(&self, rel: &str) -> io::Result<(Vec<object_store::ObjectMeta>, Vec<String>)> {
        let path = self.object_path(rel)?;
        let prefix = if path.as_ref().is_empty() {
            None
        } else {
            Some(&path)
        };
        self.bump(Req::List, rel);
        let listed = self
            .listing(|| self.store().list_with_delimiter(prefix))
            .map_err(|e| self.io_error(rel, e))?;
        let prefixes = listed
            .common_prefixes
            .iter()
            .filter_map(|p| p.filename().map(str::to_string))
            .collect();
        // Some servers (SeaweedFS) list a directory whose objects are all
        // gone as an empty object named like the prefix itself: not one
        // of its children.
        let objects = listed
            .objects
            .into_iter()
            .filter(|m| m.location != path)
            .collect();
        Ok((objects, prefixes))
    }

    /// Every object below `rel` (recursively), as relative keys with their
    /// metadata; at most `limit` of them.
    fn list_below(
        &self,
        rel: &str,
        limit: usize,
    ) -> io::Result<Vec<(String, object_store::ObjectMeta)>> {
        let path = self.object_path(rel)?;
        let prefix = if path.as_ref().is_empty() {
            None
        } else {
            Some(path)
        };
        self.bump(Req::List, rel);
        let found: Vec<object_store::ObjectMeta> = self
            .listing(|| {
                self.store()
                    .list(prefix.as_ref())
                    .take(limit)
                    .try_collect::<Vec<_>>()
            })
            .map_err(|e| self.io_error(rel, e))?;
        Ok(found
            .into_iter()
            .filter_map(|m| self.rel_of(&m.location).map(|r| (r, m)))
            .collect())
    }

    /// Whether the prefix `rel` exists: the root, a marker, or objects
    /// below it.
    fn prefix_exists(&self, rel: &str) -> io::Result<bool> {
        if rel.is_empty() {
            return Ok(true);
        }
        Ok(!self.list_below(rel, 1)?.is_empty())
    }

    fn display_rel(&self, rel: &str) -> String {
        format!("s3://{}/{}", self.inner.location.bucket, self.full(rel))
    }

    /// The pieces of the object `rel`: a log's first object and the
    /// objects that cover the rest (`log.rs`), or the object itself.
    fn pieces(&self, rel: &str) -> io::Result<Vec<Piece>> {
        if is_log(rel) {
            let (listing, pieces) = self.cover_log(rel)?;
            if listing.first.is_none() {
                return Err(io::Error::new(
                    io::ErrorKind::NotFound,
                    format!(
                        "{}: HTTP 404 Not Found (no such log)",
                        self.display_rel(rel)
                    ),
                ));
            }
            return Ok(pieces);
        }
        if Self::immutable(rel) {
            if let Some(name) = self.cache_name(rel, None) {
                if let Some(b) = self.inner.cache.get(&name) {
                    return Ok(vec![Piece::with_data(rel.to_string(), 0, b, None)]);
                }
            }
            // Too large to be cached whole: read by chunks, some cached.
            if let Some(size) = self.cached_size(rel) {
                return Ok(vec![Piece::new(rel.to_string(), 0, size, 0, size, None)]);
            }
        }
        // An object at the root that the LIST of the layout just listed
        // (`config.toml`): its bytes as of the ETag listed, from the cache.
        if let Some(listed) = self.take_root_object(rel) {
            let Some(meta) = listed else {
                return Err(self.not_found(rel));
            };
            let etag = meta.e_tag.as_deref();
            if let Some(b) = self.cached(rel, etag, meta.size) {
                return Ok(vec![Piece::with_data(
                    rel.to_string(),
                    0,
                    b,
                    meta.e_tag.clone(),
                )]);
            }
        }
        // A head cache, as of the identity of its log as last listed (an
        // empty entry: there was none; a head is never empty).
        let derived = self.derived_cache_name(rel);
        if let Some(name) = &derived {
            match self.inner.cache.get(name) {
                Some(b) if b.is_empty() => return Err(self.not_found(rel)),
                Some(b) => return Ok(vec![Piece::with_data(rel.to_string(), 0, b, None)]),
                None => {}
            }
        }
        let first = match reader::open_first(self, rel) {
            Ok(first) => first,
            Err(e) => {
                if let (Some(name), io::ErrorKind::NotFound) = (&derived, e.kind()) {
                    self.inner.cache.put_replacing(name, &Bytes::new());
                }
                return Err(e);
            }
        };
        if Self::immutable(rel) && first.whole_bytes().is_none() {
            if let (Some(name), Some(chunk)) =
                (self.part_name(rel, None, "size"), first.first_chunk())
            {
                self.inner
                    .cache
                    .put(&name, &Bytes::copy_from_slice(&first.obj_len.to_le_bytes()));
                self.keep_chunk(rel, None, 0, &chunk);
            }
        }
        if let Some(b) = first.whole_bytes() {
            if Self::immutable(rel) {
                self.keep(rel, None, &b);
            } else if let Some(name) = &derived {
                self.inner.cache.put_replacing(name, &b);
            } else if !rel.contains('/') {
                self.keep(rel, first.etag.as_deref(), &b);
            }
        }
        Ok(vec![first])
    }

    /// Forgets, as this backend writes `rel`, what it learnt of it: the
    /// memos of it (or of the log it is a segment of), and the objects at
    /// the root as listed if it is one of them.
    fn wrote(&self, rel: &str) {
        self.inner
            .memos
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|(_, log), _| !rel.starts_with(log.as_str()));
        if !rel.contains('/') {
            *self
                .inner
                .root_objects
                .lock()
                .unwrap_or_else(|e| e.into_inner()) = None;
        }
    }

    /// The object `rel` at the root as the LIST of the layout found it
    /// (`Some(None)`: it was not there), if that LIST is the latest word on
    /// the root: taken once, so that only the first read after the LIST
    /// goes by it (a store reads `config.toml` once, as of its opening).
    fn take_root_object(&self, rel: &str) -> Option<Option<object_store::ObjectMeta>> {
        if rel.contains('/') {
            return None;
        }
        let mut root = self
            .inner
            .root_objects
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        root.take().map(|mut listed| listed.remove(rel))
    }

    /// Keeps what this thread just learnt of the object `rel` for the next
    /// request of this thread that would ask it again.
    fn memo(&self, rel: &str, memo: Memo) {
        let mut memos = self.inner.memos.lock().unwrap_or_else(|e| e.into_inner());
        if memos.len() >= MAX_LOG_IDS {
            memos.clear();
        }
        memos.insert((std::thread::current().id(), rel.to_string()), memo);
    }

    /// What this thread learnt of the object `rel` by its request just
    /// before (taken: used once). Two such requests with nothing of this
    /// thread in between answer alike but for a writer elsewhere, whose
    /// appends are conditional on the end it read (format-spec.md 5.3); a
    /// lock taken or a write of the object forgets it.
    fn take_memo(&self, rel: &str) -> Option<Memo> {
        self.inner
            .memos
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&(std::thread::current().id(), rel.to_string()))
    }

    /// Forgets what this thread learnt of objects (it takes a lock: what it
    /// reads next must be read after).
    fn forget_memos(&self) {
        let me = std::thread::current().id();
        self.inner
            .memos
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|(t, _), _| *t != me);
    }

    /// The cache's name of the head cache `rel` (`<dir>/head`) as of the
    /// identity of the log beside it (`<dir>/events.log`) as this thread
    /// last listed it or appended to it. A head is made from its log's
    /// bytes alone (the settings it caches carry their own key, and the
    /// whole head is checked against the log before it is trusted,
    /// format-spec.md 4.6): one read or written for a log of exactly these
    /// objects serves as well as the one on the server.
    fn derived_cache_name(&self, rel: &str) -> Option<String> {
        let dir = rel.strip_suffix(HEAD_OBJECT)?;
        if !(dir.is_empty() || dir.ends_with('/')) {
            return None;
        }
        let id = self.log_id(&format!("{dir}{LOG_OBJECT}"))?;
        Some(format!(
            "{}\n{}\nlog {id}",
            self.inner.location.bucket,
            self.full(rel)
        ))
    }

    /// The identity of the log `rel` as this thread last listed it or
    /// appended to it.
    fn log_id(&self, rel: &str) -> Option<String> {
        let ids = self.inner.log_ids.lock().unwrap_or_else(|e| e.into_inner());
        ids.get(&(std::thread::current().id(), rel.to_string()))
            .cloned()
    }

    /// Notes the identity of the log `rel` covered by `pieces` (as listed,
    /// or as appended to): the key, ETag and range of each. Unknown when
    /// an ETag is.
    pub(crate) fn note_log<'a>(&self, rel: &str, pieces: impl IntoIterator<Item = &'a Piece>) {
        use std::fmt::Write as _;
        let mut text = String::new();
        let mut known = true;
        for p in pieces {
            let Some(tag) = &p.etag else {
                known = false;
                break;
            };
            let _ = writeln!(
                text,
                "{}\t{}\t{} {} {} {}",
                p.key,
                tag.trim_matches('"'),
                p.obj_len,
                p.start,
                p.skip,
                p.len
            );
        }
        let key = (std::thread::current().id(), rel.to_string());
        let mut ids = self.inner.log_ids.lock().unwrap_or_else(|e| e.into_inner());
        if known && !text.is_empty() {
            if ids.len() >= MAX_LOG_IDS {
                ids.clear();
            }
            ids.insert(key, jpstore_blobstore::BlobId::of(text.as_bytes()).to_hex());
        } else {
            ids.remove(&key);
        }
    }

    /// The prefixes at the store's root (`conversations`, `blobs`), listed
    /// once per backend: they are created by `init` and the blob store and
    /// removed by nothing while the store exists. (A prefix not there is
    /// asked about again by [`Backend::head`].)
    fn root_children(&self) -> io::Result<Vec<String>> {
        {
            let layout = self.inner.layout.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(c) = layout.as_ref() {
                return Ok(c.clone());
            }
        }
        let (objects, prefixes) = self.list_level("")?;
        Ok(self.learn_root(objects, &prefixes))
    }

    /// Keeps what a LIST of the root found: its prefixes, and its objects
    /// until the first read of one ([`S3Backend::take_root_object`]).
    fn learn_root(
        &self,
        objects: Vec<object_store::ObjectMeta>,
        prefixes: &[String],
    ) -> Vec<String> {
        let listed = objects
            .into_iter()
            .filter_map(|m| Some((self.rel_of(&m.location)?, m)))
            .collect();
        *self
            .inner
            .root_objects
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(listed);
        let children = prefixes.to_vec();
        self.inner
            .layout
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .replace(children.clone());
        children
    }

    fn not_found(&self, rel: &str) -> io::Error {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!("{}: HTTP 404 Not Found", self.display_rel(rel)),
        )
    }

    fn meta(&self, m: &object_store::ObjectMeta, len: u64) -> ObjectMeta {
        ObjectMeta {
            len,
            modified: SystemTime::from(m.last_modified),
            kind: FileKind::Regular,
            version: Version(
                m.e_tag
                    .clone()
                    .unwrap_or_else(|| m.last_modified.to_rfc3339()),
            ),
        }
    }

    fn prefix_meta() -> ObjectMeta {
        ObjectMeta {
            len: 0,
            modified: UNIX_EPOCH,
            kind: FileKind::Directory,
            version: Version(String::new()),
        }
    }

    /// The ETag of the marker of prefix `rel`, if there is one.
    fn marker_tag(&self, rel: &str) -> io::Result<Option<String>> {
        match self.head_raw(&join(rel, PREFIX_MARKER)) {
            Ok(m) => Ok(Some(m.e_tag.unwrap_or_default())),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn locks(&self) -> MutexGuard<'_, BTreeMap<String, (usize, bool)>> {
        self.inner.locks.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Copies the object `from` to `to` (both relative), server side.
    fn copy(&self, from: &str, to: &str) -> io::Result<()> {
        let (f, t) = (self.object_path(from)?, self.object_path(to)?);
        self.wrote(to);
        self.bump(Req::Put, to);
        self.block_on(self.store().copy(&f, &t))
            .map_err(|e| self.io_error(from, e))
    }
}

/// How soon after a lock was taken without waiting its first check may
/// rely on the generation read as it was taken (the taker checks at once;
/// a check later than this asks the server).
const FRESH_LOCK: Duration = Duration::from_secs(1);

/// The prefix of the packs of the blob store.
const PACKS_PREFIX: &str = "blobs/packs";

/// The head cache of a conversation (format-spec.md 4.6), cached by the
/// identity of the log beside it.
const HEAD_OBJECT: &str = "head";
/// The log beside a head cache.
const LOG_OBJECT: &str = "events.log";
/// Logs whose identity a backend remembers, at most (then it forgets them
/// all: a long-running process reading many conversations).
const MAX_LOG_IDS: usize = 10_000;

/// Whether the client's error came after it retried the request (its
/// message says "after N retries"): the first attempt may have been
/// applied.
fn after_retries(e: &object_store::Error) -> bool {
    let text = e.to_string();
    text.match_indices(", after ").any(|(at, found)| {
        let rest = &text[at + found.len()..];
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        rest[digits.len()..].starts_with(" retr") && digits.parse::<u64>().is_ok_and(|n| n > 0)
    })
}

/// How many times a listing whose answer was cut short is asked again.
const LISTING_RETRIES: usize = 3;

/// Whether the client failed reading the body of a listing's answer (the
/// connection closed before its end): the request may be made again.
fn body_cut_short(e: &object_store::Error) -> bool {
    matches!(e, object_store::Error::Generic { .. })
        && e.to_string().contains("Error getting list response body")
}

/// What the client says of a request it gave up on ("Error performing PUT
/// <url> in 1.2s, after 6 retries, max_retries: 8, retry_timeout: 1s -
/// Server returned non-2xx status code: 503 Service Unavailable: <body>"),
/// said once: the HTTP status with the server's code and message from its
/// S3 error body ("HTTP 503 Service Unavailable: SlowDown: Please reduce
/// your request rate"), and how long it was tried ("after 6 retries in
/// 1.2 s"). `None` when the text is not of that shape.
fn retried_request(text: &str) -> Option<(String, String)> {
    let at = text.rfind("Error performing ")?;
    let (head, inner) = text[at..].split_once(" - ")?;
    let elapsed = head
        .rsplit_once(" in ")
        .map(|(_, r)| r.split(',').next().unwrap_or(r).trim())?;
    // `Duration`'s `Debug`: "1.089066726s", "950.2ms".
    let elapsed = match elapsed.strip_suffix("ms") {
        Some(ms) => ms
            .parse::<f64>()
            .map_or(elapsed.to_string(), |ms| format!("{ms:.0} ms")),
        None => elapsed
            .strip_suffix('s')
            .and_then(|s| s.parse::<f64>().ok())
            .map_or(elapsed.to_string(), |s| format!("{s:.1} s")),
    };
    let retries = head
        .split_once(", after ")
        .and_then(|(_, r)| r.split(' ').next())
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or(0);
    let inner = inner.trim();
    let what = if let Some(rest) = inner
        .strip_prefix("Server returned non-2xx status code: ")
        .or_else(|| inner.strip_prefix("Server returned error response: "))
    {
        let (status, body) = rest.split_once(": ").unwrap_or((rest, ""));
        let tag = |name: &str| {
            let open = format!("<{name}>");
            let from = body.find(&open)? + open.len();
            let len = body[from..].find(&format!("</{name}>"))?;
            Some(body[from..from + len].trim().to_string())
        };
        let said = match (tag("Code"), tag("Message")) {
            (Some(c), Some(m)) => format!(": {c}: {m}"),
            (Some(t), None) | (None, Some(t)) => format!(": {t}"),
            (None, None) if body.trim().is_empty() => String::new(),
            (None, None) => format!(": {}", body.trim()),
        };
        format!("HTTP {status}{said}")
    } else {
        inner.to_string()
    };
    let tried = match retries {
        0 => format!("in {elapsed}"),
        1 => format!("after 1 retry in {elapsed}"),
        n => format!("after {n} retries in {elapsed}"),
    };
    Some((what, tried))
}

/// The prefixes of a store's layout that `init` and the blob store create
/// and nothing removes while the store exists.
const LAYOUT_PREFIXES: [&str; 5] = [
    "conversations",
    "blobs",
    "blobs/objects",
    "blobs/packs",
    "blobs/tmp",
];

/// What a thread learnt of an object by one request, for the next.
#[derive(Debug)]
enum Memo {
    /// A log's listing (by [`Backend::head`]), for a create that follows.
    Listed(log::Listing),
    /// A log's first object, just created: the whole log, for the open of
    /// its writer that follows (whose appends are conditional on the end
    /// it knows: a writer elsewhere that appended meanwhile makes them
    /// fail, never makes anything read stale).
    Created(Piece),
    /// An object of `blobs/packs` as the listing of that prefix found it,
    /// for the `head` of it that follows (the blob store loading a pack
    /// it listed).
    Listing(object_store::ObjectMeta),
}

/// Whether `rel` is a prefix of the store's layout, which exists while
/// the store does: one of [`LAYOUT_PREFIXES`], or a fanout prefix
/// `blobs/objects/<2 hex digits>` of the loose objects (on S3 an object
/// needs no prefix made before it: these need no marker).
fn layout_prefix(rel: &str) -> bool {
    LAYOUT_PREFIXES.contains(&rel)
        || rel.strip_prefix("blobs/objects/").is_some_and(|f| {
            f.len() == 2
                && f.bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        })
}

/// One page of a listing.
pub(crate) struct Page {
    pub(crate) objects: Vec<object_store::ObjectMeta>,
    /// The token of the next page, if there is one.
    pub(crate) more: Option<String>,
}

/// `dir/name` (or `name` at the root).
fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
}

/// The parent of a relative key ("" at the top).
fn parent(rel: &str) -> &str {
    rel.rfind('/').map_or("", |i| &rel[..i])
}

/// Whether the key names a log.
fn is_log(rel: &str) -> bool {
    rel.ends_with(LOG_SUFFIX)
}

/// The name of the segment of a log starting at `offset`.
pub fn segment_name(offset: u64) -> String {
    format!("{offset:020}")
}

/// The offset of a segment name.
pub(crate) fn segment_offset(name: &str) -> Option<u64> {
    if name.len() == 20 && name.bytes().all(|b| b.is_ascii_digit()) {
        name.parse().ok()
    } else {
        None
    }
}

/// A token unique to this creation of a prefix marker.
fn unique_token() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(
        "prefix created at {nanos} by process {} ({})\n",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

impl Backend for S3Backend {
    fn display(&self, key: &Path) -> PathBuf {
        let rel = self
            .rel(key)
            .unwrap_or_else(|_| key.to_string_lossy().into_owned());
        PathBuf::from(self.display_rel(&rel))
    }

    fn put_if_absent(&self, key: &Path, data: &[u8], _scratch: &Path) -> Result<Put, BackendError> {
        let rel = self
            .rel(key)
            .map_err(|e| BackendError::io("create", key, e))?;
        if is_log(&rel) {
            // A new log's records may reference blobs: only within the
            // writers' bound (format-spec.md 5.5).
            self.inner
                .clock
                .check()
                .map_err(|e| BackendError::io("create", key, e))?;
            // Segments left by a log removed halfway (a crash between the
            // deletions of its segments and of its first object) must not
            // become part of a new log of the same name.
            let listing = match self.take_memo(&rel) {
                Some(Memo::Listed(listing)) => listing,
                _ => self
                    .log_objects(&rel)
                    .map_err(|e| BackendError::io("inspect", key, e))?,
            };
            let left = listing.segments.len() + listing.merged.len();
            if left > 0 && listing.first.is_none() {
                return Err(BackendError::io(
                    "create",
                    key,
                    io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!(
                            "{}: {left} segments of a removed log are left under \
                             {rel}{SEGMENTS_SUFFIX}/ and {rel}{MERGED_SUFFIX}/ \
                             (remove them, or run fsck)",
                            self.display_rel(&rel),
                        ),
                    ),
                ));
            }
        }
        let bytes = Bytes::copy_from_slice(data);
        match self.put(&rel, bytes.clone(), PutMode::Create) {
            Ok(tag) => {
                if is_log(&rel) {
                    // The new log is what we wrote, until an append.
                    self.keep(&rel, tag.as_deref(), &bytes);
                    if tag.is_some() {
                        self.memo(
                            &rel,
                            Memo::Created(Piece::with_data(rel.clone(), 0, bytes, tag)),
                        );
                    }
                }
                Ok(Put::Created)
            }
            Err(
                e @ (object_store::Error::AlreadyExists { .. }
                | object_store::Error::Precondition { .. }),
            ) if Self::immutable(&rel) || !after_retries(&e) => Ok(Put::Existed),
            Err(
                object_store::Error::AlreadyExists { .. }
                | object_store::Error::Precondition { .. },
            ) => {
                // A name not given by the content (a log, config.toml, a
                // note), and a 412 to the client's retry of this very
                // create: its first attempt may have been applied and its
                // answer lost. The object is then ours, byte for byte
                // (format-spec.md 5.2).
                match self.get(&rel) {
                    Ok(there) if there.as_ref() == data => Ok(Put::Created),
                    Ok(_) => Ok(Put::Existed),
                    Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Put::Existed),
                    Err(e) => Err(BackendError::unsynced(key, e)),
                }
            }
            Err(e) => Err(self.write_error("create", key, &rel, e)),
        }
    }

    fn upload(&self, _scratch: &Path) -> Result<Box<dyn Upload>, BackendError> {
        Ok(Box::new(BufferedUpload::new(self.clone())))
    }

    fn leaves_scratch(&self) -> bool {
        false
    }

    fn open(&self, key: &Path) -> io::Result<Box<dyn ObjectReader>> {
        let rel = self.rel(key)?;
        let pieces = self.pieces(&rel)?;
        Ok(Box::new(if is_log(&rel) {
            PieceReader::of_log(self.clone(), &rel, pieces)
        } else {
            PieceReader::new(self.clone(), pieces)
        }))
    }

    fn map(&self, key: &Path) -> io::Result<Mapping> {
        let rel = self.rel(key)?;
        if is_log(&rel) {
            let reader = self.open(key)?;
            return Ok(Mapping::Owned(jpstore_blobstore::backend::read_all(
                &*reader,
                u64::MAX,
            )?));
        }
        Ok(Mapping::Owned(self.get(&rel)?.to_vec()))
    }

    fn head(&self, key: &Path) -> io::Result<ObjectMeta> {
        let rel = self.rel(key)?;
        if rel.is_empty() {
            return Ok(Self::prefix_meta());
        }
        if is_log(&rel) {
            let (listing, pieces) = self.cover_log(&rel)?;
            // For a create that follows (`put_if_absent` checks the same).
            self.memo(&rel, Memo::Listed(listing.clone()));
            return match &listing.first_meta {
                Some(first) => Ok(self.meta(first, pieces.last().map_or(0, |p| p.end()))),
                None if listing.below => Ok(Self::prefix_meta()),
                None => Err(self.not_found(&rel)),
            };
        }
        if parent(&rel) == PACKS_PREFIX {
            if let Some(Memo::Listing(m)) = self.take_memo(&rel) {
                return Ok(self.meta(&m, m.size));
            }
        }
        // The layout's prefixes (`conversations`, `blobs`, `blobs/packs`...):
        // one LIST of the root answers for all of them, those below `blobs`
        // existing while it does.
        if layout_prefix(&rel) {
            let top = rel.split('/').next().unwrap_or_default();
            if self.root_children()?.iter().any(|c| c == top) {
                return Ok(Self::prefix_meta());
            }
        }
        // One LIST of the key as a raw prefix answers both questions: is
        // there an object of that name, and objects below it? (Without the
        // delimiter: some servers list empty "folders" as common prefixes.)
        let full = self.full(&rel);
        let dir = format!("{full}/");
        let mut token = None;
        loop {
            let page = self.list_page(&full, false, None, token.take())?;
            for m in &page.objects {
                let k = m.location.as_ref();
                if k == full {
                    return Ok(self.meta(m, m.size));
                }
                if k.starts_with(&dir) {
                    return Ok(Self::prefix_meta());
                }
            }
            // Keys sort by bytes: past `<key>/` there is nothing to find.
            let past = page
                .objects
                .last()
                .is_some_and(|m| m.location.as_ref() > dir.as_str());
            match page.more {
                Some(t) if !past => token = Some(t),
                _ => return Err(self.not_found(&rel)),
            }
        }
    }

    fn list(&self, prefix: &Path) -> io::Result<Vec<Listed>> {
        let rel = self.rel(prefix)?;
        let (objects, prefixes) = self.list_level(&rel)?;
        if rel.is_empty() {
            self.learn_root(objects.clone(), &prefixes);
        }
        if objects.is_empty() && prefixes.is_empty() && layout_prefix(&rel) {
            // A prefix of the layout exists while the store does.
            return Ok(Vec::new());
        }
        if objects.is_empty() && prefixes.is_empty() && !rel.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{}: no objects below this prefix", self.display_rel(&rel)),
            ));
        }
        if rel == PACKS_PREFIX {
            // For the loads of the packs listed, which need their sizes: as
            // of this listing only.
            let me = std::thread::current().id();
            self.inner
                .memos
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .retain(|(t, _), m| *t != me || !matches!(m, Memo::Listing(_)));
            for m in &objects {
                if let Some(r) = self.rel_of(&m.location) {
                    self.memo(&r, Memo::Listing(m.clone()));
                }
            }
        }
        let mut out = Vec::new();
        for m in &objects {
            let Some(name) = m.location.filename() else {
                continue;
            };
            if name == PREFIX_MARKER {
                continue;
            }
            let mut len = m.size;
            if is_log(name)
                && prefixes.iter().any(|p| {
                    *p == format!("{name}{SEGMENTS_SUFFIX}")
                        || *p == format!("{name}{MERGED_SUFFIX}")
                })
            {
                len = self
                    .cover_log(&join(&rel, name))?
                    .1
                    .last()
                    .map_or(0, |p| p.end());
            }
            out.push(Listed {
                name: name.to_string(),
                entry: ListedEntry::Object(self.meta(m, len)),
            });
        }
        for p in prefixes {
            if p.ends_with(&format!("{LOG_SUFFIX}{SEGMENTS_SUFFIX}"))
                || p.ends_with(&format!("{LOG_SUFFIX}{MERGED_SUFFIX}"))
            {
                continue;
            }
            out.push(Listed {
                name: p,
                entry: ListedEntry::Prefix,
            });
        }
        Ok(out)
    }

    fn list_objects_below(&self, prefix: &Path) -> io::Result<Vec<(PathBuf, ObjectMeta)>> {
        let rel = self.rel(prefix)?;
        Ok(self
            .list_below(&rel, usize::MAX)?
            .into_iter()
            .filter(|(_, m)| m.location.filename() != Some(PREFIX_MARKER))
            .filter_map(|(r, m)| {
                let below = r.strip_prefix(&rel)?.trim_start_matches('/');
                Some((PathBuf::from(below), self.meta(&m, m.size)))
            })
            .collect())
    }

    fn delete(&self, keys: &[PathBuf]) -> Result<usize, BackendError> {
        let mut deleted = 0;
        for key in keys {
            let rel = self
                .rel(key)
                .map_err(|e| BackendError::io("remove", key, e))?;
            if is_log(&rel) {
                let listing = self
                    .log_objects(&rel)
                    .map_err(|e| BackendError::io("remove", key, e))?;
                if listing.first.is_none() {
                    continue;
                }
                // Latest offset first: a crash leaves a shorter log, whole.
                let mut parts: Vec<_> = listing.segments.iter().chain(&listing.merged).collect();
                parts.sort_by_key(|p| std::cmp::Reverse((p.start, p.merged)));
                for part in parts {
                    self.delete_raw(&part.rel)
                        .map_err(|e| self.write_error("remove", key, &part.rel, e))?;
                }
            } else {
                match self.head_raw(&rel) {
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                    Err(e) => return Err(BackendError::io("remove", key, e)),
                }
            }
            self.delete_raw(&rel)
                .map_err(|e| self.write_error("remove", key, &rel, e))?;
            deleted += 1;
        }
        Ok(deleted)
    }

    fn replace(
        &self,
        key: &Path,
        data: &[u8],
        _scratch: &Path,
        expect: Expect,
        _durable: bool,
    ) -> Result<(), BackendError> {
        let rel = self
            .rel(key)
            .map_err(|e| BackendError::io("replace", key, e))?;
        let mode = match &expect {
            Expect::Any => PutMode::Overwrite,
            Expect::Version(Version(tag)) => PutMode::Update(UpdateVersion {
                e_tag: Some(tag.clone()),
                version: None,
            }),
        };
        let bytes = Bytes::copy_from_slice(data);
        match self.put(&rel, bytes.clone(), mode) {
            Ok(_) => {
                if let Some(name) = self.derived_cache_name(&rel) {
                    self.inner.cache.put_replacing(&name, &bytes);
                }
                Ok(())
            }
            Err(
                object_store::Error::AlreadyExists { .. }
                | object_store::Error::Precondition { .. }
                | object_store::Error::NotFound { .. },
            ) if matches!(expect, Expect::Version(_)) => Err(BackendError::io(
                "replace",
                key,
                io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!(
                        "{}: HTTP 412 Precondition Failed: the object was written since it was read",
                        self.display_rel(&rel)
                    ),
                ),
            )),
            Err(e) => Err(self.write_error("replace", key, &rel, e)),
        }
    }

    fn rename(&self, from: &Path, to: &Path) -> Result<(), BackendError> {
        let f = self
            .rel(from)
            .map_err(|e| BackendError::io("move", from, e))?;
        let t = self.rel(to).map_err(|e| BackendError::io("move", to, e))?;
        let exists = match self.head_raw(&t) {
            Ok(_) => true,
            Err(e) if e.kind() == io::ErrorKind::NotFound => self
                .prefix_exists(&t)
                .map_err(|e| BackendError::io("move", to, e))?,
            Err(e) => return Err(BackendError::io("move", to, e)),
        };
        if exists || t.is_empty() {
            return Err(BackendError::io(
                "move",
                from,
                io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!("{} exists", self.display_rel(&t)),
                ),
            ));
        }
        // What moves: the object (with its segments), or everything below
        // the prefix.
        let mut moves: Vec<(String, String)> = Vec::new();
        match self.head_raw(&f) {
            Ok(_) => {
                if is_log(&f) {
                    let listing = self
                        .log_objects(&f)
                        .map_err(|e| BackendError::io("move", from, e))?;
                    for part in listing.merged.iter().chain(&listing.segments) {
                        let rest = &part.rel[f.len()..];
                        moves.push((part.rel.clone(), format!("{t}{rest}")));
                    }
                }
                moves.push((f.clone(), t.clone()));
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound && !f.is_empty() => {
                let below = self
                    .list_below(&f, usize::MAX)
                    .map_err(|e| BackendError::io("move", from, e))?;
                if below.is_empty() {
                    return Err(BackendError::io("move", from, e));
                }
                for (r, _) in below {
                    let rest = r[f.len()..].trim_start_matches('/').to_string();
                    moves.push((r, join(&t, &rest)));
                }
                // Segments before the objects they extend, markers last:
                // the copies are all made before anything is deleted.
                moves.sort_by_key(|(r, _)| {
                    let part = r.contains(&format!("{LOG_SUFFIX}{SEGMENTS_SUFFIX}/"))
                        || r.contains(&format!("{LOG_SUFFIX}{MERGED_SUFFIX}/"));
                    (!part, r.ends_with(PREFIX_MARKER))
                });
            }
            Err(e) => return Err(BackendError::io("move", from, e)),
        }
        for (a, b) in &moves {
            self.copy(a, b)
                .map_err(|e| BackendError::unsynced(from, e))?;
        }
        // Deleting the sources: segments before what they extend (moves
        // lists them first), then the rest.
        for (a, _) in &moves {
            self.delete_raw(a)
                .map_err(|e| self.write_error("move", from, a, e))?;
        }
        Ok(())
    }

    fn move_object(&self, from: &Path, to: &Path) -> Result<(), BackendError> {
        let f = self
            .rel(from)
            .map_err(|e| BackendError::io("move", from, e))?;
        let t = self.rel(to).map_err(|e| BackendError::io("move", to, e))?;
        // A server-side copy, then the delete of the source: a crash
        // between leaves both names, never neither (5.4).
        self.copy(&f, &t).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => BackendError::io("move", from, e),
            _ => BackendError::unsynced(from, e),
        })?;
        self.delete_raw(&f)
            .map_err(|e| self.write_error("move", from, &f, e))
    }

    fn open_log(&self, key: &Path) -> io::Result<Box<dyn LogObject>> {
        let rel = self.rel(key)?;
        // A log this thread has just created holds what it wrote.
        let pieces = match self.take_memo(&rel) {
            Some(Memo::Created(first)) => {
                self.note_log(&rel, [&first]);
                vec![first]
            }
            _ => self.pieces(&rel)?,
        };
        Ok(Box::new(S3Log {
            key: key.to_path_buf(),
            reader: PieceReader::of_log(self.clone(), &rel, pieces),
            rel,
        }))
    }

    fn lock(
        &self,
        name: &Path,
        kind: LockKind,
        wait: bool,
    ) -> io::Result<Option<Box<dyn LockGuard>>> {
        let rel = self.rel(name)?;
        let dir = parent(&rel).to_string();
        // The generation of the prefix the lock is taken under: the unique
        // content (so the ETag) of its marker.
        let generation = if dir.is_empty() {
            None
        } else {
            match self.marker_tag(&dir)? {
                Some(tag) => Some(tag),
                None if self.prefix_exists(&dir)? => None,
                None => {
                    return Err(io::Error::new(
                        io::ErrorKind::NotFound,
                        format!("{}: no such prefix", self.display_rel(&dir)),
                    ))
                }
            }
        };
        self.forget_memos();
        let mut locks = self.locks();
        let mut waited = false;
        loop {
            let (shared, exclusive) = locks.get(&rel).copied().unwrap_or((0, false));
            let free = match kind {
                LockKind::Shared => !exclusive,
                LockKind::Exclusive => !exclusive && shared == 0,
            };
            if free {
                let entry = locks.entry(rel.clone()).or_insert((0, false));
                match kind {
                    LockKind::Shared => entry.0 += 1,
                    LockKind::Exclusive => entry.1 = true,
                }
                return Ok(Some(Box::new(S3Lock {
                    backend: self.clone(),
                    rel,
                    dir,
                    generation,
                    kind,
                    fresh: Mutex::new((!waited).then(std::time::Instant::now)),
                })));
            }
            if !wait {
                return Ok(None);
            }
            waited = true;
            locks = self
                .inner
                .released
                .wait(locks)
                .unwrap_or_else(|e| e.into_inner());
        }
    }

    fn touch(&self, key: &Path) -> io::Result<bool> {
        let rel = self.rel(key)?;
        // S3 has no "set the time": the object is written again, only if
        // it is still the version read.
        let meta = match self.head_raw(&rel) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(e),
        };
        let data = self.get(&rel)?;
        self.put(
            &rel,
            data,
            PutMode::Update(UpdateVersion {
                e_tag: meta.e_tag,
                version: None,
            }),
        )
        .map_err(|e| self.io_error(&rel, e))?;
        Ok(true)
    }

    fn create_prefix(&self, dir: &Path) -> Result<(), BackendError> {
        let rel = self
            .rel(dir)
            .map_err(|e| BackendError::io("create", dir, e))?;
        if rel.is_empty() {
            return Ok(());
        }
        let marker = join(&rel, PREFIX_MARKER);
        match self.put(&marker, Bytes::from(unique_token()), PutMode::Create) {
            Ok(_)
            | Err(
                object_store::Error::AlreadyExists { .. }
                | object_store::Error::Precondition { .. },
            ) => {
                if layout_prefix(&rel) {
                    let top = rel.split('/').next().unwrap_or_default().to_string();
                    let mut layout = self.inner.layout.lock().unwrap_or_else(|e| e.into_inner());
                    if let Some(root) = layout.as_mut() {
                        if !root.contains(&top) {
                            root.push(top);
                        }
                    }
                }
                Ok(())
            }
            Err(e) => Err(self.write_error("create", dir, &marker, e)),
        }
    }

    fn sync_prefix(&self, _dir: &Path) -> Result<(), BackendError> {
        Ok(())
    }

    fn sync_object(&self, _key: &Path) -> Result<(), BackendError> {
        Ok(())
    }

    fn remove_prefix(&self, dir: &Path) -> io::Result<()> {
        let rel = self.rel(dir)?;
        let below = self.list_below(&rel, 2)?;
        let marker = join(&rel, PREFIX_MARKER);
        if below.iter().any(|(r, _)| *r != marker) {
            return Err(io::Error::new(
                io::ErrorKind::DirectoryNotEmpty,
                format!(
                    "{}: objects remain below this prefix",
                    self.display_rel(&rel)
                ),
            ));
        }
        if below.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{}: no such prefix", self.display_rel(&rel)),
            ));
        }
        self.delete_raw(&marker)
            .map_err(|e| self.io_error(&marker, e))
    }

    fn renames_in_one_step(&self) -> bool {
        false
    }

    fn locks_span_writers(&self) -> bool {
        false
    }

    fn writer_clock(&self) -> Option<&Arc<WriterClock>> {
        Some(&self.inner.clock)
    }
}

/// A log open for appending: its pieces, and one segment per append.
#[derive(Debug)]
struct S3Log {
    key: PathBuf,
    rel: String,
    reader: PieceReader,
}

impl ObjectReader for S3Log {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.reader.read_at(buf, offset)
    }
    fn len(&self) -> io::Result<u64> {
        self.reader.len()
    }
}

impl LogObject for S3Log {
    fn as_reader(&self) -> &dyn ObjectReader {
        self
    }

    fn append(&self, at: u64, data: &[u8]) -> Result<(), BackendError> {
        let backend = self.reader.backend();
        let end = self.reader.end();
        if at != end {
            return Err(BackendError::io(
                "append to",
                &self.key,
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("an append at offset {at}, but the log ends at {end}"),
                ),
            ));
        }
        // The record may reference blobs: only within the writers' bound
        // (format-spec.md 5.5).
        backend
            .inner
            .clock
            .check()
            .map_err(|e| BackendError::io("append to", &self.key, e))?;
        let seg = format!("{}{SEGMENTS_SUFFIX}/{}", self.rel, segment_name(at));
        let bytes = Bytes::copy_from_slice(data);
        let mut etag = None;
        match backend.put(&seg, bytes.clone(), PutMode::Create) {
            Ok(tag) => {
                // Our own bytes, named by the ETag a listing will give.
                backend.keep(&seg, tag.as_deref(), &bytes);
                etag = tag;
            }
            Err(
                object_store::Error::AlreadyExists { .. }
                | object_store::Error::Precondition { .. },
            ) => {
                // Either another appender created the segment first, or a
                // retry of ours found our own first attempt: only the
                // second, proven by the bytes, is a success.
                let there = backend
                    .get(&seg)
                    .map_err(|e| BackendError::unsynced(&self.key, e))?;
                if there != bytes {
                    return Err(BackendError::io(
                        "append to",
                        &self.key,
                        io::Error::new(
                            io::ErrorKind::AlreadyExists,
                            format!(
                                "another writer appended at offset {at} first \
                                 ({}: HTTP 412 Precondition Failed); nothing of this batch \
                                 was written",
                                backend.display_rel(&seg)
                            ),
                        ),
                    ));
                }
            }
            Err(e) => return Err(backend.write_error("append to", &self.key, &seg, e)),
        }
        self.reader.push(Piece::with_data(seg, at, bytes, etag));
        // Merging is best effort: the append is acknowledged already, and
        // a merge that fails leaves a valid log (format-spec.md 5.3).
        if let Ok(Some(merged)) = backend.merge_tail(&self.rel, &self.reader.pieces()) {
            self.reader.replace_from(merged);
        }
        backend.note_log(&self.rel, self.reader.pieces().iter().map(|p| &**p));
        Ok(())
    }

    fn truncate(&self, len: u64) -> Result<(), BackendError> {
        // Each segment is created whole, so an object store has no torn
        // tail to cut; only whole segments past `len` can go.
        let cut = self
            .reader
            .cut_after(len)
            .map_err(|e| BackendError::io("cut the tail of", &self.key, e))?;
        let backend = self.reader.backend();
        for seg in cut.iter().rev() {
            backend
                .delete_raw(seg)
                .map_err(|e| backend.write_error("cut the tail of", &self.key, seg, e))?;
        }
        backend.note_log(&self.rel, self.reader.pieces().iter().map(|p| &**p));
        Ok(())
    }

    fn sync(&self) -> Result<(), BackendError> {
        Ok(())
    }
}

/// A lock of this process, under a prefix of a known generation.
#[derive(Debug)]
struct S3Lock {
    backend: S3Backend,
    rel: String,
    dir: String,
    generation: Option<String>,
    kind: LockKind,
    /// When it was taken, if without waiting (its generation read just
    /// before): the first check, the taker's at once, needs no request.
    fresh: Mutex<Option<std::time::Instant>>,
}

impl LockGuard for S3Lock {
    fn is_current(&self) -> io::Result<bool> {
        let fresh = self
            .fresh
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .is_some_and(|at| at.elapsed() < FRESH_LOCK);
        if self.dir.is_empty() || fresh {
            return Ok(true);
        }
        match (&self.generation, self.backend.marker_tag(&self.dir)?) {
            (Some(had), Some(now)) => Ok(*had == now),
            (None, None) => self.backend.prefix_exists(&self.dir),
            _ => Ok(false),
        }
    }
}

impl Drop for S3Lock {
    fn drop(&mut self) {
        let mut locks = self.backend.locks();
        if let Some(entry) = locks.get_mut(&self.rel) {
            match self.kind {
                LockKind::Shared => entry.0 = entry.0.saturating_sub(1),
                LockKind::Exclusive => entry.1 = false,
            }
            if *entry == (0, false) {
                locks.remove(&self.rel);
            }
        }
        drop(locks);
        self.backend.inner.released.notify_all();
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod error_text_tests {
    use super::{after_retries, retried_request};

    const GAVE_UP: &str = "Generic S3 error: Error performing PUT http://h/b/k in 1.089066726s, \
        after 7 retries, max_retries: 8, retry_timeout: 1s  - Server returned non-2xx status \
        code: 503 Service Unavailable: <?xml version=\"1.0\"?><Error><Code>SlowDown</Code>\
        <Message>Please reduce your request rate.</Message></Error>";

    #[test]
    fn a_request_given_up_is_said_once_with_status_code_message_and_retries() {
        let (what, tried) = retried_request(GAVE_UP).expect("the client's form");
        assert_eq!(
            what,
            "HTTP 503 Service Unavailable: SlowDown: Please reduce your request rate."
        );
        assert_eq!(tried, "after 7 retries in 1.1 s");
        let timeout = "Generic S3 error: Error performing PUT http://h/b/k in 1.0s - HTTP error: \
            error sending request";
        let (what, tried) = retried_request(timeout).expect("the client's form");
        assert_eq!(what, "HTTP error: error sending request");
        assert_eq!(tried, "in 1.0 s");
        assert_eq!(retried_request("something else"), None);
    }

    #[test]
    fn retries_are_found_in_the_clients_message() {
        let e = |text: &str| object_store::Error::Precondition {
            path: "k".into(),
            source: text.to_string().into(),
        };
        assert!(after_retries(&e(GAVE_UP)));
        assert!(after_retries(&e(
            "Error performing PUT u in 2s, after 1 retries, max"
        )));
        assert!(!after_retries(&e(
            "Error performing PUT u in 2ms - Server returned 412"
        )));
        assert!(!after_retries(&e(
            "Error performing PUT u in 2s, after 0 retries, max"
        )));
    }
}

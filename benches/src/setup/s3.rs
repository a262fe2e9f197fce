//! Stores on a real S3 server (the tests' server: `JP_STORE_TEST_S3_ENDPOINT`,
//! or a SeaweedFS started for this process from `JP_STORE_TEST_WEED`, see
//! `jpstore_remote::testing`), each backend as one `jp-store` process has
//! it, and the requests it makes.

use std::path::{Path, PathBuf};

use jpstore_engine::copy;
use jpstore_engine::internal::copy::open_or_init_like;
use jpstore_engine::{Store, StoreOptions};
use jpstore_remote::testing::TestServer;
use jpstore_remote::{
    ClientSettings, DiskCache, RequestCounts, S3Backend, S3Location, DEFAULT_CACHE_BYTES,
};

/// A backend of the store at `location` as a new `jp-store` process has it:
/// nothing in memory, the cache directory `cache` (`None`: `--no-cache`).
/// With `JP_STORE_TRACE_S3` set, it prints every request, as the command
/// does.
pub fn process_backend(
    server: &TestServer,
    location: &S3Location,
    cache: Option<&Path>,
) -> S3Backend {
    process_backend_with(server, location, cache, ClientSettings::default())
}

/// [`process_backend`] with the client's `settings` (gc's bound `B` and
/// the timeouts that make `T`, format-spec.md 5.5).
pub fn process_backend_with(
    server: &TestServer,
    location: &S3Location,
    cache: Option<&Path>,
    settings: ClientSettings,
) -> S3Backend {
    let backend = server.backend_with(location.clone(), settings);
    if std::env::var_os("JP_STORE_TRACE_S3").is_some_and(|v| !v.is_empty() && v != "0") {
        backend.set_trace(true);
    }
    match cache {
        Some(dir) => backend.with_cache(
            DiskCache::open(dir, DEFAULT_CACHE_BYTES).expect("open the cache directory"),
        ),
        None => backend,
    }
}

/// The store of `backend`, opened as a command opens it.
pub fn open(backend: &S3Backend) -> Store {
    Store::open(backend.clone().shared(), StoreOptions::default()).expect("open the store on S3")
}

/// A new store at `location` holding every conversation of `src` (as
/// `jp-store copy SRC s3://...` makes it: each log one object, the blobs in
/// packs). Returns the requests the copy made.
pub fn copy_store(server: &TestServer, src: &Store, location: &S3Location) -> RequestCounts {
    let backend = process_backend(server, location, None);
    let (dst, _) = open_or_init_like(
        src,
        backend.clone().shared(),
        PathBuf::from(location.to_string()),
        StoreOptions::default(),
    )
    .expect("make the store on S3");
    let report = copy::run(src, &dst, &[], &mut |_| {}).expect("copy to S3");
    assert!(report.complete, "copy to S3: {report:?}");
    backend.requests()
}

/// The requests `backend` made since `before` (its counts then).
pub fn since(backend: &S3Backend, before: RequestCounts) -> RequestCounts {
    let now = backend.requests();
    RequestCounts {
        get: now.get - before.get,
        head: now.head - before.head,
        put: now.put - before.put,
        list: now.list - before.list,
        delete: now.delete - before.delete,
    }
}

//! Opening a store by the location `jp-store --store` takes: a directory
//! (or a `file://` URL of one), or `s3://BUCKET/PREFIX`, whose client is
//! configured as the command line's is (the `[s3]` table of the user
//! configuration file, the environment over it; format-spec.md 5.7).

use jpstore_engine::internal::StoreInterior as _;
use std::path::{Path, PathBuf};

use jpstore_engine::{Store, StoreOptions};
use jpstore_remote::{DiskCache, S3Backend, S3Location, UserConfig, DEFAULT_CACHE_BYTES};

use crate::error::BackendError;

/// The store at `location`, created when the location holds none (a new or
/// empty directory, an empty prefix).
pub(crate) fn open_or_create(location: &str) -> Result<Store, BackendError> {
    let bad = |reason: String| BackendError::Location {
        location: location.to_owned(),
        reason,
    };
    if location.starts_with("s3://") {
        let at = S3Location::parse(location).map_err(|e| bad(e.to_string()))?;
        let config = UserConfig::load_default()
            .and_then(|c| c.s3.with_env())
            .map_err(|e| bad(e.to_string()))?;
        let mut backend =
            S3Backend::from_config(at.clone(), &config).map_err(|e| bad(e.to_string()))?;
        if let Some(dir) = jpstore_remote::cache_dir_for(&at, &config) {
            let size = config.cache_size.unwrap_or(DEFAULT_CACHE_BYTES);
            // A cache that cannot be made only costs requests.
            if let Ok(cache) = DiskCache::open(&dir, size) {
                backend = backend.with_cache(cache);
            }
        }
        let (store, _) = Store::init_new(
            backend.shared(),
            PathBuf::from(location),
            StoreOptions::default(),
        )?;
        return Ok(store);
    }
    let path = match location.strip_prefix("file://") {
        Some(p) => Path::new(p),
        None if location.contains("://") => {
            return Err(bad(
                "a store is a directory, a file:// URL of one, or s3://BUCKET/PREFIX".into(),
            ))
        }
        None => Path::new(location),
    };
    let (store, _) = Store::init_new_dir(path, StoreOptions::default())?;
    Ok(store)
}

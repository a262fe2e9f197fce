//! `jp-store init`: make a directory a store.

use anyhow::Result;
use jpstore_engine::internal::StoreInterior as _;
use jpstore_engine::{Store, StoreOptions};
use std::path::PathBuf;
use std::process::ExitCode;

pub fn init(dir: &super::StoreLocation) -> Result<ExitCode> {
    let (_, created) = match dir {
        super::StoreLocation::Dir(path) => Store::init_new_dir(path, StoreOptions::default())?,
        super::StoreLocation::S3(location) => Store::init_new(
            super::s3_backend(location)?,
            PathBuf::from(location.to_string()),
            StoreOptions::default(),
        )?,
    };
    if !created {
        crate::output::note(&format!(
            "{} is already a jp-store store; left as it is",
            dir.display()
        ));
    }
    crate::outln!("{}", dir.display());
    Ok(ExitCode::SUCCESS)
}

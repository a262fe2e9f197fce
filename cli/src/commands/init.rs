//! `jp-store init`: make a directory a store.

use anyhow::Result;
use jpstore_engine::{Store, StoreOptions};
use std::path::Path;
use std::process::ExitCode;

pub fn init(dir: &Path) -> Result<ExitCode> {
    let (_, created) = Store::init_new_dir(dir, StoreOptions::default())?;
    if !created {
        crate::output::note(&format!(
            "{} is already a jp-store store; left as it is",
            dir.display()
        ));
    }
    crate::outln!("{}", dir.display());
    Ok(ExitCode::SUCCESS)
}

//! `jp-store rm`: remove a conversation.

use super::{open_store, parse_id};
use anyhow::Result;
use std::path::Path;
use std::process::ExitCode;

pub fn rm(dir: &Path, id: &str) -> Result<ExitCode> {
    let store = open_store(dir)?;
    let id = parse_id(id)?;
    store.remove(&id)?;
    crate::outln!("removed {id} (its blobs stay until gc)");
    Ok(ExitCode::SUCCESS)
}

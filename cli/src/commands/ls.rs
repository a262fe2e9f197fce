//! `jp-store ls`: list the conversations.

use super::{open_store, short_time};
use anyhow::Result;
use jpstore_engine::internal::StoreInterior as _;
use std::process::ExitCode;

pub fn ls(dir: &super::StoreLocation, json_out: bool) -> Result<ExitCode> {
    let store = open_store(dir)?;
    let mut list = Vec::new();
    let mut failed = Vec::new();
    for item in store.list_each()? {
        match item {
            Ok(l) => list.push(l),
            Err((id, e)) => failed.push((id, e)),
        }
    }
    for (id, e) in &failed {
        crate::errln!("jp-store: error: conversation {id} cannot be listed: {e}");
    }
    let code = if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    };
    if json_out {
        crate::jsonln!("{}", serde_json::to_string_pretty(&list)?);
        return Ok(code);
    }
    if list.is_empty() {
        crate::outln!("no conversations");
        return Ok(code);
    }
    crate::outln!(
        "{:<20} {:>5} {:>7}  {:<21}  TITLE",
        "ID",
        "TURNS",
        "EVENTS",
        "LAST ACTIVITY"
    );
    for l in &list {
        let last = l
            .state
            .last_activity()
            .map(|t| short_time(&t))
            .unwrap_or_else(|| "-".into());
        crate::outln!(
            "{:<20} {:>5} {:>7}  {:<21}  {}",
            l.id,
            l.state.turns(),
            l.state.entries,
            last,
            l.state.metadata.title().unwrap_or("")
        );
    }
    Ok(code)
}

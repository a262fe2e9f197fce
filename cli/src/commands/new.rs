//! `jp-store new`: create a conversation.

use super::{open_store, parse_id};
use anyhow::Result;
use clap::Args;
use jpstore_engine::internal::store::CreateReport;
use jpstore_engine::NewConversation;
use std::process::ExitCode;

#[derive(Args, Debug)]
pub struct NewArgs {
    /// The id (default: JP's kind, the UTC time in deciseconds).
    #[arg(long, value_parser = crate::commands::conversation_id)]
    id: Option<String>,
    /// A title.
    #[arg(long)]
    title: Option<String>,
    /// A label KEY=VALUE (repeatable).
    #[arg(long = "label", value_name = "KEY=VALUE", value_parser = parse_label)]
    labels: Vec<(String, String)>,
    /// Print JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

/// A `--label` value: `KEY=VALUE` with a non-empty key (a usage error
/// otherwise, exit status 2).
fn parse_label(s: &str) -> std::result::Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
        _ => Err(format!("a label is KEY=VALUE, got {s:?}")),
    }
}

pub fn new(dir: &super::StoreLocation, args: NewArgs) -> Result<ExitCode> {
    let store = open_store(dir)?;
    let id = args.id.as_deref().map(parse_id).transpose()?;
    let conversation = store.create(NewConversation {
        id,
        title: args.title,
        labels: args.labels,
        ..Default::default()
    })?;
    let id = conversation.id().clone();
    // Published with its head: closing writes nothing more.
    conversation.close();
    if args.json {
        crate::jsonln!("{}", serde_json::to_string(&CreateReport { id })?);
    } else {
        crate::outln!("{id}");
    }
    Ok(ExitCode::SUCCESS)
}

//! `jp-store view`: the view sent to a model, as JSON.

use super::{open_store, parse_id};
use anyhow::{Context, Result};
use clap::ValueEnum;
use jpstore_engine::export::ContentMode;
use std::io::Write;
use std::process::ExitCode;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ViewFormat {
    /// The projected events as a JSON array (jp-store's plain form; tool
    /// response content always a list of blocks).
    Json,
    /// The request body of Anthropic's Messages API.
    Anthropic,
    /// The request body of OpenAI's Chat Completions API.
    Openai,
}

pub fn view(
    dir: &super::StoreLocation,
    id: &str,
    format: ViewFormat,
    refs: bool,
) -> Result<ExitCode> {
    let store = open_store(dir)?;
    let id = parse_id(id)?;
    let view = store.open_view(&id)?;
    super::warn_torn_tail(&id, view.torn_tail());
    let mode = if refs {
        ContentMode::Refs
    } else {
        ContentMode::Inline
    };
    let provider = match format {
        ViewFormat::Json => None,
        ViewFormat::Anthropic => Some(jpstore_integrations::provider::Provider::Anthropic),
        ViewFormat::Openai => Some(jpstore_integrations::provider::Provider::OpenAi),
    };
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    match provider {
        None => {
            let json = view.render(mode)?;
            out.write_all(&json).context("writing to standard output")?;
        }
        Some(_) if refs => {
            return Err(super::usage(
                "--refs applies to --format json only: a provider request holds its content",
            ))
        }
        Some(p) => {
            // As serde_json's pretty printer writes it, written while the
            // view is walked.
            let mut json = Vec::new();
            jpstore_integrations::provider::write_provider_request_view(
                &store, view, p, &mut json,
            )?;
            out.write_all(&json).context("writing to standard output")?;
        }
    }
    out.write_all(b"\n")
        .and_then(|()| out.flush())
        .context("writing to standard output")?;
    Ok(ExitCode::SUCCESS)
}

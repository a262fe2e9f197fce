//! Summaries of a range of raw events, for compactions that replace the
//! range with a summary (RFD 064, the `summary` table of a compaction
//! profile).
//!
//! The summarizer is always given the raw events of the range (never a
//! projected view, so that a summary is never made from an earlier summary).
//! The summary comes from one of three [`SummarySource`]s: a given text, a
//! shell command, or an OpenAI-compatible chat completions endpoint.
//!
//! A profile's `summary` table names the source ([`SummarySource::from_profile`]):
//!
//! ```toml
//! [conversation.compaction.profiles.heavy.summary]
//! policy = "summarize"
//! # Either a shell command: the raw events as a JSON array on stdin, the
//! # summary on stdout.
//! # command = "my-summarizer --max-words 300"
//! # Or an OpenAI-compatible chat completions endpoint (full URL).
//! endpoint = "http://127.0.0.1:8080/v1/chat/completions"
//! model = "qwen2.5-7b-instruct"
//! # Optional: the environment variable holding the API key (sent as
//! # `Authorization: Bearer <key>`).
//! api_key_env = "OPENAI_API_KEY"
//! # Optional: the system prompt (a default one asks to preserve file paths,
//! # decisions, errors and the task state).
//! instructions = "Preserve file paths, key decisions and the current task state."
//! # Optional: seconds to wait for the whole exchange (default 120).
//! timeout_secs = 120
//! ```

use std::error::Error as StdError;
use std::io::{self, Write};
use std::net::IpAddr;
use std::process::{Command, ExitStatus, Stdio};
use std::time::Duration;

use jpstore_engine::compaction::SummaryFailure;
use jpstore_engine::event::Entry;
use jpstore_engine::export::ContentMode;
use jpstore_engine::internal::config::SummaryTable;
use jpstore_engine::internal::export::entry_json;
use jpstore_engine::Store;
use serde_json::Value;

/// The default system prompt of an endpoint source without `instructions`.
pub const DEFAULT_INSTRUCTIONS: &str = "\
You summarize the earlier part of a conversation between a user and an AI \
assistant, including the assistant's reasoning, its tool calls and the tool \
results, so that the conversation can go on from your summary alone: the \
original events will no longer be shown. Write a concise, factual summary \
that preserves:
- the user's goals and requests, and any constraints or preferences stated;
- file paths, names of functions and types, commands, URLs and other \
identifiers, written exactly as they appear;
- the key decisions taken and their rationale;
- the errors met and how they were resolved, or that they are still open;
- the current state of the task and the next steps.
Leave out pleasantries and repetition, and add nothing that is not in the \
events. Answer with the summary only.";

/// The sentence that introduces the events in the user message sent to an
/// endpoint; the events follow as pretty-printed JSON.
const USER_INTRO: &str = "Summarize the following events of the conversation, given as a JSON \
array in the order they happened:";

/// The default of `timeout_secs`.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

/// How much of a command's stderr, or of an HTTP response body, an error
/// carries.
const EXCERPT_BYTES: usize = 2048;

/// The largest response body read from an endpoint.
const MAX_RESPONSE_BYTES: u64 = 16 * 1024 * 1024;

/// Where a summary comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SummarySource {
    /// Given text (`--summary`, `--summary-file`). Trailing whitespace is
    /// trimmed; an empty text is refused.
    Text(String),
    /// `command = "..."`: run with `sh -c`, the raw events of the range as a
    /// JSON array on stdin (one line), the summary on stdout (trimmed of
    /// trailing whitespace). A non-zero exit or an empty output is an error
    /// carrying the exit status and up to 2 KiB of stderr.
    Command {
        /// The shell command.
        command: String,
    },
    /// An OpenAI-compatible chat completions endpoint: the events are sent
    /// in the user message, after a system message with the instructions;
    /// the summary is `choices[0].message.content` of the response.
    Endpoint {
        /// `endpoint`: the full URL, e.g.
        /// `http://127.0.0.1:8080/v1/chat/completions`.
        url: String,
        /// `model`: the model to ask.
        model: String,
        /// `api_key_env`: the name of the environment variable holding the
        /// API key, sent as `Authorization: Bearer <key>`. Read when
        /// summarizing; no key is sent when `None`.
        api_key_env: Option<String>,
        /// `instructions`: the system prompt; [`DEFAULT_INSTRUCTIONS`] when
        /// `None`.
        instructions: Option<String>,
        /// `timeout_secs`: the limit of the whole exchange (connecting,
        /// sending, and receiving the complete response);
        /// [`DEFAULT_TIMEOUT`] when not set.
        timeout: Duration,
    },
}

impl SummarySource {
    /// From a profile's `summary` table, whose value types the config's
    /// parse checked (`jpstore_engine::internal::config::settings`: the strings are
    /// not empty, `timeout_secs` is from 1 to a day).
    ///
    /// `command` makes a [`SummarySource::Command`]; `endpoint` (with
    /// `model`, and optionally `api_key_env`, `instructions`,
    /// `timeout_secs`) a [`SummarySource::Endpoint`]; setting both is an
    /// error. `Ok(None)` when the table names no source that can be run
    /// (e.g. only `policy` and `model`, as in RFD 064's example): the caller
    /// then requires a given summary. Keys other than these (like `policy`)
    /// are not read.
    ///
    /// Errors name the key and what was expected.
    pub fn from_profile(summary: &SummaryTable) -> Result<Option<SummarySource>, SummarizeError> {
        let SummaryTable {
            command,
            endpoint,
            model,
            api_key_env,
            instructions,
            timeout_secs,
        } = summary.clone();
        if let Some(name) = &api_key_env {
            if name.contains('=') || name.contains('\0') {
                return Err(SummarizeError::Config {
                    key: "api_key_env",
                    message: format!(
                        "expected the name of an environment variable (without `=` or NUL), found {name:?}"
                    ),
                });
            }
        }

        match (command, endpoint) {
            (Some(_), Some(_)) => Err(SummarizeError::Config {
                key: "command",
                message:
                    "set together with `endpoint`; expected only one of `command` and `endpoint`"
                        .to_string(),
            }),
            (Some(command), None) => Ok(Some(SummarySource::Command { command })),
            (None, Some(url)) => {
                check_url(&url)?;
                let Some(model) = model else {
                    return Err(SummarizeError::Config {
                        key: "model",
                        message: "missing; expected the name of the model to ask, since `endpoint` is set"
                            .to_string(),
                    });
                };
                Ok(Some(SummarySource::Endpoint {
                    url,
                    model,
                    api_key_env,
                    instructions,
                    timeout: timeout_secs.map_or(DEFAULT_TIMEOUT, Duration::from_secs),
                }))
            }
            (None, None) => Ok(None),
        }
    }
}

/// Produces the summary of `raw_events` (a JSON array of the range's raw
/// events, content inline) from `source`.
///
/// The summary is trimmed of trailing whitespace and never empty. A
/// [`SummarySource::Text`] ignores the events.
pub fn summarize(source: &SummarySource, raw_events: &Value) -> Result<String, SummarizeError> {
    match source {
        SummarySource::Text(text) => {
            let text = text.trim_end();
            if text.trim_start().is_empty() {
                return Err(SummarizeError::EmptyText);
            }
            Ok(text.to_string())
        }
        SummarySource::Command { command } => run_command(command, raw_events),
        SummarySource::Endpoint {
            url,
            model,
            api_key_env,
            instructions,
            timeout,
        } => ask_endpoint(
            url,
            model,
            api_key_env.as_deref(),
            instructions.as_deref().unwrap_or(DEFAULT_INSTRUCTIONS),
            *timeout,
            raw_events,
        ),
    }
}

/// Why a summary could not be made, or a `summary` table not read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SummarizeError {
    /// A profile replaces the range with a summary, but nothing gives its
    /// text: no summary was passed, and its `summary` table names neither
    /// a `command` nor an `endpoint`.
    #[error("profile {profile:?} replaces the range with a summary: give its text with --summary or --summary-file, or name a `command` or `endpoint` in the profile's summary table")]
    NotConfigured {
        /// The profile.
        profile: String,
    },
    /// The events to summarize could not be read from the store.
    #[error(transparent)]
    Store(#[from] jpstore_engine::error::Error),
    /// A key of a profile's `summary` table is missing or has a value that
    /// is not acceptable.
    #[error("compaction profile `summary` table, key `{key}`: {message}")]
    Config {
        /// The key.
        key: &'static str,
        /// What is wrong, and what was expected.
        message: String,
    },
    /// A given summary text is empty (or only whitespace).
    #[error("the given summary is empty; expected the text of the summary")]
    EmptyText,
    /// The summary command could not be started.
    #[error("cannot run the summary command {command:?} with `sh -c`: {source}")]
    Spawn {
        /// The command.
        command: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// The events could not be written to the command's stdin, or its
    /// output not read (other than the command not reading all of its
    /// stdin, which is fine).
    #[error("cannot {op} the summary command {command:?}: {source}")]
    CommandIo {
        /// What was being done ("write the events to", "wait for").
        op: &'static str,
        /// The command.
        command: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// The command exited with a non-zero status or was killed by a signal.
    #[error("the summary command {command:?} failed ({status}); expected exit status 0 with the summary on stdout{}", stderr_suffix(stderr))]
    CommandFailed {
        /// The command.
        command: String,
        /// How it ended.
        status: ExitStatus,
        /// The end of its stderr (at most 2 KiB, lossily decoded, trimmed).
        stderr: String,
    },
    /// The command succeeded but printed nothing but whitespace.
    #[error("the summary command {command:?} printed no summary ({status}); expected the summary on stdout{}", stderr_suffix(stderr))]
    EmptyOutput {
        /// The command.
        command: String,
        /// How it ended.
        status: ExitStatus,
        /// The end of its stderr (at most 2 KiB, lossily decoded, trimmed).
        stderr: String,
    },
    /// The command printed bytes that are not UTF-8.
    #[error("the summary command {command:?} printed output that is not UTF-8; expected the summary as UTF-8 text on stdout")]
    OutputNotUtf8 {
        /// The command.
        command: String,
    },
    /// The environment variable named by `api_key_env` is not usable.
    #[error("environment variable {var} (named by `api_key_env`) {problem}; expected it to hold the API key of the summarization endpoint")]
    MissingApiKey {
        /// The variable's name.
        var: String,
        /// "is not set", "is empty" or "is not valid Unicode".
        problem: &'static str,
    },
    /// The endpoint answered with a status other than 2xx.
    #[error("the summarization endpoint {url} answered HTTP {status}; expected 200 with a chat completion{}", body_suffix(body))]
    HttpStatus {
        /// The endpoint.
        url: String,
        /// The HTTP status.
        status: u16,
        /// The start of the response body (at most 2 KiB, lossily decoded,
        /// trimmed).
        body: String,
    },
    /// The endpoint could not be reached, or the exchange broke off
    /// (connection refused, unknown host, TLS failure, protocol error).
    #[error("cannot get a response from the summarization endpoint {url}: {source}")]
    Connection {
        /// The endpoint.
        url: String,
        /// The underlying error.
        #[source]
        source: Box<dyn StdError + Send + Sync>,
    },
    /// The exchange with the endpoint took longer than `timeout_secs`.
    #[error("no complete response from the summarization endpoint {url} within {} s; expected one within `timeout_secs`", timeout.as_secs_f64())]
    Timeout {
        /// The endpoint.
        url: String,
        /// The limit.
        timeout: Duration,
    },
    /// The endpoint answered 2xx, but not with a chat completion carrying a
    /// summary.
    #[error("the response of the summarization endpoint {url} is not a usable chat completion: {problem}; expected JSON with a non-empty string at `choices[0].message.content`{}", body_suffix(body))]
    BadResponse {
        /// The endpoint.
        url: String,
        /// What is wrong with it.
        problem: String,
        /// The start of the response body (at most 2 KiB, lossily decoded,
        /// trimmed).
        body: String,
    },
}

/// `; its stderr: ...` when `stderr` is not empty.
fn stderr_suffix(stderr: &str) -> String {
    if stderr.is_empty() {
        String::new()
    } else {
        format!("; its stderr ends with: {stderr}")
    }
}

/// `; the body starts with: ...` when `body` is not empty.
fn body_suffix(body: &str) -> String {
    if body.is_empty() {
        String::new()
    } else {
        format!("; the response body starts with: {body}")
    }
}

/// Checks that `url` is an absolute http(s) URL with a host.
fn check_url(url: &str) -> Result<(), SummarizeError> {
    let bad = |why: &str| {
        SummarizeError::Config {
        key: "endpoint",
        message: format!(
            "expected the full http:// or https:// URL of a chat completions endpoint, e.g. \"http://127.0.0.1:8080/v1/chat/completions\", found {url:?} ({why})"
        ),
    }
    };
    let uri: ureq::http::Uri = url
        .parse()
        .map_err(|e: ureq::http::uri::InvalidUri| bad(&e.to_string()))?;
    match uri.scheme_str() {
        Some("http") | Some("https") => {}
        Some(other) => return Err(bad(&format!("scheme {other:?}"))),
        None => return Err(bad("no scheme")),
    }
    match uri.host() {
        Some(host) if !host.is_empty() => Ok(()),
        _ => Err(bad("no host")),
    }
}

/// Whether `url` points at this machine (`localhost`, 127.0.0.0/8, `::1`).
fn is_loopback(url: &str) -> bool {
    let Ok(uri) = url.parse::<ureq::http::Uri>() else {
        return false;
    };
    let Some(host) = uri.host() else {
        return false;
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// At most [`EXCERPT_BYTES`] from the start of `bytes`, lossily decoded and
/// trimmed, with `…` when cut.
fn head_excerpt(bytes: &[u8]) -> String {
    if bytes.len() <= EXCERPT_BYTES {
        return String::from_utf8_lossy(bytes).trim().to_string();
    }
    let text = String::from_utf8_lossy(&bytes[..EXCERPT_BYTES]);
    format!("{}…", text.trim_start())
}

/// At most [`EXCERPT_BYTES`] from the end of `bytes`, lossily decoded and
/// trimmed, with `…` when cut.
fn tail_excerpt(bytes: &[u8]) -> String {
    if bytes.len() <= EXCERPT_BYTES {
        return String::from_utf8_lossy(bytes).trim().to_string();
    }
    let text = String::from_utf8_lossy(&bytes[bytes.len() - EXCERPT_BYTES..]);
    format!("…{}", text.trim_end())
}

/// Runs `command` with `sh -c`, the events on stdin, the summary on stdout.
fn run_command(command: &str, raw_events: &Value) -> Result<String, SummarizeError> {
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(command)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| SummarizeError::Spawn {
            command: command.to_string(),
            source,
        })?;

    // The events are written from a thread while the output is read, so
    // that a command printing a lot before it reads does not deadlock.
    let writer = child.stdin.take().map(|mut stdin| {
        let mut input = raw_events.to_string().into_bytes();
        input.push(b'\n');
        std::thread::spawn(move || stdin.write_all(&input))
    });
    let output = child
        .wait_with_output()
        .map_err(|source| SummarizeError::CommandIo {
            op: "wait for",
            command: command.to_string(),
            source,
        })?;
    let write_result = match writer.map(|handle| handle.join()) {
        None | Some(Ok(Ok(()))) => Ok(()),
        Some(Ok(Err(e))) => Err(e),
        Some(Err(_)) => Err(io::Error::other("the thread writing to stdin panicked")),
    };

    let stderr = tail_excerpt(&output.stderr);
    if !output.status.success() {
        return Err(SummarizeError::CommandFailed {
            command: command.to_string(),
            status: output.status,
            stderr,
        });
    }
    match write_result {
        // A command may well summarize without reading all of its input.
        Err(e) if e.kind() != io::ErrorKind::BrokenPipe => {
            return Err(SummarizeError::CommandIo {
                op: "write the events to",
                command: command.to_string(),
                source: e,
            });
        }
        _ => {}
    }
    let Ok(stdout) = String::from_utf8(output.stdout) else {
        return Err(SummarizeError::OutputNotUtf8 {
            command: command.to_string(),
        });
    };
    let summary = stdout.trim_end();
    if summary.trim_start().is_empty() {
        return Err(SummarizeError::EmptyOutput {
            command: command.to_string(),
            status: output.status,
            stderr,
        });
    }
    Ok(summary.to_string())
}

/// The value of the environment variable `var`, the API key.
fn api_key(var: &str) -> Result<String, SummarizeError> {
    let missing = |problem| SummarizeError::MissingApiKey {
        var: var.to_string(),
        problem,
    };
    match std::env::var(var) {
        Ok(key) if key.trim().is_empty() => Err(missing("is empty")),
        Ok(key) => Ok(key.trim().to_string()),
        Err(std::env::VarError::NotPresent) => Err(missing("is not set")),
        Err(std::env::VarError::NotUnicode(_)) => Err(missing("is not valid Unicode")),
    }
}

/// The JSON body of the chat completions request.
fn request_body(model: &str, instructions: &str, raw_events: &Value) -> String {
    let user = format!("{USER_INTRO}\n\n{raw_events:#}");
    serde_json::json!({
        "model": model,
        "messages": [
            { "role": "system", "content": instructions },
            { "role": "user", "content": user },
        ],
    })
    .to_string()
}

/// Asks a chat completions endpoint for the summary.
fn ask_endpoint(
    url: &str,
    model: &str,
    api_key_env: Option<&str>,
    instructions: &str,
    timeout: Duration,
    raw_events: &Value,
) -> Result<String, SummarizeError> {
    let key = api_key_env.map(api_key).transpose()?;
    let body = request_body(model, instructions, raw_events);

    let mut config = ureq::Agent::config_builder()
        .timeout_global(Some(timeout))
        .http_status_as_error(false);
    if is_loopback(url) {
        // A model served on this machine is never reached through a proxy.
        config = config.proxy(None);
    }
    let agent: ureq::Agent = config.build().into();

    let connection = |e: ureq::Error| match e {
        ureq::Error::Timeout(_) => SummarizeError::Timeout {
            url: url.to_string(),
            timeout,
        },
        other => SummarizeError::Connection {
            url: url.to_string(),
            source: Box::new(other),
        },
    };
    let mut request = agent
        .post(url)
        .header("Content-Type", "application/json")
        .header("Accept", "application/json");
    if let Some(key) = &key {
        request = request.header("Authorization", format!("Bearer {key}"));
    }
    let mut response = request.send(body.as_bytes()).map_err(connection)?;
    let status = response.status().as_u16();
    let bytes = response
        .body_mut()
        .with_config()
        .limit(MAX_RESPONSE_BYTES)
        .read_to_vec()
        .map_err(connection)?;

    if !(200..300).contains(&status) {
        return Err(SummarizeError::HttpStatus {
            url: url.to_string(),
            status,
            body: head_excerpt(&bytes),
        });
    }
    let bad = |problem: String| SummarizeError::BadResponse {
        url: url.to_string(),
        problem,
        body: head_excerpt(&bytes),
    };
    let json: Value = serde_json::from_slice(&bytes).map_err(|e| bad(format!("not JSON ({e})")))?;
    completion_content(&json).map_err(bad)
}

/// `choices[0].message.content` of a chat completion, trimmed of trailing
/// whitespace; what is wrong otherwise.
fn completion_content(json: &Value) -> Result<String, String> {
    let describe = |path: &str, value: Option<&Value>| match value {
        None => format!("`{path}` is missing"),
        Some(value) => format!(
            "`{path}` is {}",
            jpstore_engine::internal::config::json_kind(value)
        ),
    };
    let choices = match json.get("choices") {
        Some(Value::Array(choices)) => choices,
        other => return Err(describe("choices", other)),
    };
    let Some(first) = choices.first() else {
        return Err("`choices` is empty".to_string());
    };
    let message = match first.get("message") {
        Some(message @ Value::Object(_)) => message,
        other => return Err(describe("choices[0].message", other)),
    };
    match message.get("content") {
        Some(Value::String(content)) if content.trim().is_empty() => {
            Err("`choices[0].message.content` is empty".to_string())
        }
        Some(Value::String(content)) => Ok(content.trim_end().to_string()),
        other => Err(describe("choices[0].message.content", other)),
    }
}

/// The summary of `raw` (a compaction's range of raw entries) as a
/// profile's summary table says: its `command` or `endpoint` reads the
/// events as JSON with content inline from `store` (never a view). A table
/// that names neither is [`SummarizeError::NotConfigured`] for `profile`.
pub fn summarize_from_profile(
    store: &Store,
    table: &SummaryTable,
    raw: &[Entry],
    profile: Option<&str>,
) -> Result<String, SummarizeError> {
    let Some(source) = SummarySource::from_profile(table)? else {
        return Err(SummarizeError::NotConfigured {
            profile: profile.unwrap_or("default").to_string(),
        });
    };
    let events = raw
        .iter()
        .map(|e| entry_json(store, e, ContentMode::Inline))
        .collect::<jpstore_engine::error::Result<Vec<_>>>()?;
    summarize(&source, &Value::Array(events))
}

/// The [`Summarizer`](jpstore_engine::compaction::Summarizer) the command line gives the engine's compactions
/// (`Store::compact`, `Store::append_turn`'s automatic compaction,
/// `Store::fork_compacted`): [`summarize_from_profile`] over `store`, its
/// errors kept whole (a [`SummarizeError`] inside
/// [`jpstore_engine::compaction::CompactionError::Summary`]).
pub fn profile_summarizer(
    store: &Store,
) -> impl FnMut(&SummaryTable, &[Entry]) -> Result<String, SummaryFailure> + '_ {
    profile_summarizer_for(store, None)
}

/// [`profile_summarizer`] for a compaction asked with the profile
/// `profile` (`jp-store compact --profile`, `jp-store fork --compact=P`):
/// the profile named by [`SummarizeError::NotConfigured`] (`None`: the
/// default one).
pub fn profile_summarizer_for<'a>(
    store: &'a Store,
    profile: Option<&'a str>,
) -> impl FnMut(&SummaryTable, &[Entry]) -> Result<String, SummaryFailure> + 'a {
    move |table, raw| {
        summarize_from_profile(store, table, raw, profile).map_err(SummaryFailure::from)
    }
}

#[cfg(test)]
mod tests;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use jpstore_engine::internal::config::{BadSetting, Settings};
use serde_json::{json, Value};

use super::*;

// ----- helpers -----

/// Three raw events of a range, as the summarizer gets them.
fn events() -> Value {
    json!([
        { "type": "chat_request", "timestamp": "2025-01-01T00:00:00Z", "content": "Fix the failing build in src/main.rs" },
        { "type": "tool_call_request", "timestamp": "2025-01-01T00:00:01Z", "name": "fs_read_file", "arguments": { "path": "src/main.rs" } },
        { "type": "chat_response", "timestamp": "2025-01-01T00:00:02Z", "message": "The missing semicolon on line 3 is fixed." },
    ])
}

/// The summary table of a profile whose `summary` is `value`, as the
/// config's parse reads it; a bad setting when it holds one.
fn try_table(value: Value) -> Result<SummaryTable, BadSetting> {
    let config = json!({"conversation": {"compaction": {"profiles": {"p": {"summary": value}}}}});
    let Value::Object(config) = config else {
        panic!("a JSON object")
    };
    let settings = Settings::parse(&config)?;
    Ok(settings.conversation.compaction.profiles["p"]
        .summary
        .clone()
        .expect("a summary table"))
}

/// [`try_table`] of a table of good settings.
fn table(value: Value) -> SummaryTable {
    try_table(value.clone()).unwrap_or_else(|e| panic!("{value}: {e}"))
}

fn command(command: &str) -> SummarySource {
    SummarySource::Command {
        command: command.to_string(),
    }
}

fn endpoint(url: String, api_key_env: Option<&str>, timeout: Duration) -> SummarySource {
    SummarySource::Endpoint {
        url,
        model: "test-model".to_string(),
        api_key_env: api_key_env.map(str::to_string),
        instructions: Some("Keep file paths.".to_string()),
        timeout,
    }
}

/// One HTTP request as the test server received it.
#[derive(Debug)]
struct Received {
    method: String,
    path: String,
    /// Header names in lower case.
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Received {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("the request body is JSON")
    }
}

/// Reads one HTTP/1.1 request (headers and a Content-Length body).
fn read_request(stream: &TcpStream) -> Received {
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line).expect("read the request line");
    let mut parts = line.split_whitespace();
    let method = parts.next().expect("a method").to_string();
    let path = parts.next().expect("a path").to_string();
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).expect("read a header line");
        let line = line.trim_end_matches(['\r', '\n']);
        if line.is_empty() {
            break;
        }
        let (name, value) = line.split_once(':').expect("a header has a colon");
        headers.push((name.trim().to_ascii_lowercase(), value.trim().to_string()));
    }
    let length: usize = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .map(|(_, v)| v.parse().expect("a numeric Content-Length"))
        .unwrap_or(0);
    let mut body = vec![0; length];
    reader.read_exact(&mut body).expect("read the request body");
    Received {
        method,
        path,
        headers,
        body,
    }
}

/// Serves one connection on an ephemeral port of 127.0.0.1: reads one
/// request, answers `status` with `body`, and returns the request.
fn serve_once(status: u16, body: String) -> (String, JoinHandle<Received>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    let port = listener.local_addr().expect("local address").port();
    let handle = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().expect("accept a connection");
        // Only a guard against hanging forever if the client misbehaves.
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .expect("set a read timeout");
        let received = read_request(&stream);
        let response = format!(
            "HTTP/1.1 {status} Whatever\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        stream
            .write_all(response.as_bytes())
            .expect("write the response");
        stream.flush().expect("flush the response");
        received
    });
    (format!("http://127.0.0.1:{port}"), handle)
}

fn completion(content: &str) -> String {
    json!({
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "test-model",
        "choices": [{
            "index": 0,
            "message": { "role": "assistant", "content": content },
            "finish_reason": "stop",
        }],
        "usage": { "prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15 },
    })
    .to_string()
}

// ----- text -----

#[test]
fn text_is_trimmed_of_trailing_whitespace() {
    let source = SummarySource::Text("  The build is fixed.\n\n".to_string());
    let summary = summarize(&source, &events()).expect("summary");
    assert_eq!(summary, "  The build is fixed.");
}

#[test]
fn empty_text_is_refused() {
    let source = SummarySource::Text(" \n\t".to_string());
    let err = summarize(&source, &events()).expect_err("empty text");
    assert!(matches!(err, SummarizeError::EmptyText), "{err:?}");
    assert!(err.to_string().contains("empty"), "{err}");
}

// ----- command -----

#[test]
fn command_reads_the_events_on_stdin() {
    let source = command(
        r#"n=$(grep -o '"type"' | wc -l | tr -d ' '); printf 'Summary of %s events.\n\n' "$n""#,
    );
    let summary = summarize(&source, &events()).expect("summary");
    assert_eq!(summary, "Summary of 3 events.");
}

#[test]
fn command_gets_the_events_as_one_json_array() {
    let summary = summarize(&command("cat"), &events()).expect("summary");
    let echoed: Value = serde_json::from_str(&summary).expect("stdin was JSON");
    assert_eq!(echoed, events());
    assert!(!summary.contains('\n'), "one line: {summary}");
}

#[test]
fn command_that_does_not_read_its_input_is_fine() {
    let big: Vec<Value> = (0..2000)
        .map(|i| json!({ "type": "chat_request", "content": format!("{i} {}", "x".repeat(500)) }))
        .collect();
    let summary = summarize(&command("echo short"), &Value::Array(big)).expect("summary");
    assert_eq!(summary, "short");
}

#[test]
fn failing_command_reports_status_and_stderr() {
    let source = command("cat >/dev/null; echo 'model overloaded' >&2; exit 3");
    let err = summarize(&source, &events()).expect_err("failure");
    match &err {
        SummarizeError::CommandFailed {
            command,
            status,
            stderr,
        } => {
            assert!(command.contains("exit 3"));
            assert_eq!(status.code(), Some(3));
            assert_eq!(stderr, "model overloaded");
        }
        other => panic!("expected CommandFailed, got {other:?}"),
    }
    let message = err.to_string();
    assert!(message.contains("exit status: 3"), "{message}");
    assert!(message.contains("model overloaded"), "{message}");
    assert!(message.contains("expected exit status 0"), "{message}");
}

#[test]
fn failing_command_keeps_at_most_2_kib_of_stderr() {
    let source = command("head -c 10000 /dev/zero | tr '\\0' x >&2; echo the-end >&2; exit 1");
    let err = summarize(&source, &events()).expect_err("failure");
    let SummarizeError::CommandFailed { stderr, .. } = &err else {
        panic!("expected CommandFailed, got {err:?}");
    };
    assert!(stderr.len() <= 2048 + '…'.len_utf8(), "{}", stderr.len());
    assert!(stderr.starts_with('…'), "marked as cut");
    assert!(stderr.ends_with("the-end"), "the end is kept");
}

#[test]
fn empty_output_is_refused() {
    let source = command("cat >/dev/null; printf ' \\n\\n'; echo 'nothing to say' >&2");
    let err = summarize(&source, &events()).expect_err("empty");
    match &err {
        SummarizeError::EmptyOutput { status, stderr, .. } => {
            assert!(status.success());
            assert_eq!(stderr, "nothing to say");
        }
        other => panic!("expected EmptyOutput, got {other:?}"),
    }
    let message = err.to_string();
    assert!(message.contains("printed no summary"), "{message}");
    assert!(message.contains("nothing to say"), "{message}");
}

#[test]
fn output_that_is_not_utf8_is_refused() {
    let err = summarize(&command("printf '\\377\\376'"), &events()).expect_err("not UTF-8");
    assert!(
        matches!(err, SummarizeError::OutputNotUtf8 { .. }),
        "{err:?}"
    );
}

#[test]
fn command_killed_by_a_signal_is_a_failure() {
    let err = summarize(&command("kill -9 $$"), &events()).expect_err("killed");
    match &err {
        SummarizeError::CommandFailed { status, .. } => assert_eq!(status.code(), None),
        other => panic!("expected CommandFailed, got {other:?}"),
    }
}

// ----- endpoint -----

#[test]
fn endpoint_gets_a_chat_completion_request() {
    let var = "JPSTORE_SUMMARIZER_TEST_KEY_8F3A1C";
    std::env::set_var(var, "sk-test-123");
    let (base, server) = serve_once(200, completion("Fixed src/main.rs.\n"));
    let source = endpoint(
        format!("{base}/v1/chat/completions"),
        Some(var),
        DEFAULT_TIMEOUT,
    );
    let summary = summarize(&source, &events()).expect("summary");
    assert_eq!(summary, "Fixed src/main.rs.");

    let request = server.join().expect("the server thread");
    assert_eq!(request.method, "POST");
    assert_eq!(request.path, "/v1/chat/completions");
    assert_eq!(request.header("authorization"), Some("Bearer sk-test-123"));
    assert!(
        request
            .header("content-type")
            .is_some_and(|v| v.starts_with("application/json")),
        "{:?}",
        request.headers
    );
    let body = request.json();
    assert_eq!(body["model"], "test-model");
    let messages = body["messages"].as_array().expect("messages");
    assert_eq!(messages.len(), 2);
    assert_eq!(messages[0]["role"], "system");
    assert_eq!(messages[0]["content"], "Keep file paths.");
    assert_eq!(messages[1]["role"], "user");
    let user = messages[1]["content"].as_str().expect("user content");
    assert!(user.starts_with(USER_INTRO), "{user}");
    let json_start = user.find('[').expect("the events follow the sentence");
    let sent: Value = serde_json::from_str(&user[json_start..]).expect("the events as JSON");
    assert_eq!(sent, events());
    assert!(user.contains("Fix the failing build in src/main.rs"));
    assert!(user.contains("\n  {"), "pretty-printed: {user}");
}

#[test]
fn endpoint_without_api_key_env_sends_no_authorization_and_default_instructions() {
    let (base, server) = serve_once(200, completion("Summary."));
    let source = SummarySource::Endpoint {
        url: format!("{base}/v1/chat/completions"),
        model: "m".to_string(),
        api_key_env: None,
        instructions: None,
        timeout: DEFAULT_TIMEOUT,
    };
    assert_eq!(summarize(&source, &events()).expect("summary"), "Summary.");
    let request = server.join().expect("the server thread");
    assert_eq!(request.header("authorization"), None);
    let body = request.json();
    assert_eq!(body["model"], "m");
    assert_eq!(body["messages"][0]["content"], DEFAULT_INSTRUCTIONS);
    for needle in [
        "file paths",
        "decisions",
        "rationale",
        "errors",
        "next steps",
    ] {
        assert!(DEFAULT_INSTRUCTIONS.contains(needle), "{needle}");
    }
}

#[test]
fn endpoint_http_error_carries_status_and_body() {
    let (base, server) = serve_once(
        500,
        r#"{"error":{"message":"the model crashed"}}"#.to_string(),
    );
    let source = endpoint(format!("{base}/v1/chat/completions"), None, DEFAULT_TIMEOUT);
    let err = summarize(&source, &events()).expect_err("HTTP 500");
    server.join().expect("the server thread");
    match &err {
        SummarizeError::HttpStatus { url, status, body } => {
            assert!(url.starts_with(&base));
            assert_eq!(*status, 500);
            assert!(body.contains("the model crashed"), "{body}");
        }
        other => panic!("expected HttpStatus, got {other:?}"),
    }
    let message = err.to_string();
    assert!(message.contains("HTTP 500"), "{message}");
    assert!(message.contains("the model crashed"), "{message}");
}

#[test]
fn endpoint_http_error_body_is_cut_to_2_kib() {
    let (base, server) = serve_once(503, "y".repeat(10_000));
    let source = endpoint(format!("{base}/chat"), None, DEFAULT_TIMEOUT);
    let err = summarize(&source, &events()).expect_err("HTTP 503");
    server.join().expect("the server thread");
    let SummarizeError::HttpStatus { body, .. } = &err else {
        panic!("expected HttpStatus, got {err:?}");
    };
    assert!(body.len() <= 2048 + '…'.len_utf8(), "{}", body.len());
    assert!(body.ends_with('…'));
}

#[test]
fn endpoint_malformed_responses_are_refused() {
    let cases = [
        ("not json at all".to_string(), "not JSON"),
        (
            json!({ "object": "error" }).to_string(),
            "`choices` is missing",
        ),
        (json!({ "choices": [] }).to_string(), "`choices` is empty"),
        (
            json!({ "choices": [{ "text": "legacy" }] }).to_string(),
            "`choices[0].message` is missing",
        ),
        (
            json!({ "choices": [{ "message": { "role": "assistant" } }] }).to_string(),
            "`choices[0].message.content` is missing",
        ),
        (
            json!({ "choices": [{ "message": { "content": null } }] }).to_string(),
            "`choices[0].message.content` is null",
        ),
        (completion("   "), "`choices[0].message.content` is empty"),
    ];
    for (body, problem) in cases {
        let (base, server) = serve_once(200, body.clone());
        let source = endpoint(format!("{base}/v1/chat/completions"), None, DEFAULT_TIMEOUT);
        let err = summarize(&source, &events()).expect_err("malformed");
        server.join().expect("the server thread");
        match &err {
            SummarizeError::BadResponse { problem: p, .. } => {
                assert!(p.contains(problem), "{p:?} for {body}");
            }
            other => panic!("expected BadResponse for {body}, got {other:?}"),
        }
        let message = err.to_string();
        assert!(
            message
                .contains("expected JSON with a non-empty string at `choices[0].message.content`"),
            "{message}"
        );
    }
}

#[test]
fn endpoint_missing_api_key_variable_is_an_error() {
    // Never set by anything.
    let var = "JPSTORE_SUMMARIZER_TEST_UNSET_KEY_5D20E7";
    // The endpoint is never contacted: nothing listens there.
    let source = endpoint(
        "http://127.0.0.1:9/v1/chat/completions".to_string(),
        Some(var),
        DEFAULT_TIMEOUT,
    );
    let err = summarize(&source, &events()).expect_err("no key");
    match &err {
        SummarizeError::MissingApiKey { var: v, problem } => {
            assert_eq!(v, var);
            assert_eq!(*problem, "is not set");
        }
        other => panic!("expected MissingApiKey, got {other:?}"),
    }
    let message = err.to_string();
    assert!(message.contains(var), "{message}");
    assert!(message.contains("api_key_env"), "{message}");
}

#[test]
fn endpoint_connection_refused_is_a_connection_error() {
    let port = {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        listener.local_addr().expect("local address").port()
    };
    let url = format!("http://127.0.0.1:{port}/v1/chat/completions");
    let source = endpoint(url.clone(), None, DEFAULT_TIMEOUT);
    let err = summarize(&source, &events()).expect_err("refused");
    assert!(
        matches!(&err, SummarizeError::Connection { url: u, .. } if *u == url),
        "{err:?}"
    );
    assert!(err.to_string().contains(&url), "{err}");
}

#[test]
fn endpoint_https_goes_through_tls() {
    // A plain-text server behind an https:// URL: the TLS handshake fails
    // cleanly (the TLS stack is built in and has its crypto provider).
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    let port = listener.local_addr().expect("local address").port();
    let server = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().expect("accept a connection");
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .expect("set a read timeout");
        let mut buf = [0u8; 512];
        let _ = stream.read(&mut buf);
        let _ = stream.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
    });
    let source = endpoint(
        format!("https://127.0.0.1:{port}/v1/chat/completions"),
        None,
        DEFAULT_TIMEOUT,
    );
    let err = summarize(&source, &events()).expect_err("not TLS");
    server.join().expect("the server thread");
    assert!(matches!(err, SummarizeError::Connection { .. }), "{err:?}");
}

#[test]
fn endpoint_timeout_is_reported_as_such() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    let port = listener.local_addr().expect("local address").port();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let server = std::thread::spawn(move || {
        let (stream, _) = listener.accept().expect("accept a connection");
        read_request(&stream);
        // Never answer; hold the connection until the client gave up.
        let _ = done_rx.recv();
        drop(stream);
    });
    let source = endpoint(
        format!("http://127.0.0.1:{port}/v1/chat/completions"),
        None,
        Duration::from_secs(1),
    );
    let err = summarize(&source, &events()).expect_err("timeout");
    done_tx.send(()).expect("tell the server to stop");
    server.join().expect("the server thread");
    match &err {
        SummarizeError::Timeout { timeout, .. } => assert_eq!(*timeout, Duration::from_secs(1)),
        other => panic!("expected Timeout, got {other:?}"),
    }
    assert!(err.to_string().contains("timeout_secs"), "{err}");
}

// ----- from_profile -----

#[test]
fn profile_with_every_endpoint_key() {
    let table = table(json!({
        "policy": "summarize",
        "endpoint": "https://api.example.invalid/v1/chat/completions",
        "model": "gpt-test",
        "api_key_env": "OPENAI_API_KEY",
        "instructions": "Be brief.",
        "timeout_secs": 30,
    }));
    let source = SummarySource::from_profile(&table).expect("valid");
    assert_eq!(
        source,
        Some(SummarySource::Endpoint {
            url: "https://api.example.invalid/v1/chat/completions".to_string(),
            model: "gpt-test".to_string(),
            api_key_env: Some("OPENAI_API_KEY".to_string()),
            instructions: Some("Be brief.".to_string()),
            timeout: Duration::from_secs(30),
        })
    );
}

#[test]
fn profile_endpoint_defaults() {
    let table = table(json!({
        "endpoint": "http://127.0.0.1:8080/v1/chat/completions",
        "model": "local",
        "api_key_env": null,
    }));
    let source = SummarySource::from_profile(&table).expect("valid");
    assert_eq!(
        source,
        Some(SummarySource::Endpoint {
            url: "http://127.0.0.1:8080/v1/chat/completions".to_string(),
            model: "local".to_string(),
            api_key_env: None,
            instructions: None,
            timeout: Duration::from_secs(120),
        })
    );
}

#[test]
fn profile_with_a_command() {
    let table = table(json!({
        "policy": "summarize",
        "command": "my-summarizer --words 200",
        "model": "ignored-by-commands",
        "frobnicate": [1, 2, 3],
    }));
    let source = SummarySource::from_profile(&table).expect("valid");
    assert_eq!(source, Some(command("my-summarizer --words 200")));
}

#[test]
fn profile_without_a_runnable_source_is_none() {
    for table in [
        json!({}),
        json!({ "policy": "summarize", "model": "anthropic/claude-haiku" }),
        json!({ "policy": "summarize", "instructions": "Keep paths.", "unknown": { "x": 1 } }),
        json!({ "command": null, "endpoint": null }),
    ] {
        let source = SummarySource::from_profile(&self::table(table.clone())).expect("valid");
        assert_eq!(source, None, "{table}");
    }
}

#[test]
fn profile_of_the_rfd_example_is_none() {
    let toml = r#"
[conversation.compaction.profiles.heavy.summary]
policy = "summarize"
model = "anthropic/claude-haiku"
"#;
    let config =
        jpstore_engine::internal::config::parse_workspace_toml(toml, Path::new("config.toml"))
            .expect("valid TOML");
    let settings = Settings::parse(&config).expect("good settings");
    let summary = settings.conversation.compaction.profiles["heavy"]
        .summary
        .as_ref()
        .expect("the summary table");
    assert_eq!(SummarySource::from_profile(summary).expect("valid"), None);
}

#[test]
fn profile_from_toml_with_an_endpoint() {
    let toml = r#"
[conversation.compaction.profiles.heavy.summary]
policy = "summarize"
endpoint = "http://127.0.0.1:8080/v1/chat/completions"
model = "qwen"
timeout_secs = 600
"#;
    let config =
        jpstore_engine::internal::config::parse_workspace_toml(toml, Path::new("config.toml"))
            .expect("valid TOML");
    let settings = Settings::parse(&config).expect("good settings");
    let summary = settings.conversation.compaction.profiles["heavy"]
        .summary
        .as_ref()
        .expect("the summary table");
    let source = SummarySource::from_profile(summary).expect("valid");
    assert!(
        matches!(&source, Some(SummarySource::Endpoint { model, timeout, .. })
            if model == "qwen" && *timeout == Duration::from_secs(600)),
        "{source:?}"
    );
}

/// Asserts that `table` is refused with an error about `key` whose message
/// contains `expected`.
fn assert_refused(table: Value, key: &str, expected: &str) {
    let err = SummarySource::from_profile(&self::table(table.clone()))
        .expect_err(&format!("refused: {table}"));
    match &err {
        SummarizeError::Config { key: k, .. } => assert_eq!(*k, key, "{table}"),
        other => panic!("expected Config for {table}, got {other:?}"),
    }
    let message = err.to_string();
    assert!(message.contains(&format!("`{key}`")), "{message}");
    assert!(message.contains(expected), "{message}");
}

/// Asserts that the config's parse refuses `table` as a summary table,
/// naming its `key` and saying `message`.
fn assert_bad_setting(table: Value, key: &str, message: &str) {
    let bad = try_table(table.clone()).expect_err(&format!("refused: {table}"));
    assert_eq!(
        bad.key(),
        format!("conversation.compaction.profiles.p.summary.{key}"),
        "{table}"
    );
    let text = bad.to_string();
    assert!(text.contains(message), "{text}");
}

/// Values of the wrong type never reach the summarizer: the config's parse
/// refuses them (where the config is, naming the key), even those of keys
/// the source does not use.
#[test]
fn profile_wrong_types_are_refused_by_the_config() {
    let url = "http://127.0.0.1:8080/v1/chat/completions";
    let string = "must be a non-empty string, found";
    assert_bad_setting(json!({ "command": 3 }), "command", string);
    assert_bad_setting(json!({ "command": "" }), "command", string);
    assert_bad_setting(json!({ "command": "  " }), "command", string);
    assert_bad_setting(
        json!({ "command": ["sh", "x"] }),
        "command",
        "found an array",
    );
    assert_bad_setting(
        json!({ "endpoint": true, "model": "m" }),
        "endpoint",
        "found a boolean",
    );
    assert_bad_setting(
        json!({ "endpoint": url, "model": 4 }),
        "model",
        "found a number",
    );
    assert_bad_setting(
        json!({ "model": { "name": "m" } }),
        "model",
        "found an object",
    );
    assert_bad_setting(
        json!({ "endpoint": url, "model": "m", "api_key_env": 1 }),
        "api_key_env",
        string,
    );
    assert_bad_setting(
        json!({ "endpoint": url, "model": "m", "instructions": {} }),
        "instructions",
        string,
    );
    for bad in [json!("10"), json!(0), json!(-5), json!(1.5), json!(86_401)] {
        assert_bad_setting(
            json!({ "endpoint": url, "model": "m", "timeout_secs": bad }),
            "timeout_secs",
            "must be a whole number of seconds from 1 to 86400",
        );
    }
    assert_bad_setting(
        json!({ "command": "cat", "timeout_secs": "soon" }),
        "timeout_secs",
        "found a string (\"soon\")",
    );
}

#[test]
fn profile_inconsistent_keys_are_refused() {
    let url = "http://127.0.0.1:8080/v1/chat/completions";
    assert_refused(
        json!({ "endpoint": url, "model": "m", "api_key_env": "A=B" }),
        "api_key_env",
        "name of an environment variable",
    );
    assert_refused(
        json!({ "endpoint": url }),
        "model",
        "expected the name of the model",
    );
    assert_refused(
        json!({ "endpoint": url, "model": "m", "command": "cat" }),
        "command",
        "only one of `command` and `endpoint`",
    );
    for bad in [
        "127.0.0.1:8080/v1/chat/completions",
        "ftp://example.invalid/v1",
        "/v1/chat/completions",
        "http://",
        "not a url",
    ] {
        assert_refused(
            json!({ "endpoint": bad, "model": "m" }),
            "endpoint",
            "expected the full http:// or https:// URL",
        );
    }
}

#[test]
fn a_summary_error_reaches_the_compaction_error_whole() {
    use jpstore_engine::compaction::{CompactionError, SummaryFailure};
    let failure: SummaryFailure = SummarizeError::EmptyText.into();
    let err = CompactionError::Summary(failure);
    assert_eq!(err.to_string(), SummarizeError::EmptyText.to_string());
    let CompactionError::Summary(inner) = &err else {
        panic!("not a summary failure: {err:?}");
    };
    assert!(matches!(
        inner.downcast_ref::<SummarizeError>(),
        Some(SummarizeError::EmptyText)
    ));
}

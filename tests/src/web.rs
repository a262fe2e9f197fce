//! Helpers of the tests of `jp-store serve`: a store holding every kind of
//! content, with fixed timestamps (so pages and screenshots are the same on
//! every run); the server as a child process on a free loopback port; a
//! raw HTTP/1.1 client (so a test sends exactly the bytes it means, `..`
//! and odd methods included); and headless Chromium.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use jpstore_blobstore::BlobId;
use jpstore_engine::conversation::ConversationId;
use jpstore_engine::timestamp::Timestamp;
use jpstore_engine::NewConversation;
use jpstore_engine::{Store, StoreOptions};
use serde_json::{json, Value};

use jpstore_engine::internal::event::input::parse_input;
use jpstore_engine::internal::event::json::ParseMode;

use crate::{jp_store_bin, run_jp_store};

/// A title written to break out of every place it lands.
pub const HOSTILE_TITLE: &str =
    r#"<script>document.title='pwned'</script>"><img src=x onerror="document.title='img'">"#;
/// Text of the same kind, for messages, arguments and content.
pub const HOSTILE_TEXT: &str =
    r#"</pre></div><script>alert('text')</script><img src=x onerror=alert(1)>'"&amp;"#;

/// The conversation with every kind of event.
pub const MAIN_ID: &str = "17513604000";
/// The conversation of hostile strings.
pub const HOSTILE_ID: &str = "17513604001";
/// A conversation with no title and no events.
pub const EMPTY_ID: &str = "17513604002";
/// How many small conversations fill the list beyond those three.
pub const FILLER: usize = 55;
/// Turns of the main conversation.
pub const MAIN_TURNS: u64 = 14;

/// The file attached in turn 0 and read again by a tool in turn 1
/// (deduplicated in the view: same URI, same content).
pub fn attached_file() -> String {
    let mut s = String::from("//! The log: append-only records with checksums.\n\n");
    for i in 0..60 {
        s.push_str(&format!(
            "pub fn step_{i}(log: &mut Log) -> io::Result<()> {{ log.append(&[{i}]) }}\n"
        ));
    }
    s
}

/// Text of `len` bytes shaped like test output.
pub fn test_output(len: usize) -> String {
    let mut s = String::with_capacity(len + 64);
    let mut i = 0;
    while s.len() < len {
        s.push_str(&format!(
            "test log::tests::reopen_after_torn_tail ... run {i:>6}: {}\n",
            if i % 20 == 7 { "FAILED" } else { "ok" }
        ));
        i += 1;
    }
    s.truncate(len);
    s
}

/// Bytes of the blob served streamed (above the server's in-memory size).
pub const BIG_OUTPUT_LEN: usize = 5 << 20;
/// A 1x1 PNG, base64.
pub const PNG_BASE64: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";
/// An HTML document a tool returned.
pub const HTML_CONTENT: &str =
    "<!DOCTYPE html><html><body><script>document.title='ran'</script><p>report</p></body></html>\n";
/// An SVG a tool returned, with a script in it.
pub const SVG_CONTENT: &str = r#"<svg xmlns="http://www.w3.org/2000/svg" onload="alert(1)"><script>alert(2)</script><rect width="10" height="10"/></svg>"#;

/// The store the serve tests read.
pub struct Fixture {
    /// Holds the store.
    pub dir: tempfile::TempDir,
    /// The store directory.
    pub store: PathBuf,
}

impl Fixture {
    /// The id of `content` as a blob.
    pub fn blob_id(content: &[u8]) -> BlobId {
        BlobId::of(content)
    }
}

fn at(minutes: u64, seconds: u64) -> String {
    format!(
        "2025-07-01T{:02}:{:02}:{:02}Z",
        9 + minutes / 60,
        minutes % 60,
        seconds
    )
}

/// Creates conversation `id` and appends `events` (JSON entries, parsed
/// as `jp-store append` parses them) as one batch.
fn conversation(
    store: &Store,
    id: &str,
    title: Option<&str>,
    labels: &[(&str, &str)],
    when: &str,
    events: &[Value],
) {
    let mut writer = store
        .create(NewConversation {
            id: Some(ConversationId::parse(id).expect("fixture id")),
            title: title.map(str::to_owned),
            labels: labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            created: Some(Timestamp::parse(when).expect("fixture time")),
            ..Default::default()
        })
        .unwrap_or_else(|e| panic!("creating {id}: {e}"));
    if events.is_empty() {
        return;
    }
    let lines: String = events.iter().map(|e| format!("{e}\n")).collect();
    let parsed = parse_input(
        &lines,
        ParseMode::Strict {
            now: Timestamp::parse(when).expect("fixture time"),
        },
    )
    .unwrap_or_else(|e| panic!("the events of {id}: {e}"));
    writer
        .append(parsed.entries)
        .unwrap_or_else(|e| panic!("appending to {id}: {e}"));
    writer.close();
}

/// Builds the fixture store: the main conversation (attachments, reasoning,
/// tool calls with small, large and streamed results, a deduplicated
/// resource, an image, an interrupted call, a config change, a compaction
/// of turn 0 and a summary of turns 3-4), the hostile one, an empty one,
/// and [`FILLER`] small ones.
pub fn fixture() -> Fixture {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("store");
    run_jp_store(&root, &["init"], b"").ok("init");
    let store = Store::open_dir(&root, StoreOptions::default()).expect("open the fixture store");
    conversation(
        &store,
        MAIN_ID,
        Some("Fix the flaky reopen test"),
        &[("project", "jp-store")],
        &at(0, 0),
        &main_events(),
    );
    conversation(
        &store,
        HOSTILE_ID,
        Some(HOSTILE_TITLE),
        &[("<b>label</b>", HOSTILE_TEXT)],
        &at(0, 1),
        &hostile_events(),
    );
    conversation(&store, EMPTY_ID, None, &[], &at(0, 2), &[]);
    for i in 0..FILLER {
        let t = 1 + i as u64;
        conversation(
            &store,
            &format!("1751360500{i:02}"),
            Some(&format!("Task {i:02}: tidy module {}", i * 7 % 13)),
            &[],
            &at(t, 0),
            &[
                json!({"type": "turn_start", "timestamp": at(t, 1)}),
                json!({"type": "chat_request", "content": format!("Tidy module {i}."), "timestamp": at(t, 2)}),
                json!({"type": "chat_response", "message": "Done.", "timestamp": at(t, 3 + i as u64 % 50)}),
            ],
        );
    }
    Fixture { dir, store: root }
}

fn main_events() -> Vec<Value> {
    let file = attached_file();
    let mut e = vec![
        // Turn 0.
        json!({"type": "turn_start", "timestamp": at(0, 10)}),
        json!({"type": "chat_request", "timestamp": at(0, 10),
            "content": "The test `log::tests::reopen_after_torn_tail` fails about one run in twenty. Can you find out why?",
            "resources": [{"uri": "file:///work/src/log.rs", "name": "src/log.rs", "mimeType": "text/x-rust", "text": file}]}),
        json!({"type": "chat_response", "timestamp": at(0, 12),
            "reasoning": "It fails one run in twenty: a race. The test reopens the log while a thread appends; I should read the test first."}),
        json!({"type": "tool_call_request", "timestamp": at(0, 13), "id": "call_1", "name": "fs_read_file",
            "arguments": {"path": "src/log/tests.rs"}}),
        json!({"type": "tool_call_response", "timestamp": at(0, 14), "id": "call_1",
            "content": "#[test]\nfn reopen_after_torn_tail() {\n    let log = Log::create(dir.path());\n    std::thread::spawn(move || log.append(b\"b\"));\n    let reopened = Log::open(dir.path());\n    assert_eq!(reopened.len(), 1);\n}\n"}),
        json!({"type": "chat_response", "timestamp": at(0, 20),
            "message": "The test reopens the log while a spawned thread may still be appending, so the length it sees is 1 or 2. Join the thread before reopening."}),
        // Turn 1: the file read again (deduplicated), a large output.
        json!({"type": "turn_start", "timestamp": at(5, 0)}),
        json!({"type": "chat_request", "timestamp": at(5, 0), "content": "Read the file again and run the test fifty times."}),
        json!({"type": "tool_call_request", "timestamp": at(5, 1), "id": "call_2", "name": "fs_read_file",
            "arguments": {"path": "src/log.rs"}}),
        json!({"type": "tool_call_response", "timestamp": at(5, 2), "id": "call_2",
            "content": [{"type": "resource", "resource": {"uri": "file:///work/src/log.rs", "name": "src/log.rs", "mimeType": "text/x-rust", "text": file}}]}),
        json!({"type": "tool_call_request", "timestamp": at(5, 3), "id": "call_3", "name": "cargo_test",
            "arguments": {"filter": "reopen_after_torn_tail", "runs": 50}}),
        json!({"type": "tool_call_response", "timestamp": at(5, 30), "id": "call_3", "content": test_output(120 << 10)}),
        json!({"type": "chat_response", "timestamp": at(5, 31), "message": "Two of fifty runs failed, as the race predicts."}),
        // Turn 2: an image, and a call that never got its result.
        json!({"type": "turn_start", "timestamp": at(10, 0)}),
        json!({"type": "chat_request", "timestamp": at(10, 0), "content": "Here is the CI run's screenshot. Run CI again.",
            "resources": [{"uri": "file:///work/ci.png", "name": "ci.png", "mimeType": "image/png", "blob": PNG_BASE64}]}),
        json!({"type": "tool_call_request", "timestamp": at(10, 1), "id": "call_4", "name": "run_ci", "arguments": {}}),
        // Turn 3 and 4: summarized below.
        json!({"type": "turn_start", "timestamp": at(20, 0)}),
        json!({"type": "chat_request", "timestamp": at(20, 0), "content": "CI was cancelled. Try the fix instead."}),
        json!({"type": "chat_response", "timestamp": at(20, 5), "message": "I joined the thread before reopening; fifty runs pass."}),
        json!({"type": "turn_start", "timestamp": at(21, 0)}),
        json!({"type": "chat_request", "timestamp": at(21, 0), "content": "Good. Commit it."}),
        json!({"type": "chat_response", "timestamp": at(21, 5), "message": "Committed as `log: join the appender before reopening`."}),
        // Turn 5: a result large enough to be streamed; HTML and SVG.
        json!({"type": "turn_start", "timestamp": at(30, 0)}),
        json!({"type": "chat_request", "timestamp": at(30, 0), "content": "Run the whole suite and render the coverage report."}),
        json!({"type": "tool_call_request", "timestamp": at(30, 1), "id": "call_5", "name": "cargo_test", "arguments": {"runs": 1}}),
        json!({"type": "tool_call_response", "timestamp": at(30, 40), "id": "call_5", "content": test_output(BIG_OUTPUT_LEN)}),
        json!({"type": "tool_call_request", "timestamp": at(30, 41), "id": "call_6", "name": "coverage", "arguments": {"format": "html"}}),
        json!({"type": "tool_call_response", "timestamp": at(30, 50), "id": "call_6",
        "content": [
            {"type": "resource", "resource": {"uri": "file:///work/target/coverage/index.html", "mimeType": "text/html", "text": HTML_CONTENT}},
            {"type": "resource", "resource": {"uri": "file:///work/target/coverage/badge.svg", "mimeType": "image/svg+xml", "text": SVG_CONTENT}}
        ]}),
        json!({"type": "chat_response", "timestamp": at(30, 51), "message": "All tests pass; coverage is 87%."}),
        json!({"type": "config_delta", "timestamp": at(31, 0), "delta": {"conversation": {"deduplication": {"lookback_turns": 40}}}}),
    ];
    for turn in 6..MAIN_TURNS {
        let m = 30 + turn * 2;
        e.push(json!({"type": "turn_start", "timestamp": at(m, 0)}));
        e.push(json!({"type": "chat_request", "timestamp": at(m, 0),
            "content": format!("Step {turn}: look at module {turn}.")}));
        e.push(json!({"type": "tool_call_request", "timestamp": at(m, 1), "id": format!("call_{turn}0"),
            "name": "fs_read_file", "arguments": {"path": format!("src/module_{turn}.rs")}}));
        e.push(json!({"type": "tool_call_response", "timestamp": at(m, 2), "id": format!("call_{turn}0"),
            "content": format!("pub fn module_{turn}() {{}}\n")}));
        e.push(json!({"type": "chat_response", "timestamp": at(m, 3),
            "message": format!("Module {turn} is fine.")}));
    }
    e.push(json!({"type": "compaction", "timestamp": at(59, 0), "from_turn": 0, "to_turn": 0,
        "reasoning": "strip", "tool_calls": {"policy": "strip", "request": false, "response": true}, "source": "manual"}));
    e.push(json!({"type": "compaction", "timestamp": at(59, 1), "from_turn": 3, "to_turn": 4,
        "summary": {"summary": "The user asked for the fix instead of CI; the thread is now joined before reopening, fifty runs pass, and the fix is committed."},
        "source": "manual"}));
    e
}

fn hostile_events() -> Vec<Value> {
    vec![
        json!({"type": "turn_start", "timestamp": at(0, 30)}),
        json!({"type": "chat_request", "timestamp": at(0, 30), "content": HOSTILE_TEXT, "author": HOSTILE_TITLE,
            "resources": [{"uri": "javascript:alert('uri')", "name": HOSTILE_TEXT, "mimeType": "text/html\"><script>alert(1)</script>",
                "text": HOSTILE_TEXT}]}),
        json!({"type": "tool_call_request", "timestamp": at(0, 31), "id": "\"><b>id</b>", "name": "<b>tool</b>",
            "arguments": {"path": HOSTILE_TEXT, "<key attr='x'>": "'"}}),
        json!({"type": "tool_call_response", "timestamp": at(0, 32), "id": "\"><b>id</b>", "content": HOSTILE_TEXT}),
        json!({"type": "chat_response", "timestamp": at(0, 33), "message": HOSTILE_TEXT}),
        json!({"type": "chat_response", "timestamp": at(0, 34), "reasoning": HOSTILE_TEXT}),
    ]
}

/// `jp-store serve` running as a child process.
pub struct Server {
    child: Child,
    /// Where it listens.
    pub addr: SocketAddr,
    /// The URL it printed (`http://127.0.0.1:<port>/`).
    pub url: String,
    stderr: Option<std::thread::JoinHandle<String>>,
}

impl Server {
    /// Starts `jp-store --store <store> serve --addr 127.0.0.1:0` (a free
    /// port the system picks) and reads the URL it prints. Panics, with
    /// its error output, if it exits instead.
    pub fn start(store: &Path) -> Server {
        Server::start_with(store, &["--addr", "127.0.0.1:0"])
    }

    /// Starts `jp-store --store <store> serve <args>`.
    pub fn start_with(store: &Path, args: &[&str]) -> Server {
        Server::start_env(store.as_os_str(), args, &[])
    }

    /// Starts `jp-store --store <store> serve <args>` with `env` added to
    /// its environment (a store URL and its credentials, say).
    pub fn start_env(store: &std::ffi::OsStr, args: &[&str], env: &[(&str, String)]) -> Server {
        let mut child = Command::new(jp_store_bin())
            .arg("--store")
            .arg(store)
            .arg("serve")
            .args(args)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .env_remove("JP_STORE_DIR")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawning jp-store serve");
        let stderr = child.stderr.take().expect("stderr of the server");
        let stderr = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = BufReader::new(stderr).read_to_string(&mut text);
            text
        });
        let stdout = child.stdout.take().expect("stdout of the server");
        let mut line = String::new();
        // Blocks until the server prints its URL, or exits (end of file).
        let _ = BufReader::new(stdout).read_line(&mut line);
        let url = line.trim().to_owned();
        let Some(addr) = url
            .strip_prefix("http://")
            .and_then(|rest| rest.strip_suffix('/'))
            .and_then(|a| a.parse::<SocketAddr>().ok())
        else {
            let status = child.wait().expect("waiting for the server");
            let err = stderr.join().unwrap_or_default();
            panic!("jp-store serve printed {line:?} and exited {status}: {err}");
        };
        Server {
            child,
            addr,
            url,
            stderr: Some(stderr),
        }
    }

    /// A request to the server (see [`request`]).
    pub fn get(&self, target: &str) -> HttpResponse {
        request(self.addr, "GET", target, &[])
    }

    /// Stops the server with SIGINT, as Ctrl-C does; returns its exit
    /// status and error output.
    pub fn interrupt(mut self) -> (ExitStatus, String) {
        let status = Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status()
            .expect("running kill");
        assert!(status.success(), "kill -INT failed");
        let exit = self.child.wait().expect("waiting for the server");
        let err = self
            .stderr
            .take()
            .map(|h| h.join().unwrap_or_default())
            .unwrap_or_default();
        (exit, err)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A response as read off the socket.
#[derive(Debug)]
pub struct HttpResponse {
    /// The status code.
    pub status: u16,
    /// The headers, names lowercased, in order.
    pub headers: Vec<(String, String)>,
    /// The body (as sent: nothing for HEAD).
    pub body: Vec<u8>,
}

impl HttpResponse {
    /// The value of header `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Sends `method target HTTP/1.1` with `Host: <addr>` (unless `headers`
/// give one), `Connection: close` and `headers`, and reads the whole
/// response. The target is sent as given: nothing is normalized or
/// encoded.
pub fn request(
    addr: SocketAddr,
    method: &str,
    target: &str,
    headers: &[(&str, &str)],
) -> HttpResponse {
    request_with_body(addr, method, target, headers, b"")
}

/// [`request`] with a body (its `Content-Length` added).
pub fn request_with_body(
    addr: SocketAddr,
    method: &str,
    target: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> HttpResponse {
    exchange(addr, method, target, headers, body, None).unwrap_or_else(|e| match e {
        Failed::TimedOut(why) | Failed::Other(why) => panic!("{why}"),
    })
}

/// Why [`exchange`] failed.
enum Failed {
    /// The response did not come within the time given.
    TimedOut(String),
    /// Anything else.
    Other(String),
}

/// [`request_with_body`], each read waiting at most `timeout` (none:
/// without limit).
fn exchange(
    addr: SocketAddr,
    method: &str,
    target: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    timeout: Option<Duration>,
) -> Result<HttpResponse, Failed> {
    let mut stream = TcpStream::connect(addr)
        .map_err(|e| Failed::Other(format!("connecting to {addr}: {e}")))?;
    stream
        .set_read_timeout(timeout)
        .map_err(|e| Failed::Other(format!("setting a read timeout: {e}")))?;
    let mut head = format!("{method} {target} HTTP/1.1\r\n");
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        head.push_str(&format!("Host: {addr}\r\n"));
    }
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    if !body.is_empty() {
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    head.push_str("Connection: close\r\n\r\n");
    stream
        .write_all(head.as_bytes())
        .and_then(|()| stream.write_all(body))
        .map_err(|e| Failed::Other(format!("sending {method} {target}: {e}")))?;
    let raw = read_response(&mut stream, method == "HEAD").map_err(|e| {
        let why = format!("reading the response to {method} {target}: {e}");
        match e.kind() {
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => Failed::TimedOut(why),
            _ => Failed::Other(why),
        }
    })?;
    parse_response(&raw, method == "HEAD").map_err(|why| {
        Failed::Other(format!(
            "{method} {target}: {why}: {:?}",
            String::from_utf8_lossy(&raw)
        ))
    })
}

/// Reads one response: up to the end of its body as its headers give it
/// (`Content-Length`, or the last chunk), or to the end of the stream when
/// they give none. A server that keeps the connection open after the
/// response (as ChromeDriver does) is not waited for.
fn read_response(stream: &mut TcpStream, head_only: bool) -> std::io::Result<Vec<u8>> {
    let mut raw = Vec::new();
    let mut buf = [0u8; 64 << 10];
    let mut body_start = None;
    loop {
        if let Some(start) = body_start {
            let head = String::from_utf8_lossy(&raw[..start]).to_ascii_lowercase();
            let length = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok());
            let chunked = head
                .lines()
                .any(|l| l.starts_with("transfer-encoding:") && l.contains("chunked"));
            let body = &raw[start..];
            let complete = if head_only {
                true
            } else if chunked {
                body.ends_with(b"0\r\n\r\n")
            } else {
                length.is_some_and(|n| body.len() >= n)
            };
            if complete {
                return Ok(raw);
            }
        }
        let n = stream.read(&mut buf)?;
        if n == 0 {
            return Ok(raw);
        }
        raw.extend_from_slice(&buf[..n]);
        if body_start.is_none() {
            body_start = raw.windows(4).position(|w| w == b"\r\n\r\n").map(|p| p + 4);
        }
    }
}

fn parse_response(raw: &[u8], head_only: bool) -> Result<HttpResponse, String> {
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("no end of headers")?;
    let head = std::str::from_utf8(&raw[..end]).map_err(|_| "headers not UTF-8")?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().ok_or("no status line")?;
    let status: u16 = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or("no status code")?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let mut body = raw[end + 4..].to_vec();
    let header = |n: &str| {
        headers
            .iter()
            .find(|(k, _)| k == n)
            .map(|(_, v)| v.as_str())
    };
    if header("transfer-encoding").is_some_and(|v| v.contains("chunked")) {
        body = dechunk(&body)?;
    } else if let (Some(len), false) = (header("content-length"), head_only) {
        let len: usize = len.parse().map_err(|_| "bad content-length")?;
        if body.len() != len {
            return Err(format!(
                "content-length {len}, body of {} bytes",
                body.len()
            ));
        }
    }
    Ok(HttpResponse {
        status,
        headers,
        body,
    })
}

fn dechunk(mut raw: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    loop {
        let line_end = raw
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or("chunk size line")?;
        let size_text = std::str::from_utf8(&raw[..line_end]).map_err(|_| "chunk size")?;
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
            .map_err(|_| "chunk size")?;
        raw = &raw[line_end + 2..];
        if size == 0 {
            return Ok(out);
        }
        if raw.len() < size + 2 {
            return Err("a chunk cut short".into());
        }
        out.extend_from_slice(&raw[..size]);
        raw = &raw[size + 2..];
    }
}

/// Headless Chromium, when it is installed: `$CHROMIUM`, else
/// `/usr/bin/chromium`; otherwise why the browser tests are skipped.
pub fn chromium() -> Result<PathBuf, String> {
    let path = std::env::var_os("CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"));
    if path.is_file() {
        Ok(path)
    } else {
        Err(format!(
            "{} is not installed (Debian: apt-get install chromium chromium-driver; .ci/run does it)",
            path.display()
        ))
    }
}

/// The flags Chromium runs with here: headless, as root, without the
/// background connections a closed network refuses, with a new profile.
pub fn chromium_args(profile: &Path) -> Vec<String> {
    [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        "--hide-scrollbars",
        "--force-device-scale-factor=1",
        "--lang=en-US",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .chain([format!("--user-data-dir={}", profile.display())])
    .collect()
}

/// How long one run of Chromium (or one ChromeDriver command) may take
/// before it is taken for hung: a guard so that a hung browser fails the
/// test instead of stalling it (and CI) for ever, not a limit on speed. A
/// page of the fixture loads in well under a second; this is longer than
/// ChromeDriver's own page-load timeout (300 s), so that its error, when it
/// has one, comes first.
pub const CHROMIUM_LIMIT: Duration = Duration::from_secs(360);

/// Runs Chromium on `url` with `extra` flags, its output collected; kills
/// it (with every process it started) and panics, saying it did not
/// finish, if it runs longer than [`CHROMIUM_LIMIT`].
fn run_chromium(browser: &Path, extra: &[String], url: &str) -> std::process::Output {
    run_chromium_within(browser, extra, url, CHROMIUM_LIMIT)
}

/// `command` spawned, again while it fails with `ETXTBSY`: a program
/// written by this process (a test's script) is "busy" while a child that
/// another thread forked meanwhile still holds the descriptor it was
/// written through, until that child's `exec` closes it (a few
/// milliseconds at most).
fn spawn_written(command: &mut Command) -> std::io::Result<std::process::Child> {
    const ETXTBSY: i32 = 26;
    let mut tries = 0;
    loop {
        match command.spawn() {
            Err(e) if e.raw_os_error() == Some(ETXTBSY) && tries < 50 => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(10));
            }
            other => return other,
        }
    }
}

/// [`run_chromium`] with the limit `limit`.
fn run_chromium_within(
    browser: &Path,
    extra: &[String],
    url: &str,
    limit: Duration,
) -> std::process::Output {
    use std::os::unix::process::CommandExt as _;
    let profile = tempfile::tempdir().expect("a profile directory");
    let mut command = Command::new(browser);
    command
        .args(chromium_args(profile.path()))
        .args(extra)
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // A process group of its own, so that its renderer and helper
        // processes are killed with it.
        .process_group(0);
    let mut child = spawn_written(&mut command)
        .unwrap_or_else(|e| panic!("running {}: {e}", browser.display()));
    // The output is read as it comes (a full pipe would block it), into
    // buffers that can be looked at without waiting for the readers.
    let (done, finished) = mpsc::channel::<()>();
    let collect = |pipe: Option<Box<dyn Read + Send>>| {
        let buffer = Arc::new(Mutex::new(Vec::new()));
        let filled = Arc::clone(&buffer);
        let done = done.clone();
        std::thread::spawn(move || {
            if let Some(mut pipe) = pipe {
                let mut chunk = [0u8; 8 << 10];
                loop {
                    match pipe.read(&mut chunk) {
                        Ok(0) => break,
                        Ok(n) => filled
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .extend_from_slice(&chunk[..n]),
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                        Err(_) => break,
                    }
                }
            }
            let _ = done.send(());
        });
        buffer
    };
    let stdout = collect(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let stderr = collect(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    drop(done);
    let take =
        |b: &Arc<Mutex<Vec<u8>>>| std::mem::take(&mut *b.lock().unwrap_or_else(|e| e.into_inner()));
    let deadline = Instant::now() + limit;
    // Both pipes closed (every process that held them ended), then the
    // exit status.
    let mut open = 2;
    while open > 0 {
        match finished.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(()) => open -= 1,
            Err(_) => {
                let _ = Command::new("kill")
                    .args(["-s", "KILL", "--", &format!("-{}", child.id())])
                    .status();
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "Chromium did not finish with {url} within {} s ({} {extra:?}): killed; its error output:\n{}",
                    limit.as_secs(),
                    browser.display(),
                    String::from_utf8_lossy(&take(&stderr))
                );
            }
        }
    }
    let status = child
        .wait()
        .unwrap_or_else(|e| panic!("waiting for {}: {e}", browser.display()));
    std::process::Output {
        status,
        stdout: take(&stdout),
        stderr: take(&stderr),
    }
}

/// The DOM of `url` after it loaded and its scripts ran, as Chromium's
/// `--dump-dom` prints it.
pub fn dump_dom(browser: &Path, url: &str) -> String {
    let out = run_chromium(browser, &["--dump-dom".to_owned()], url);
    assert!(
        out.status.success() && !out.stdout.is_empty(),
        "chromium --dump-dom {url}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A screenshot of `url` at `width` x `height`, written to `path`.
pub fn screenshot(browser: &Path, url: &str, path: &Path, width: u32, height: u32) {
    let out = run_chromium(
        browser,
        &[
            format!("--screenshot={}", path.display()),
            format!("--window-size={width},{height}"),
        ],
        url,
    );
    assert!(
        out.status.success() && path.is_file(),
        "chromium --screenshot {url}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// ChromeDriver (`$CHROMEDRIVER`, else `/usr/bin/chromedriver`), when it
/// is installed; otherwise why the tests that drive a page are skipped.
pub fn chromedriver() -> Result<PathBuf, String> {
    let path = std::env::var_os("CHROMEDRIVER")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromedriver"));
    if path.is_file() {
        Ok(path)
    } else {
        Err(format!(
            "{} is not installed (Debian: apt-get install chromium-driver; .ci/run does it)",
            path.display()
        ))
    }
}

/// A Chromium session driven through ChromeDriver's WebDriver API (its
/// own process on a free loopback port), ended when dropped.
pub struct Driver {
    child: Child,
    addr: SocketAddr,
    session: String,
    _profile: tempfile::TempDir,
}

impl Driver {
    /// Starts ChromeDriver on a port it picks and opens a session of
    /// headless `browser` with the console logged.
    pub fn start(driver: &Path, browser: &Path) -> Driver {
        let mut child = Command::new(driver)
            .arg("--port=0")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("running {}: {e}", driver.display()));
        let stdout = child.stdout.take().expect("stdout of chromedriver");
        let mut lines = BufReader::new(stdout).lines();
        // Blocks until it says where it listens, or exits (end of output).
        let port = lines
            .by_ref()
            .map_while(Result::ok)
            .find_map(|line| {
                line.split("started successfully on port ")
                    .nth(1)
                    .and_then(|p| p.trim_end_matches('.').parse::<u16>().ok())
            })
            .unwrap_or_else(|| panic!("chromedriver did not say its port"));
        // Its later output is not read: drained so it never blocks on it.
        std::thread::spawn(move || lines.for_each(drop));
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let profile = tempfile::tempdir().expect("a profile directory");
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": browser.to_string_lossy(),
                "args": chromium_args(profile.path()).into_iter()
                    .chain(["--window-size=1200,900".to_owned()]).collect::<Vec<_>>(),
            },
            "goog:loggingPrefs": {"browser": "ALL"},
        }}});
        let mut driver = Driver {
            child,
            addr,
            session: String::new(),
            _profile: profile,
        };
        let created = driver.call("POST", "/session", Some(&capabilities));
        driver.session = created["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session id in {created}"))
            .to_owned();
        driver
    }

    /// A WebDriver command; its `value`. Panics on an error of the driver.
    pub fn call(&self, method: &str, path: &str, body: Option<&Value>) -> Value {
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let r = exchange(
            self.addr,
            method,
            path,
            &[("Content-Type", "application/json")],
            body.as_bytes(),
            Some(CHROMIUM_LIMIT),
        )
        .unwrap_or_else(|e| match e {
            Failed::TimedOut(why) => panic!(
                "Chromium did not finish: ChromeDriver did not answer {method} {path} within {} s ({why})",
                CHROMIUM_LIMIT.as_secs()
            ),
            Failed::Other(why) => panic!("{why}"),
        });
        let value: Value = serde_json::from_slice(&r.body)
            .unwrap_or_else(|e| panic!("{method} {path}: not JSON ({e}): {}", r.text()));
        assert_eq!(r.status, 200, "{method} {path}: {value}");
        value["value"].clone()
    }

    fn session_path(&self, rest: &str) -> String {
        format!("/session/{}{rest}", self.session)
    }

    /// Loads `url` (returns once it has loaded).
    pub fn open(&self, url: &str) {
        self.call(
            "POST",
            &self.session_path("/url"),
            Some(&json!({"url": url})),
        );
    }

    /// Runs `script` (a function body) in the page; what it returns.
    pub fn run(&self, script: &str) -> Value {
        self.call(
            "POST",
            &self.session_path("/execute/sync"),
            Some(&json!({"script": script, "args": []})),
        )
    }

    /// Runs `script`, which calls `arguments[0]` with its result when done
    /// (ChromeDriver's script timeout bounds the wait).
    pub fn run_async(&self, script: &str) -> Value {
        self.call(
            "POST",
            &self.session_path("/execute/async"),
            Some(&json!({"script": script, "args": []})),
        )
    }

    /// Clicks the first element `css` selects, as a user does.
    pub fn click(&self, css: &str) {
        let found = self.call(
            "POST",
            &self.session_path("/element"),
            Some(&json!({"using": "css selector", "value": css})),
        );
        let element = found
            .as_object()
            .and_then(|o| o.values().next())
            .and_then(Value::as_str)
            .unwrap_or_else(|| panic!("no element {css}: {found}"))
            .to_owned();
        self.call(
            "POST",
            &self.session_path(&format!("/element/{element}/click")),
            Some(&json!({})),
        );
    }

    /// The browser console's messages since the last call (level and
    /// text).
    pub fn console(&self) -> Vec<(String, String)> {
        let logs = self.call(
            "POST",
            &self.session_path("/se/log"),
            Some(&json!({"type": "browser"})),
        );
        logs.as_array()
            .map(|entries| {
                entries
                    .iter()
                    .map(|e| {
                        (
                            e["level"].as_str().unwrap_or("").to_owned(),
                            e["message"].as_str().unwrap_or("").to_owned(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let path = format!("/session/{}", self.session);
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                request(self.addr, "DELETE", &path, &[])
            }));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A "browser" that hangs, with a helper process holding its output
    /// open, is killed with its helper, and the run fails saying so.
    #[test]
    fn a_hung_browser_is_killed_and_fails_the_run() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().expect("tempdir");
        let browser = dir.path().join("hung-browser");
        std::fs::write(
            &browser,
            format!(
                "#!/bin/sh\necho starting >&2\nsleep 600 &\necho $! > {}\nsleep 600\n",
                dir.path().join("helper.pid").display()
            ),
        )
        .expect("the script");
        std::fs::set_permissions(&browser, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let failed = std::panic::catch_unwind(|| {
            run_chromium_within(&browser, &[], "http://127.0.0.1:9/", Duration::from_secs(1))
        })
        .expect_err("the run fails");
        let message = failed.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(message.contains("Chromium did not finish"), "{message}");
        assert!(message.contains("starting"), "its error output: {message}");
        // The helper was killed too (it is gone, or a zombie until its new
        // parent reaps it).
        let helper = std::fs::read_to_string(dir.path().join("helper.pid")).expect("its pid");
        let stat = Path::new("/proc").join(helper.trim()).join("stat");
        let ended = (0..200).any(|_| {
            let state = std::fs::read_to_string(&stat).unwrap_or_default();
            let ended = state.is_empty() || state.contains(") Z ");
            if !ended {
                std::thread::sleep(Duration::from_millis(50));
            }
            ended
        });
        assert!(ended, "the helper still runs: {stat:?}");
    }

    #[test]
    fn a_browser_that_finishes_gives_its_output() {
        let out = run_chromium_within(
            Path::new("/bin/echo"),
            &[],
            "http://127.0.0.1:9/",
            CHROMIUM_LIMIT,
        );
        assert!(out.status.success());
        assert!(String::from_utf8_lossy(&out.stdout).ends_with("http://127.0.0.1:9/\n"));
    }
}

//! A fault-injecting HTTP/1.1 proxy for tests against a real S3 server.
//!
//! The proxy listens on a loopback port and forwards every request, byte
//! for byte (the signature covers the `Host` header, which is the proxy's
//! address both when the client signs and when the server checks), to the
//! real server, on a connection of its own per request. Rules ([`Rule`])
//! pick requests by method, a substring of their (percent-decoded) target
//! and their occurrence, and apply a [`Fault`]: an answer lost or replaced
//! after the server applied the request, a refusal before it reached the
//! server, an answer held back, a delay, a request body dribbled.
//!
//! The client sees what it would see on a network: a connection closed
//! before an answer, a 5xx with an S3 error body, an answer later than its
//! timeout. Every request is logged ([`FaultProxy::seen`]), so a test can
//! check that its rule fired.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

/// What a rule does to the requests it picks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Forwarded; the server's answer is lost: the connection to the client
    /// is closed without an answer.
    LoseAnswer,
    /// Forwarded; the server's answer is replaced by this status (an S3
    /// error body saying the proxy injected it).
    ReplaceAnswer(u16),
    /// Not forwarded: answered with this status (an S3 error body).
    Refuse(u16),
    /// Not forwarded: the connection is closed without an answer.
    Drop,
    /// Forwarded; the answer is held this long before it is sent (a client
    /// with a shorter timeout has given up by then).
    HoldAnswer(Duration),
    /// Held this long, then forwarded as it is.
    Delay(Duration),
    /// Forwarded; the answer's head and half its body reach the client,
    /// then the connection closes.
    CutAnswer,
    /// The request body is forwarded `chunk` bytes at a time, `pause`
    /// apart; [`FaultProxy::cut_uploads`] ends it there (the server gets a
    /// body shorter than announced, as from a client killed mid-upload).
    Dribble {
        /// Bytes forwarded at a time.
        chunk: usize,
        /// The pause after each chunk.
        pause: Duration,
    },
}

/// Which requests a fault applies to.
#[derive(Clone, Debug)]
pub struct Rule {
    /// `GET`, `PUT`, `HEAD`, `DELETE`, `POST`, `LIST` (a GET with
    /// `list-type=` in its query; `GET` then means the others), or `*`.
    method: String,
    /// A substring of the percent-decoded request target (path and
    /// query).
    key: String,
    /// Matching requests let through before the fault applies.
    skip: usize,
    /// Matching requests the fault applies to (then the rule is spent).
    count: usize,
    /// Only requests whose body is longer than this match.
    larger_than: u64,
    fault: Fault,
}

impl Rule {
    /// The first request of `method` whose target holds `key` gets
    /// `fault`.
    pub fn on(method: &str, key: &str, fault: Fault) -> Rule {
        Rule {
            method: method.to_ascii_uppercase(),
            key: key.to_string(),
            skip: 0,
            count: 1,
            larger_than: 0,
            fault,
        }
    }

    /// The `n`-th matching request (1-based) is the first to get the fault.
    pub fn nth(mut self, n: usize) -> Rule {
        self.skip = n.saturating_sub(1);
        self
    }

    /// `count` matching requests in a row get the fault (`usize::MAX`:
    /// every one).
    pub fn times(mut self, count: usize) -> Rule {
        self.count = count;
        self
    }

    /// Only requests whose body is longer than `bytes` match.
    pub fn larger_than(mut self, bytes: u64) -> Rule {
        self.larger_than = bytes;
        self
    }

    fn matches(&self, method: &str, target: &str, body_len: u64) -> bool {
        if body_len <= self.larger_than && self.larger_than > 0 {
            return false;
        }
        let list = method == "GET" && target.contains("list-type=");
        let method_ok = match self.method.as_str() {
            "*" => true,
            "LIST" => list,
            "GET" => method == "GET" && !list,
            m => m == method,
        };
        method_ok && target.contains(&self.key)
    }
}

/// A request the proxy saw.
#[derive(Clone, Debug)]
pub struct Seen {
    /// Its method.
    pub method: String,
    /// Its target, percent-decoded.
    pub target: String,
    /// The fault applied, if any.
    pub fault: Option<Fault>,
    /// The status the server answered, if the request reached it and it
    /// answered.
    pub status: Option<u16>,
    /// The declared length of the request body.
    pub body_len: u64,
    /// The proxy's number of the request.
    pub id: usize,
}

struct Armed {
    rule: Rule,
    matched: usize,
    applied: usize,
}

struct Shared {
    upstream: SocketAddr,
    rules: Mutex<Vec<Armed>>,
    seen: Mutex<Vec<Seen>>,
    /// Dribbled uploads stop forwarding when set.
    cut: AtomicBool,
    /// Bytes of request bodies forwarded by dribbling.
    dribbled: AtomicU64,
    stop: AtomicBool,
    ids: AtomicUsize,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The proxy: runs until dropped.
pub struct FaultProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

impl FaultProxy {
    /// A proxy to the server at `endpoint` (`http://HOST:PORT`).
    pub fn start(endpoint: &str) -> FaultProxy {
        let hostport = endpoint
            .strip_prefix("http://")
            .unwrap_or(endpoint)
            .trim_end_matches('/');
        let upstream: SocketAddr = hostport
            .parse()
            .unwrap_or_else(|e| panic!("the test server's endpoint {endpoint}: {e}"));
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port for the proxy");
        let addr = listener.local_addr().expect("the proxy's address");
        let shared = Arc::new(Shared {
            upstream,
            rules: Mutex::new(Vec::new()),
            seen: Mutex::new(Vec::new()),
            cut: AtomicBool::new(false),
            dribbled: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            ids: AtomicUsize::new(0),
        });
        let s = shared.clone();
        thread::spawn(move || {
            for conn in listener.incoming() {
                if s.stop.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let s = s.clone();
                thread::spawn(move || {
                    let _ = serve(&s, conn);
                });
            }
        });
        FaultProxy { addr, shared }
    }

    /// The endpoint clients use: `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Adds a rule (after those already there: the first rule that matches
    /// a request and is not spent applies).
    pub fn add(&self, rule: Rule) {
        lock(&self.shared.rules).push(Armed {
            rule,
            matched: 0,
            applied: 0,
        });
    }

    /// Removes every rule and lets dribbled uploads run again.
    pub fn clear(&self) {
        lock(&self.shared.rules).clear();
        self.shared.cut.store(false, Ordering::SeqCst);
    }

    /// How many requests got a fault so far.
    pub fn faults(&self) -> usize {
        lock(&self.shared.seen)
            .iter()
            .filter(|s| s.fault.is_some())
            .count()
    }

    /// Every request seen so far.
    pub fn seen(&self) -> Vec<Seen> {
        lock(&self.shared.seen).clone()
    }

    /// Forgets the requests seen.
    pub fn forget(&self) {
        lock(&self.shared.seen).clear();
    }

    /// Ends every dribbled upload where it is: the server gets a body
    /// shorter than its declared length, then the connection closes.
    pub fn cut_uploads(&self) {
        self.shared.cut.store(true, Ordering::SeqCst);
    }

    /// Bytes of request bodies forwarded by dribbling so far.
    pub fn dribbled(&self) -> u64 {
        self.shared.dribbled.load(Ordering::SeqCst)
    }

    /// Waits until at least `bytes` were dribbled, or `gone` says to stop
    /// waiting (the client ended); false if that did not happen within
    /// `guard` (a hang guard, not a measurement).
    pub fn wait_dribbled(
        &self,
        bytes: u64,
        mut gone: impl FnMut() -> bool,
        guard: Duration,
    ) -> bool {
        let start = Instant::now();
        while self.dribbled() < bytes {
            if gone() || start.elapsed() > guard {
                return false;
            }
            thread::sleep(Duration::from_millis(5));
        }
        true
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.cut.store(true, Ordering::SeqCst);
        // Wakes the accepting thread.
        let _ = TcpStream::connect(self.addr);
    }
}

/// A request or response head: the first line and the headers.
struct Head {
    raw: Vec<u8>,
    first: String,
    headers: Vec<(String, String)>,
}

impl Head {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn content_length(&self) -> Option<u64> {
        self.header("content-length")
            .and_then(|v| v.trim().parse().ok())
    }

    fn chunked(&self) -> bool {
        self.header("transfer-encoding")
            .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"))
    }
}

/// Reads a head (up to the empty line); `None` at a clean end of stream.
fn read_head(r: &mut impl BufRead) -> io::Result<Option<Head>> {
    let mut raw = Vec::new();
    let mut lines = Vec::new();
    loop {
        let mut line = Vec::new();
        let n = r.read_until(b'\n', &mut line)?;
        if n == 0 {
            if raw.is_empty() {
                return Ok(None);
            }
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "end of stream inside a head",
            ));
        }
        raw.extend_from_slice(&line);
        let text = String::from_utf8_lossy(&line).trim_end().to_string();
        if text.is_empty() {
            if lines.is_empty() {
                // A stray empty line between messages.
                raw.clear();
                continue;
            }
            break;
        }
        lines.push(text);
    }
    let first = lines.remove(0);
    let headers = lines
        .iter()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    Ok(Some(Head {
        raw,
        first,
        headers,
    }))
}

/// Reads a body framed by `head` (`no_body`: a HEAD's answer, 1xx, 204,
/// 304): its raw bytes, chunk framing included. Without a length, a
/// request has no body and an answer's ends with its connection.
fn read_body(
    r: &mut impl BufRead,
    head: &Head,
    no_body: bool,
    request: bool,
) -> io::Result<Vec<u8>> {
    let mut body = Vec::new();
    if no_body {
        return Ok(body);
    }
    if head.chunked() {
        loop {
            let mut line = Vec::new();
            r.read_until(b'\n', &mut line)?;
            body.extend_from_slice(&line);
            let text = String::from_utf8_lossy(&line);
            let size_text = text.trim().split(';').next().unwrap_or("").trim();
            let size = usize::from_str_radix(size_text, 16).map_err(|_| {
                io::Error::new(io::ErrorKind::InvalidData, format!("chunk size {text:?}"))
            })?;
            if size == 0 {
                // Trailers, up to an empty line.
                loop {
                    let mut t = Vec::new();
                    let n = r.read_until(b'\n', &mut t)?;
                    body.extend_from_slice(&t);
                    if n == 0 || t == b"\r\n" || t == b"\n" {
                        return Ok(body);
                    }
                }
            }
            let mut chunk = vec![0; size + 2];
            r.read_exact(&mut chunk)?;
            body.extend_from_slice(&chunk);
        }
    }
    match head.content_length() {
        Some(n) => {
            body.resize(usize::try_from(n).unwrap_or(usize::MAX), 0);
            r.read_exact(&mut body)?;
        }
        None if request => {}
        None => {
            r.read_to_end(&mut body)?;
        }
    }
    Ok(body)
}

/// Percent-decodes a request target (for matching only).
fn decode(target: &str) -> String {
    let bytes = target.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
            if let Ok(b) = u8::from_str_radix(hex, 16) {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// An S3 error answer.
fn error_answer(status: u16, target: &str, id: usize) -> Vec<u8> {
    let (reason, code) = match status {
        500 => ("Internal Server Error", "InternalError"),
        502 => ("Bad Gateway", "BadGateway"),
        503 => ("Service Unavailable", "SlowDown"),
        504 => ("Gateway Timeout", "GatewayTimeout"),
        _ => ("Error", "InjectedError"),
    };
    let body = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{code}</Code>\
         <Message>fault injected by the test proxy (request {id})</Message>\
         <Resource>{}</Resource><RequestId>fault-{id}</RequestId></Error>",
        target.split('?').next().unwrap_or(target)
    );
    let mut out = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: application/xml\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body.as_bytes());
    out
}

/// The fault for a request, if a rule picks it (the rule's counters
/// advance).
fn pick(shared: &Shared, method: &str, target: &str, body_len: u64) -> Option<Fault> {
    let mut rules = lock(&shared.rules);
    for armed in rules.iter_mut() {
        if armed.applied >= armed.rule.count || !armed.rule.matches(method, target, body_len) {
            continue;
        }
        armed.matched += 1;
        if armed.matched > armed.rule.skip {
            armed.applied += 1;
            return Some(armed.rule.fault.clone());
        }
    }
    None
}

/// Serves one client connection: request after request until it closes.
fn serve(shared: &Shared, client: TcpStream) -> io::Result<()> {
    client.set_read_timeout(Some(Duration::from_secs(300)))?;
    client.set_nodelay(true)?;
    let mut to_client = client.try_clone()?;
    let mut reader = BufReader::with_capacity(64 << 10, client);
    loop {
        let Some(head) = read_head(&mut reader)? else {
            return Ok(());
        };
        let mut parts = head.first.split_whitespace();
        let method = parts.next().unwrap_or("").to_string();
        let target = decode(parts.next().unwrap_or(""));
        let id = shared.ids.fetch_add(1, Ordering::SeqCst);
        let body_len = head.content_length().unwrap_or(0);
        let fault = pick(shared, &method, &target, body_len);
        // Seen as it arrives (a test may wait for a request it delays);
        // the server's status is added when it answers.
        lock(&shared.seen).push(Seen {
            method: method.clone(),
            target: target.clone(),
            fault: fault.clone(),
            status: None,
            body_len,
            id,
        });
        let record = |status: Option<u16>| {
            if let Some(seen) = lock(&shared.seen).iter_mut().find(|s| s.id == id) {
                seen.status = status;
            }
        };
        if let Some(Fault::Dribble { chunk, pause }) = &fault {
            return dribble(shared, &head, &mut reader, &mut to_client, *chunk, *pause);
        }
        let body = read_body(&mut reader, &head, false, true)?;
        match &fault {
            Some(Fault::Refuse(status)) => {
                to_client.write_all(&error_answer(*status, &target, id))?;
                continue;
            }
            Some(Fault::Drop) => {
                let _ = to_client.shutdown(Shutdown::Both);
                return Ok(());
            }
            Some(Fault::Delay(d)) => thread::sleep(*d),
            _ => {}
        }
        let (answer_head, answer) = match forward(shared, &head, &body, &method) {
            Ok(a) => a,
            Err(e) => {
                let _ = to_client.write_all(&error_answer(502, &target, id));
                return Err(e);
            }
        };
        let status = answer_head
            .first
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok());
        record(status);
        match &fault {
            Some(Fault::LoseAnswer) => {
                let _ = to_client.shutdown(Shutdown::Both);
                return Ok(());
            }
            Some(Fault::ReplaceAnswer(status)) => {
                to_client.write_all(&error_answer(*status, &target, id))?;
                continue;
            }
            Some(Fault::HoldAnswer(d)) => thread::sleep(*d),
            Some(Fault::CutAnswer) => {
                let mut out = answer_head.raw.clone();
                out.extend_from_slice(&answer[..answer.len() / 2]);
                let _ = to_client.write_all(&out);
                let _ = to_client.shutdown(Shutdown::Both);
                return Ok(());
            }
            _ => {}
        }
        let mut out = answer_head.raw.clone();
        out.extend_from_slice(&answer);
        to_client.write_all(&out)?;
        // An answer that ended with its connection (no length, not
        // chunked) ends the client's connection too.
        let framed = method == "HEAD"
            || answer_head.chunked()
            || answer_head.content_length().is_some()
            || matches!(status, Some(204 | 304));
        if !framed
            || answer_head
                .header("connection")
                .is_some_and(|v| v.eq_ignore_ascii_case("close"))
        {
            let _ = to_client.shutdown(Shutdown::Both);
            return Ok(());
        }
    }
}

/// Sends a request to the server on a connection of its own; its answer.
fn forward(shared: &Shared, head: &Head, body: &[u8], method: &str) -> io::Result<(Head, Vec<u8>)> {
    let mut up = TcpStream::connect(shared.upstream)?;
    up.set_read_timeout(Some(Duration::from_secs(120)))?;
    up.set_nodelay(true)?;
    let mut request = head.raw.clone();
    request.extend_from_slice(body);
    up.write_all(&request)?;
    let mut reader = BufReader::with_capacity(64 << 10, up);
    loop {
        let answer = read_head(&mut reader)?.ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the server closed without an answer",
            )
        })?;
        let status: u16 = answer
            .first
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        if (100..200).contains(&status) {
            // An interim answer: the final one follows.
            continue;
        }
        let no_body = method == "HEAD" || status == 204 || status == 304;
        let body = read_body(&mut reader, &answer, no_body, false)?;
        return Ok((answer, body));
    }
}

/// Forwards a request whose body is dribbled: `chunk` bytes at a time,
/// `pause` apart, until it is whole, the client goes away, or the uploads
/// are cut (then the server's connection is closed mid-body). The answer,
/// if the body was whole, goes back to the client.
fn dribble(
    shared: &Shared,
    head: &Head,
    reader: &mut BufReader<TcpStream>,
    to_client: &mut TcpStream,
    chunk: usize,
    pause: Duration,
) -> io::Result<()> {
    let mut up = TcpStream::connect(shared.upstream)?;
    up.set_read_timeout(Some(Duration::from_secs(120)))?;
    up.write_all(&head.raw)?;
    let mut left = head.content_length().unwrap_or(0);
    let mut buf = vec![0; chunk.max(1)];
    while left > 0 {
        if shared.cut.load(Ordering::SeqCst) {
            let _ = up.shutdown(Shutdown::Both);
            let _ = to_client.shutdown(Shutdown::Both);
            return Ok(());
        }
        let want = usize::try_from(left).unwrap_or(usize::MAX).min(buf.len());
        let n = reader.read(&mut buf[..want])?;
        if n == 0 {
            // The client went away mid-body.
            let _ = up.shutdown(Shutdown::Both);
            return Ok(());
        }
        up.write_all(&buf[..n])?;
        left -= n as u64;
        shared.dribbled.fetch_add(n as u64, Ordering::SeqCst);
        thread::sleep(pause);
    }
    let mut upr = BufReader::new(up);
    let answer = read_head(&mut upr)?.ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the server closed without an answer",
        )
    })?;
    let body = read_body(&mut upr, &answer, false, false)?;
    to_client.write_all(&answer.raw)?;
    to_client.write_all(&body)?;
    let _ = to_client.shutdown(Shutdown::Both);
    Ok(())
}

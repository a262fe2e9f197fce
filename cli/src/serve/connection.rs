//! HTTP/1.1 over TCP for `serve`, one request per connection: the request
//! head read within a time and size limit, the reply written with its
//! length and `Connection: close`, then the connection closed.
//!
//! One request per connection keeps a connection from holding a thread
//! while a browser leaves it open for the next request (browsers keep idle
//! connections for minutes): every connection is on a thread of its own
//! for one exchange, at most [`MAX_CONNECTIONS`] at once, of which at most
//! [`MAX_ANSWERING`] are answered at once. (The HTTP library used before
//! gave connections to a pool of threads that could leave a new connection
//! queued behind idle kept-alive ones until the browser closed them, 300 s
//! later.)
//!
//! A connection has [`HEAD_LIMIT`] in all to send its request head, however
//! it spreads its bytes over that time, and waits for its request head
//! without taking one of the places of those answered: connections that
//! send nothing, or a byte now and then, are dropped when their time is up
//! and never stand between a browser's request and its answer.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::{Duration, Instant};

/// Longest request head (request line and headers) read.
pub const MAX_HEAD: usize = 16 << 10;
/// Connections open at once (their request heads being read, or being
/// answered); more wait to be accepted.
pub const MAX_CONNECTIONS: usize = 256;
/// Requests answered at once (reading the store and writing the reply);
/// more wait, their heads read, for one of these places.
pub const MAX_ANSWERING: usize = 64;
/// How long the whole request head may take to arrive, from the accept.
pub const HEAD_LIMIT: Duration = Duration::from_secs(10);
/// How long a write of the reply may block.
const WRITE_LIMIT: Duration = Duration::from_secs(60);

/// A request's method, as the handlers look at it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Method {
    /// `GET`.
    Get,
    /// `HEAD`: the reply's headers without its body.
    Head,
    /// Any other (answered 405).
    Other(String),
}

/// The parts of a request the handlers look at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Asked {
    /// The method.
    pub method: Method,
    /// The request target as sent.
    pub target: String,
    /// The `Host` header, if any.
    pub host: Option<String>,
}

/// Why a request head was not read.
#[derive(Debug, PartialEq, Eq)]
pub enum BadRequest {
    /// Not an HTTP/1.x request head (status 400).
    Malformed,
    /// A head over [`MAX_HEAD`] bytes (status 431).
    TooLarge,
    /// The connection ended or timed out before a whole head (no reply).
    Gone,
}

/// A connection's reads that end at a deadline: each read may block only
/// for the time left, and none is tried after it (a time out, which
/// [`read_request`] takes for a connection gone).
struct ReadsUntil<'a> {
    stream: &'a TcpStream,
    deadline: Instant,
}

impl Read for ReadsUntil<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        self.stream.set_read_timeout(Some(left))?;
        let mut stream = self.stream;
        stream.read(buf)
    }
}

/// Reads the request head from `stream` (what follows it, a body, is not
/// read: this server answers GET and HEAD).
pub fn read_request(stream: &mut impl Read) -> Result<Asked, BadRequest> {
    let mut head = Vec::with_capacity(1024);
    let mut chunk = [0u8; 2048];
    let end = loop {
        if let Some(end) = find_end(&head) {
            break end;
        }
        if head.len() > MAX_HEAD {
            return Err(BadRequest::TooLarge);
        }
        match stream.read(&mut chunk) {
            Ok(0) => return Err(BadRequest::Gone),
            Ok(n) => head.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return Err(BadRequest::Gone),
        }
    };
    if end > MAX_HEAD {
        return Err(BadRequest::TooLarge);
    }
    parse_head(&head[..end])
}

/// The length of the head in `bytes` (up to and without the blank line),
/// once it is all there.
fn find_end(bytes: &[u8]) -> Option<usize> {
    bytes.windows(4).position(|w| w == b"\r\n\r\n")
}

fn parse_head(head: &[u8]) -> Result<Asked, BadRequest> {
    let text = std::str::from_utf8(head).map_err(|_| BadRequest::Malformed)?;
    let mut lines = text.split("\r\n");
    let request_line = lines.next().ok_or(BadRequest::Malformed)?;
    let mut parts = request_line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(BadRequest::Malformed);
    };
    let token = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphabetic());
    if !token(method)
        || !target.starts_with('/')
        || target.bytes().any(|b| !b.is_ascii_graphic())
        || !version.starts_with("HTTP/1.")
    {
        return Err(BadRequest::Malformed);
    }
    let mut host = None;
    for line in lines {
        let (name, value) = line.split_once(':').ok_or(BadRequest::Malformed)?;
        if name.is_empty() || name.bytes().any(|b| !b.is_ascii_graphic()) {
            return Err(BadRequest::Malformed);
        }
        if name.eq_ignore_ascii_case("host") {
            if host.is_some() {
                // Two Host headers: which one the page is for is unclear.
                return Err(BadRequest::Malformed);
            }
            host = Some(value.trim().to_owned());
        }
    }
    let method = match method {
        "GET" => Method::Get,
        "HEAD" => Method::Head,
        other => Method::Other(other.to_owned()),
    };
    Ok(Asked {
        method,
        target: target.to_owned(),
        host,
    })
}

/// The reason phrase of the statuses this server sends.
fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        421 => "Misdirected Request",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        _ => "",
    }
}

/// Whether `value` can be sent as a header value as it is (visible ASCII,
/// spaces and tabs: no line break that would start another header).
pub fn sendable(value: &str) -> bool {
    value
        .bytes()
        .all(|b| b == b'\t' || (b' '..=b'~').contains(&b))
}

/// Writes a reply: the status line, `headers` (checked by the caller with
/// [`sendable`]), `Content-Length: len`, `Connection: close`, then the
/// body unless `head_only`; at most `len` bytes of it are sent. A body
/// that ends early leaves the reply short of its length, which a client
/// sees as cut (the connection closes).
pub fn write_reply(
    stream: &mut impl Write,
    status: u16,
    headers: &[(&str, String)],
    len: u64,
    body: &mut dyn Read,
    head_only: bool,
) -> io::Result<()> {
    let mut head = format!("HTTP/1.1 {status} {}\r\n", reason(status));
    for (name, value) in headers {
        head.push_str(name);
        head.push_str(": ");
        head.push_str(value);
        head.push_str("\r\n");
    }
    head.push_str(&format!(
        "Content-Length: {len}\r\nConnection: close\r\n\r\n"
    ));
    stream.write_all(head.as_bytes())?;
    if !head_only {
        io::copy(&mut body.take(len), stream)?;
    }
    stream.flush()
}

/// Answers one connection: its request head read by `deadline`, `answer`
/// called with it (or a 400 or 431 reply written), the connection closed.
/// A connection that has not sent its whole head by `deadline` is closed
/// without a reply.
pub fn serve_connection(
    mut stream: TcpStream,
    deadline: Instant,
    answer: impl FnOnce(&Asked, &mut TcpStream) -> io::Result<()>,
    refuse: impl FnOnce(u16, &mut TcpStream) -> io::Result<()>,
) {
    let _ = stream.set_write_timeout(Some(WRITE_LIMIT));
    let asked = read_request(&mut ReadsUntil {
        stream: &stream,
        deadline,
    });
    let result = match asked {
        Ok(asked) => answer(&asked, &mut stream),
        Err(BadRequest::Malformed) => refuse(400, &mut stream),
        Err(BadRequest::TooLarge) => refuse(431, &mut stream),
        Err(BadRequest::Gone) => return,
    };
    if result.is_ok() {
        // Whatever the client sent after its head (a body this server did
        // not read) is drained for a moment before the close, so that the
        // close does not reset the connection before the client read the
        // reply.
        let _ = stream.shutdown(Shutdown::Write);
        let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
        let mut sink = [0u8; 4096];
        let mut drained = 0usize;
        while drained < (64 << 10) {
            match stream.read(&mut sink) {
                Ok(0) | Err(_) => break,
                Ok(n) => drained += n,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(bytes: &[u8]) -> Result<Asked, BadRequest> {
        read_request(&mut io::Cursor::new(bytes.to_vec()))
    }

    #[test]
    fn request_heads_are_read_or_refused() {
        let asked =
            read(b"GET /stats?x=1 HTTP/1.1\r\nhost: 127.0.0.1:7420\r\nAccept: */*\r\n\r\nbody")
                .expect("a request");
        assert_eq!(
            asked,
            Asked {
                method: Method::Get,
                target: "/stats?x=1".into(),
                host: Some("127.0.0.1:7420".into()),
            }
        );
        assert_eq!(
            read(b"HEAD / HTTP/1.0\r\n\r\n").map(|a| a.method),
            Ok(Method::Head)
        );
        assert_eq!(
            read(b"DELETE / HTTP/1.1\r\n\r\n").map(|a| a.method),
            Ok(Method::Other("DELETE".into()))
        );
        for bad in [
            &b"GET / HTTP/2\r\n\r\n"[..],
            b"GET http://x/ HTTP/1.1\r\n\r\n",
            b"GET / HTTP/1.1 extra\r\n\r\n",
            b"GET /a b HTTP/1.1\r\n\r\n",
            b"GET / HTTP/1.1\r\nno colon\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
            b"G3T / HTTP/1.1\r\n\r\n",
        ] {
            assert_eq!(read(bad), Err(BadRequest::Malformed), "{bad:?}");
        }
        assert_eq!(
            read(b"GET / HTTP/1.1\r\nHost: a\r\n"),
            Err(BadRequest::Gone)
        );
        let mut huge = b"GET / HTTP/1.1\r\nX: ".to_vec();
        huge.resize(MAX_HEAD + 10, b'a');
        assert_eq!(read(&huge), Err(BadRequest::TooLarge));
    }

    #[test]
    fn replies_carry_their_length_and_close() {
        let mut out = Vec::new();
        let headers = [("Content-Type", "text/plain".to_owned())];
        write_reply(
            &mut out,
            200,
            &headers,
            5,
            &mut &b"hello, and more"[..],
            false,
        )
        .expect("write");
        assert_eq!(
            String::from_utf8_lossy(&out),
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello"
        );
        let mut out = Vec::new();
        write_reply(&mut out, 404, &[], 5, &mut &b"hello"[..], true).expect("write");
        assert!(String::from_utf8_lossy(&out).ends_with("Connection: close\r\n\r\n"));
        assert!(sendable("attachment; filename=\"a b.txt\""));
        assert!(!sendable("a\r\nSet-Cookie: x"));
    }
}

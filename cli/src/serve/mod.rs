//! `jp-store serve`: a read-only web view of the store, for a person to
//! read long agent conversations rather than JSON.
//!
//! Server-rendered HTML ([`html`] escapes everything it is given), a
//! stylesheet and a small script compiled into the binary, over HTTP/1.1
//! with one request per connection, each on a thread of its own
//! ([`connection`]; no async runtime).
//!
//! | path | what |
//! |---|---|
//! | `/` | the conversations: sortable, searchable by title, paginated ([`list`], from the summaries kept in [`index`]); a search also lists the lines of content holding the text (`jp-store grep`'s searcher, bounded) |
//! | `/conversations/<id>` | one conversation, a page of turns at a time, as logged or as the model is sent it ([`conversation`]) |
//! | `/conversations/<id>/stats`, `/stats` | statistics, with the plots of `stats --plot` ([`stats`]) |
//! | `/conversations/<id>/plot.svg` | that plot |
//! | `/blobs/<sha256>`, `.../preview` | one blob's content, streamed; its first 64 KiB as text ([`blob`]) |
//! | `/static/style.css`, `/static/app.js` | the stylesheet and script |
//!
//! It binds to a loopback address unless told otherwise
//! (`--allow-remote`), answers only requests whose `Host` is that address
//! (so no other site can reach it through a DNS name of its own), answers
//! GET and HEAD only, writes nothing to the store, and stops on Ctrl-C.

mod blob;
mod connection;
mod conversation;
mod html;
mod http;
mod index;
mod layout;
mod list;
mod reply;
mod stats;
mod url;

use std::io::Write as _;
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;

use crate::commands::open_store;
use crate::interrupt::INTERRUPTED_STATUS;
use crate::output;

/// The address `serve` listens on by default.
pub const DEFAULT_ADDR: &str = "127.0.0.1:7420";
/// How long a stop waits for the responses being sent to finish.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// The arguments of `jp-store serve`.
#[derive(Args, Debug)]
pub struct ServeArgs {
    /// The address to listen on: a loopback address and a port (port 0:
    /// any free port). The URL is printed on standard output.
    #[arg(long, default_value = DEFAULT_ADDR, value_name = "ADDR:PORT")]
    pub addr: String,
    /// Listen on an address that is not loopback: anyone who can reach it
    /// can read every conversation of the store (there is no login).
    #[arg(long)]
    pub allow_remote: bool,
}

/// Runs the server until SIGINT or SIGTERM.
pub fn run(dir: &crate::commands::StoreLocation, args: ServeArgs) -> Result<ExitCode> {
    let store = open_store(dir)?;
    let addr = listen_address(&args.addr, args.allow_remote)?;
    if !addr.ip().is_loopback() {
        crate::errln!(
            "jp-store: warning: serving on {addr}, which is not a loopback address: anyone who can reach it can read every conversation of this store"
        );
    }
    let listener = TcpListener::bind(addr).map_err(|e| anyhow!("cannot listen on {addr}: {e}"))?;
    let local = listener
        .local_addr()
        .context("the address the server listens on")?;
    let url = format!("http://{local}/");
    let site = Arc::new(http::Site {
        store,
        index: index::Index::new(),
        hosts: (!args.allow_remote).then(|| host_names(local)),
    });
    // The first SIGINT or SIGTERM stops the server; a second one while it
    // stops ends the process at once.
    let stopping = Arc::new(AtomicBool::new(false));
    let mut signals = {
        use signal_hook::consts::{SIGINT, SIGTERM};
        for signal in [SIGINT, SIGTERM] {
            signal_hook::flag::register_conditional_shutdown(
                signal,
                i32::from(INTERRUPTED_STATUS),
                Arc::clone(&stopping),
            )?;
        }
        signal_hook::iterator::Signals::new([SIGINT, SIGTERM])?
    };
    let open = Arc::new(Open::default());
    let accepting = {
        let stopping = Arc::clone(&stopping);
        let open = Arc::clone(&open);
        std::thread::spawn(move || accept(&listener, &site, &stopping, &open))
    };
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{url}")
            .and_then(|()| out.flush())
            .context("writing to standard output")?;
    }
    output::note(&format!(
        "serving {} read-only at {url} (Ctrl-C stops)",
        dir
    ));
    let _ = signals.forever().next();
    stopping.store(true, Ordering::SeqCst);
    // The accepting thread is woken by a connection of our own.
    let _ = TcpStream::connect_timeout(&local, Duration::from_secs(1));
    let _ = accepting.join();
    // Responses being sent are given a moment to finish; the store is only
    // read, so nothing is left half done when one is cut.
    open.wait_all(STOP_GRACE);
    output::note("stopped serving");
    Ok(ExitCode::SUCCESS)
}

/// The connections open, counted so that at most
/// [`connection::MAX_CONNECTIONS`] are at once (of which at most
/// [`connection::MAX_ANSWERING`] are answered at once) and a stop can wait
/// for them.
#[derive(Default)]
struct Open {
    count: Mutex<Counts>,
    changed: Condvar,
}

#[derive(Default)]
struct Counts {
    /// Connections open: their heads being read, waiting for a place to be
    /// answered, or answered.
    open: usize,
    /// Of those, the ones being answered.
    answering: usize,
}

/// A place among the requests answered at once, given back when dropped.
struct Answering<'a>(&'a Open);

impl Drop for Answering<'_> {
    fn drop(&mut self) {
        self.0.change(|c| c.answering -= 1);
    }
}

impl Open {
    fn counts(&self) -> std::sync::MutexGuard<'_, Counts> {
        self.count.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits until `free` holds of the counts, then `take`s a place.
    fn wait_and_take(&self, free: impl Fn(&Counts) -> bool, take: impl FnOnce(&mut Counts)) {
        let mut counts = self.counts();
        while !free(&counts) {
            counts = self.changed.wait(counts).unwrap_or_else(|e| e.into_inner());
        }
        take(&mut counts);
    }

    fn change(&self, f: impl FnOnce(&mut Counts)) {
        f(&mut self.counts());
        self.changed.notify_all();
    }

    /// Waits for a free place for a connection and takes it.
    fn enter(&self) {
        self.wait_and_take(|c| c.open < connection::MAX_CONNECTIONS, |c| c.open += 1);
    }

    fn leave(&self) {
        self.change(|c| c.open -= 1);
    }

    /// Waits for a free place among the requests answered and takes it
    /// until the returned guard is dropped.
    fn answering(&self) -> Answering<'_> {
        self.wait_and_take(
            |c| c.answering < connection::MAX_ANSWERING,
            |c| c.answering += 1,
        );
        Answering(self)
    }

    /// Waits until no connection is open, or `limit` has passed.
    fn wait_all(&self, limit: Duration) {
        let deadline = Instant::now() + limit;
        let mut counts = self.counts();
        while counts.open > 0 {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            counts = self
                .changed
                .wait_timeout(counts, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

/// Accepts connections until `stopping`, each answered on a thread of its
/// own.
fn accept(listener: &TcpListener, site: &Arc<http::Site>, stopping: &AtomicBool, open: &Arc<Open>) {
    for stream in listener.incoming() {
        if stopping.load(Ordering::SeqCst) {
            break;
        }
        let stream = match stream {
            Ok(stream) => stream,
            Err(e) => {
                // A connection that failed before it was accepted (reset,
                // out of descriptors for a moment): the next one is tried.
                crate::errln!("jp-store: serve: accepting a connection: {e}");
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        open.enter();
        let deadline = Instant::now() + connection::HEAD_LIMIT;
        let site = Arc::clone(site);
        let left = Arc::clone(open);
        let spawned = std::thread::Builder::new()
            .name("serve-connection".into())
            .spawn(move || {
                connection::serve_connection(
                    stream,
                    deadline,
                    |asked, stream| {
                        let _place = left.answering();
                        http::handle(&site, asked, stream)
                    },
                    http::refuse,
                );
                left.leave();
            });
        if let Err(e) = spawned {
            crate::errln!("jp-store: serve: no thread for a connection: {e}");
            open.leave();
        }
    }
}

/// The address to listen on: `addr` resolved, refused unless it is
/// loopback or `allow_remote`.
fn listen_address(addr: &str, allow_remote: bool) -> Result<SocketAddr> {
    let all: Vec<SocketAddr> = addr
        .to_socket_addrs()
        .with_context(|| format!("--addr {addr}: not an address and port"))?
        .collect();
    let Some(first) = all.first().copied() else {
        bail!("--addr {addr}: the name has no address");
    };
    if let Some(remote) = all.iter().find(|a| !a.ip().is_loopback()) {
        if !allow_remote {
            bail!(
                "--addr {addr}: {} is not a loopback address, so anyone who can reach it could read every conversation of the store (there is no login); pass --allow-remote to serve it anyway",
                remote.ip()
            );
        }
    }
    Ok(first)
}

/// The `Host` values a browser sends for the server at `local`.
fn host_names(local: SocketAddr) -> Vec<String> {
    let port = local.port();
    let mut names = vec![
        local.to_string(),
        format!("localhost:{port}"),
        format!("127.0.0.1:{port}"),
        format!("[::1]:{port}"),
    ];
    if port == 80 {
        names.extend(["localhost", "127.0.0.1", "[::1]"].map(str::to_owned));
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_addresses_unless_allowed() {
        assert!(listen_address("127.0.0.1:0", false).is_ok());
        assert!(listen_address("[::1]:8080", false).is_ok());
        let err = listen_address("0.0.0.0:8080", false).expect_err("refused");
        assert!(err.to_string().contains("--allow-remote"), "{err}");
        assert!(listen_address("192.0.2.1:80", false).is_err());
        assert!(listen_address("0.0.0.0:8080", true).is_ok());
        assert!(listen_address("nonsense", false).is_err());
    }
}

//! `jp-store serve`: a read-only web view of the store, for a person to
//! read long agent conversations rather than JSON.
//!
//! Server-rendered HTML ([`html`] escapes everything it is given), a
//! stylesheet and a small script compiled into the binary, over
//! `tiny_http` (a small synchronous HTTP/1.1 server: a thread accepts and
//! reads requests, a few workers here answer them; no async runtime).
//!
//! | path | what |
//! |---|---|
//! | `/` | the conversations: sortable, searchable by title, paginated ([`list`], from the summaries kept in [`index`]) |
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
use std::net::{SocketAddr, ToSocketAddrs};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;

use crate::commands::open_store;
use crate::interrupt::INTERRUPTED_STATUS;
use crate::output;

/// The address `serve` listens on by default.
pub const DEFAULT_ADDR: &str = "127.0.0.1:7420";
/// Threads answering requests.
const WORKERS: usize = 4;
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
        eprintln!(
            "jp-store: warning: serving on {addr}, which is not a loopback address: anyone who can reach it can read every conversation of this store"
        );
    }
    let server =
        tiny_http::Server::http(addr).map_err(|e| anyhow!("cannot listen on {addr}: {e}"))?;
    let local = server
        .server_addr()
        .to_ip()
        .ok_or_else(|| anyhow!("the server is not listening on an IP address"))?;
    let url = format!("http://{local}/");
    let site = Arc::new(http::Site {
        store,
        index: index::Index::new(),
        hosts: (!args.allow_remote).then(|| host_names(local)),
    });
    let server = Arc::new(server);
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
    let (done, finished) = mpsc::channel::<()>();
    for _ in 0..WORKERS {
        let server = Arc::clone(&server);
        let site = Arc::clone(&site);
        let stopping = Arc::clone(&stopping);
        let done = done.clone();
        std::thread::spawn(move || {
            loop {
                match server.recv() {
                    Ok(request) => http::handle(&site, request),
                    Err(_) if stopping.load(Ordering::SeqCst) => break,
                    Err(e) => eprintln!("jp-store: serve: {e}"),
                }
            }
            let _ = done.send(());
        });
    }
    drop(done);
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
    for _ in 0..WORKERS {
        server.unblock();
    }
    // Responses being sent are given a moment to finish; the store is only
    // read, so nothing is left half done when one is cut.
    let deadline = std::time::Instant::now() + STOP_GRACE;
    for _ in 0..WORKERS {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if finished.recv_timeout(left).is_err() {
            break;
        }
    }
    output::note("stopped serving");
    Ok(ExitCode::SUCCESS)
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

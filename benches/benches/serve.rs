//! `jp-store serve` on big stores: what a page costs beside the CLI
//! command that reads the same data, measured in the same interleaved loop
//! (`timing::interleaved`: one of each per round, shuffled, medians of per-round ratios).
//!
//! Two stores: 1,000 and 10,000 small conversations (3 events each), each
//! with one generated coding-agent conversation of 10,000 events. For
//! each store, one loop of four operations:
//!
//! - `list page`: `GET /` (the first 50 conversations by last activity) of
//!   a running `jp-store serve` that has answered it before (its summaries
//!   of the conversations kept: what is left is listing the conversations
//!   and their logs' metadata, and rendering), over a new loopback
//!   connection;
//! - `ls`: `jp-store ls` run as a process (start, open, every
//!   conversation's state, printed), output discarded;
//! - `conversation page`: `GET /conversations/<id>` of the 10,000-event
//!   conversation (its first page of turns; the log is read and the view
//!   computed, as `view --refs` does, content folded);
//! - `view --refs`: `jp-store view <id> --refs` as a process.
//!
//! Both sides pay what a user waits for: the page its request and
//! response, the command its process start. `ls` reads every
//! conversation's state and prints them all; the list page, after the
//! first request, reads none that did not change and renders 50 rows.
//! Before the loop, the first `GET /` of a server just started (which reads
//! every conversation's state, as `ls` does) is timed on three servers
//! (`first list page`, the median). The conversation page is measured in
//! both stores: the number of other conversations must not change it.
//!
//! Output: one line per comparison on stderr and, as the last line of
//! stdout, one JSON object of medians (nanoseconds) and ratios by store
//! size.
//!
//! Run: `cargo bench --bench serve` (the release `jp-store` is built first
//! if needed; about a minute of run time after the stores are built).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use jpstore_benches::bench_dir::{describe, fresh_run_dir};
use jpstore_benches::setup::conversation::store_with;
use jpstore_benches::timing::{human, interleaved, three_digits, Op};
use jpstore_benches::workload::conversation::ConversationShape;
use serde_json::{json, Map, Value};

const SEED: u64 = 7;
const BIG_EVENTS: usize = 10_000;
const BIG_ID: &str = "17000000000";
const SIZES: [usize; 2] = [1_000, 10_000];

fn main() {
    let bin = jp_store_release();
    let run = fresh_run_dir(&Path::new(env!("CARGO_TARGET_TMPDIR")).join("serve-bench"));
    println!("{}", describe(&run));
    let big = ConversationShape::generate(SEED, BIG_EVENTS);
    let small: Vec<Vec<Value>> = (0..SIZES[SIZES.len() - 1])
        .map(|i| small_conversation(i as u64))
        .collect();
    let mut out = Map::new();
    for &n in &SIZES {
        let started = Instant::now();
        let names: Vec<String> = (0..n)
            .map(|i| (17_100_000_000u64 + i as u64).to_string())
            .collect();
        let mut all: Vec<(&str, &[Value])> = names
            .iter()
            .zip(&small)
            .map(|(name, entries)| (name.as_str(), entries.as_slice()))
            .collect();
        all.push((BIG_ID, &big));
        let (dir, store) = store_with(&run, &all);
        drop(store);
        eprintln!(
            "store of {n} conversations + one of {BIG_EVENTS} events built in {}",
            human(started.elapsed())
        );
        let first = first_list_page(&bin, dir.path());
        eprintln!("first list page of a server just started: {}", human(first));
        let server = Server::start(&bin, dir.path());
        let timings = measure(&bin, dir.path(), &server);
        drop(server);
        timings.print(
            &format!("{n} conversations + one of {BIG_EVENTS} events"),
            &[(0, 1), (2, 3)],
        );
        let mut medians: Map<String, Value> = timings
            .names
            .iter()
            .enumerate()
            .map(|(i, name)| (name.clone(), json!(timings.median(i).as_nanos() as u64)))
            .collect();
        medians.insert("first list page".into(), json!(first.as_nanos() as u64));
        out.insert(
            n.to_string(),
            json!({
                "median_ns": medians,
                "list_page_vs_ls": three_digits(timings.ratio(0, 1)),
                "conversation_page_vs_view_refs": three_digits(timings.ratio(2, 3)),
                "rounds": timings.rounds,
            }),
        );
    }
    let median = |n: usize, name: &str| out[&n.to_string()]["median_ns"][name].as_f64();
    let growth = |name: &str| match (median(SIZES[0], name), median(SIZES[1], name)) {
        (Some(a), Some(b)) if a > 0.0 => json!(three_digits(b / a)),
        _ => Value::Null,
    };
    let list_growth = growth("list page");
    let first_growth = growth("first list page");
    let page_growth = growth("conversation page");
    eprintln!(
        "from {} to {} conversations: list page x{list_growth} (first request x{first_growth}), conversation page x{page_growth}",
        SIZES[0], SIZES[1]
    );
    out.insert(
        "growth_10x_store".into(),
        json!({"list page": list_growth, "first list page": first_growth,
               "conversation page": page_growth,
               "ls": growth("ls"), "view --refs": growth("view --refs")}),
    );
    println!("{}", Value::Object(out));
}

/// A small conversation: a turn with a request and a response.
fn small_conversation(i: u64) -> Vec<Value> {
    let at = |s: u64| {
        format!(
            "2025-07-{:02}T{:02}:{:02}:{:02}Z",
            1 + (i / 1440) % 28,
            (i / 60) % 24,
            i % 60,
            s
        )
    };
    vec![
        json!({"type": "turn_start", "timestamp": at(0)}),
        json!({"type": "chat_request", "timestamp": at(1),
            "content": format!("Task {i}: tidy module {}.", i % 97)}),
        json!({"type": "chat_response", "timestamp": at(2), "message": "Done."}),
    ]
}

/// The first `GET /` of a server just started, on three servers: the
/// median.
fn first_list_page(bin: &Path, store: &Path) -> Duration {
    let mut times: Vec<Duration> = (0..3)
        .map(|_| {
            let server = Server::start(bin, store);
            let took = timed(|| get(server.addr, "/").len());
            drop(server);
            took
        })
        .collect();
    times.sort();
    times[times.len() / 2]
}

fn measure(bin: &Path, store: &Path, server: &Server) -> jpstore_benches::timing::Timings {
    let page = format!("/conversations/{BIG_ID}");
    // Each is checked once before the loop: a page that is an error, or a
    // command that fails, is not measured.
    assert!(get(server.addr, "/").contains("Conversations"));
    assert!(get(server.addr, &page).contains("Turn 0"));
    let mut list_page = || timed(|| get(server.addr, "/").len());
    let mut ls = || timed(|| command(bin, store, &["ls"]));
    let mut conversation_page = || timed(|| get(server.addr, &page).len());
    let mut view_refs = || timed(|| command(bin, store, &["view", BIG_ID, "--refs"]));
    let mut ops: [Op<'_>; 4] = [
        ("list page", &mut list_page),
        ("ls", &mut ls),
        ("conversation page", &mut conversation_page),
        ("view --refs", &mut view_refs),
    ];
    interleaved(10, 200, Duration::from_secs(30), &mut ops)
}

fn timed<T>(f: impl FnOnce() -> T) -> Duration {
    let started = Instant::now();
    std::hint::black_box(f());
    started.elapsed()
}

/// Runs `jp-store --store <store> <args>`, output discarded; panics unless
/// it succeeds.
fn command(bin: &Path, store: &Path, args: &[&str]) {
    let status = Command::new(bin)
        .arg("--store")
        .arg(store)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("running jp-store");
    assert!(status.success(), "jp-store {args:?}: {status}");
}

/// `GET path` over a new connection, `Connection: close`; the body.
fn get(addr: SocketAddr, path: &str) -> String {
    let mut stream = TcpStream::connect(addr).expect("connect to the server");
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .expect("send the request");
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).expect("read the response");
    let text = String::from_utf8_lossy(&raw).into_owned();
    assert!(
        text.starts_with("HTTP/1.1 200"),
        "GET {path}: {}",
        &text[..text.len().min(200)]
    );
    text
}

/// `jp-store serve` on a free loopback port.
struct Server {
    child: Child,
    addr: SocketAddr,
}

impl Server {
    fn start(bin: &Path, store: &Path) -> Server {
        let mut child = Command::new(bin)
            .arg("--store")
            .arg(store)
            .args(["-q", "serve", "--addr", "127.0.0.1:0"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start jp-store serve");
        let mut stdout = child.stdout.take().expect("its standard output");
        let mut line = Vec::new();
        let mut byte = [0u8; 1];
        while stdout.read(&mut byte).is_ok_and(|n| n == 1) && byte[0] != b'\n' {
            line.push(byte[0]);
        }
        let url = String::from_utf8_lossy(&line).into_owned();
        let addr = url
            .strip_prefix("http://")
            .and_then(|r| r.strip_suffix('/'))
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("jp-store serve printed {url:?}"));
        Server { child, addr }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The release `jp-store` beside this bench's executable, built first
/// (`cargo build --release -p jp-store`, a no-op when it is up to date).
fn jp_store_release() -> PathBuf {
    let exe = std::env::current_exe().expect("the bench's path");
    let mut dir = exe.parent().expect("its directory").to_path_buf();
    if dir.ends_with("deps") {
        dir.pop();
    }
    let target = dir.parent().expect("the target directory").to_path_buf();
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.toml");
    let status = Command::new(env!("CARGO"))
        .args([
            "build",
            "--quiet",
            "--release",
            "-p",
            "jp-store",
            "--manifest-path",
        ])
        .arg(&manifest)
        .arg("--target-dir")
        .arg(&target)
        .status()
        .expect("running cargo build");
    assert!(
        status.success(),
        "cargo build --release -p jp-store: {status}"
    );
    target
        .join("release")
        .join(format!("jp-store{}", std::env::consts::EXE_SUFFIX))
}

//! Logs crafted to make their readers work: a damaged tail full of record
//! headers whose checksums match. The search for the next whole record
//! after a bad header (what tells damage from a torn tail, and where gc's
//! tolerant walk resynchronizes) must stay linear in the bytes searched,
//! whatever they hold; the work is counted
//! ([`jpstore_engine::internal::log::search_work`]), not timed. And a long log does
//! not make fsck deaf to SIGTERM while it reads it.

use std::fs;
use std::path::{Path, PathBuf};

use jpstore_engine::conversation::ConversationId;
use jpstore_engine::export::ContentMode;
use jpstore_engine::fsck::FsckOptions;
use jpstore_engine::gc::GcOptions;
use jpstore_engine::{Store, StoreOptions};
use jpstore_tests::{copy_tree, fixture, log_path, run_jp_store, ts};
use serde_json::json;

/// A store holding one conversation of a log of framing `version` (2: made
/// by the binary; 1: the committed store of version 1); its directory,
/// the conversation and its log.
fn store(dir: &Path, version: u16) -> (PathBuf, String, PathBuf) {
    let root = dir.join(format!("store-v{version}"));
    let id = if version == 1 {
        copy_tree(&fixture("store-v1/store"), &root);
        "17738399468".to_string()
    } else {
        run_jp_store(&root, &["init"], b"").ok("init");
        let id = run_jp_store(&root, &["new"], b"")
            .ok("new")
            .trim()
            .to_string();
        let batch = json!([
            {"type": "turn_start", "timestamp": ts(1)},
            {"type": "chat_request", "timestamp": ts(2), "content": "a question"},
            {"type": "chat_response", "timestamp": ts(3), "message": "an answer"}
        ]);
        run_jp_store(&root, &["append", &id], batch.to_string().as_bytes()).ok("append");
        id
    };
    let log = log_path(&root, &id);
    (root, id, log)
}

/// What fills a crafted region after its bad header.
#[derive(Debug, Clone, Copy)]
enum Fill {
    /// Record headers of valid checksums back to back, each claiming a
    /// content that runs to the end of the file, whose checksum does not
    /// match.
    BadContent,
    /// Records nested in each other, each running to the end of the file,
    /// every checksum matching, none of its framing's shape.
    WholeMalformed,
}

/// The CRC-32 of `a` followed by `b`, from the CRC-32 of each.
fn crc_join(a: u32, b: u32, b_len: u64) -> u32 {
    let mut h = crc32fast::Hasher::new_with_initial(a);
    let other = crc32fast::Hasher::new_with_initial_len(b, b_len);
    h.combine(&other);
    h.finalize()
}

/// A record header of framing `version` whose checksum matches, for a
/// content (all heads section in version 2) of `len` bytes whose CRC-32 is
/// `crc`.
fn header(version: u16, len: u32, crc: u32) -> Vec<u8> {
    let mut h = len.to_le_bytes().to_vec();
    if version == 2 {
        h.extend(0u32.to_le_bytes());
        h.extend(crc.to_le_bytes());
        // The CRC-32 of an empty body.
        h.extend(0u32.to_le_bytes());
    } else {
        h.extend(crc.to_le_bytes());
    }
    let own = crc32fast::hash(&h);
    h.extend(own.to_le_bytes());
    h
}

/// `len` bytes to append to a log of framing `version`: a record header
/// whose checksum does not match, then `fill`.
fn crafted_region(version: u16, len: usize, fill: Fill) -> Vec<u8> {
    let h = if version == 2 { 20 } else { 12 };
    let bad = vec![0x5a; h];
    let mut rest = match fill {
        Fill::BadContent => {
            let mut rest = Vec::with_capacity(len);
            while rest.len() + 2 * h <= len {
                let claims = (len - h - rest.len() - h) as u32;
                rest.extend(header(version, claims, 0x1234_5678));
            }
            rest
        }
        Fill::WholeMalformed => {
            // Built from the end, each record wrapping what follows it.
            let mut tail = vec![0x77u8; h];
            let mut crc = crc32fast::hash(&tail);
            let mut headers = Vec::new();
            while headers.len() * h + tail.len() + 2 * h <= len {
                let covered = (headers.len() * h + tail.len()) as u32;
                let next = header(version, covered, crc);
                crc = crc_join(crc32fast::hash(&next), crc, u64::from(covered));
                headers.push(next);
            }
            headers.reverse();
            let mut rest = headers.concat();
            rest.append(&mut tail);
            rest
        }
    };
    rest.resize(len - h, 0x33);
    [bad, rest].concat()
}

/// The bytes the searches of this thread hashed while `f` ran.
fn work(f: impl FnOnce()) -> u64 {
    let before = jpstore_engine::internal::log::search_work().bytes_hashed;
    f();
    jpstore_engine::internal::log::search_work().bytes_hashed - before
}

/// The work of fsck, a view and gc's marking of a log whose tail is a
/// crafted region of `len` bytes.
fn work_on_region(version: u16, len: usize, fill: Fill) -> [u64; 3] {
    let dir = tempfile::tempdir().expect("tempdir");
    let (root, id, log) = store(dir.path(), version);
    let mut bytes = fs::read(&log).expect("read the log");
    bytes.extend(crafted_region(version, len, fill));
    fs::write(&log, &bytes).expect("write the log");
    let store = Store::open_dir(&root, StoreOptions::default()).expect("open");
    let id = ConversationId::parse(&id).expect("id");
    let fsck = work(|| {
        let report =
            jpstore_engine::fsck::run(&store, FsckOptions::default(), &mut |_| {}).expect("fsck");
        assert!(report
            .findings
            .iter()
            .any(|f| matches!(f.kind, "torn-tail" | "damaged-record")));
    });
    let view = work(|| {
        // A torn tail reads as the records before it; damage is an error.
        let _ = store
            .open_view(&id)
            .and_then(|v| v.render(ContentMode::Inline));
    });
    let gc = work(|| {
        let options = GcOptions {
            dry_run: true,
            ..GcOptions::default()
        };
        jpstore_engine::gc::run(&store, options, &mut |_| {}).expect("gc");
    });
    [fsck, view, gc]
}

#[test]
fn the_search_after_a_bad_header_is_linear_in_the_bytes() {
    const LEN: usize = 64 << 10;
    for version in [1, 2] {
        for fill in [Fill::BadContent, Fill::WholeMalformed] {
            let once = work_on_region(version, LEN, fill);
            let twice = work_on_region(version, 2 * LEN, fill);
            for (i, what) in ["fsck", "view", "gc --dry-run"].iter().enumerate() {
                let (w1, w2) = (once[i], twice[i]);
                assert!(
                    w1 > 0 && w1 <= 128 * LEN as u64,
                    "{what} of a log of version {version} with a region of {fill:?}: {w1} bytes hashed for {LEN} bytes"
                );
                assert!(
                    w2 <= 2 * w1 + 4096,
                    "{what} of a log of version {version} with a region of {fill:?}: {w1} bytes hashed for {LEN} bytes, {w2} for twice as many"
                );
            }
        }
    }
}

/// The bytes the process `pid` has read so far (`rchar` of
/// `/proc/<pid>/io`), if it can be told.
#[cfg(target_os = "linux")]
fn bytes_read(pid: u32) -> Option<u64> {
    let io = fs::read_to_string(format!("/proc/{pid}/io")).ok()?;
    io.lines()
        .find_map(|l| l.strip_prefix("rchar: "))
        .and_then(|n| n.trim().parse().ok())
}

/// One SIGTERM while `fsck` reads one long log (its records, then a sparse
/// tail of 4 GiB of zeros: damage that gc's walk, which fsck runs to count
/// what gc keeps, reads to the end): fsck stops with the interrupted status
/// and says so. It looked at the flag only between conversations, so it
/// read the whole log first and reported on it.
#[cfg(target_os = "linux")]
#[test]
fn fsck_stops_at_sigterm_inside_one_long_log() {
    use std::process::{Command, Stdio};
    let dir = tempfile::tempdir().expect("tempdir");
    let (root, _, log) = store(dir.path(), 2);
    let file = fs::OpenOptions::new()
        .write(true)
        .open(&log)
        .expect("open the log");
    let len = file.metadata().expect("stat").len();
    file.set_len(len + (4 << 30)).expect("extend the log");
    drop(file);
    let mut child = Command::new(jpstore_tests::jp_store_bin())
        .arg("--store")
        .arg(&root)
        .arg("fsck")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start fsck");
    // Signalled once it is well inside the log: 256 MiB read.
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            panic!("fsck ended before it read 256 MiB of the log: {status}");
        }
        if bytes_read(child.id()).is_some_and(|n| n >= 256 << 20) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("run kill");
    assert!(killed.success());
    let out = child.wait_with_output().expect("wait for fsck");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(130),
        "fsck signalled inside a long log: {:?}\nstdout: {}\nstderr: {stderr}",
        out.status,
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        stderr.contains("fsck interrupted before the end"),
        "stderr: {stderr}"
    );
}

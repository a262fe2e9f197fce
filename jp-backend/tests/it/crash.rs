//! SIGKILL during JP's persist: a real child process (this test binary run
//! again in its child mode) opens `JpStoreBackend` on a store directory and
//! persists a growing conversation through JP's `PersistBackend::write`,
//! with rewrites of its history (a turn trimmed, a compaction removed) and
//! title changes among the turns. Before each persist it writes the stream
//! it is about to persist (JP's parts, renamed into place); after each
//! acknowledged persist, a line to a side file. The parent kills it at
//! seeded random moments: during the first write of a new conversation,
//! during a rewrite of history, or anywhere. A fresh backend then loads the
//! conversation: by JP's own `PartialEq` it is the last acknowledged stream
//! or the one in flight, never anything else (absent only when no persist
//! was acknowledged), every earlier round's conversation is still what its
//! round left, and the store passes fsck with `--read-data`.

use crate::common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use jp_conversation::{Compaction, Conversation, ConversationId, ConversationStream};
use jp_storage::backend::{LoadBackend, PersistBackend, Projection};
use jpstore_engine::fsck::FsckOptions;
use jpstore_jp::JpStoreBackend;
use serde_json::{json, Value};

const CHILD: &str = "JPSTORE_JP_CRASH_CHILD";

/// A step of a round is a rewrite of history when `step % REWRITE == REWRITE - 1`.
const REWRITE: usize = 4;

fn conversation(round: u64) -> ConversationId {
    common::id(100 + round as i64)
}

/// The title of the conversation at `step` (it changes now and then: a
/// metadata record).
fn title(step: usize) -> String {
    format!("crash test, title {}", step / 5)
}

/// The full name of the test `name` of this module in its test binary
/// (`crash::NAME`: the binary's modules are the files of `tests/it/`), as
/// `--exact` takes it.
fn test_path(name: &str) -> String {
    let module = module_path!()
        .split_once("::")
        .map_or("", |(_crate, module)| module);
    format!("{module}::{name}")
}

/// The child: persists steps until killed (or 400 steps).
#[test]
fn child_mode() {
    let Ok(dir) = std::env::var(CHILD) else {
        return;
    };
    let dir = PathBuf::from(dir);
    let round: u64 = std::env::var("JPSTORE_JP_CRASH_ROUND")
        .expect("the round")
        .parse()
        .expect("a number");
    let backend = JpStoreBackend::open(dir.join("store").to_str().expect("UTF-8")).expect("store");
    let id = conversation(round);
    let mut side = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("acked"))
        .expect("the side file");
    let mut stream =
        ConversationStream::from_parts(common::base_config(), Vec::new()).expect("a stream");
    let mut turn: usize = 0;
    line(&mut side, "ready");
    for step in 0..400 {
        if step % REWRITE == REWRITE - 1 {
            // History changed in place, as JP does: a compaction removed, or
            // the last turn trimmed away.
            if (step / REWRITE) % 2 == 1 || stream.remove_compaction(0).is_none() {
                stream.retain_first_turns(turn.saturating_sub(1));
            }
        } else {
            common::add_turn(&mut stream, turn, &format!("r{round}"));
            turn += 1;
            if step % REWRITE == 1 {
                let mut c = Compaction::new(0, turn.saturating_sub(1));
                c.reasoning = Some(jp_conversation::compaction::ReasoningPolicy::Strip);
                stream.add_compaction(c);
            }
        }
        let meta = Conversation {
            title: Some(title(step)),
            ..Default::default()
        };
        let (base, events) = stream.to_parts().expect("parts");
        let pending = dir.join(format!("step-{step}.json"));
        let tmp = dir.join("step.tmp");
        std::fs::write(
            &tmp,
            serde_json::to_vec(&json!({"base": base, "events": events})).expect("json"),
        )
        .expect("pending");
        std::fs::rename(&tmp, &pending).expect("pending");
        line(&mut side, &format!("pending {step}"));
        backend
            .write(&id, &meta, &stream, Projection::Projected)
            .expect("a persist");
        line(&mut side, &format!("acked {step}"));
    }
}

/// Appends `text` and a line break to the side file in one `write`.
fn line(side: &mut std::fs::File, text: &str) {
    side.write_all(format!("{text}\n").as_bytes())
        .expect("side file");
}

/// How a round kills its child.
#[derive(Debug, Clone, Copy)]
enum Moment {
    /// Within the first write of the new conversation.
    FirstWrite,
    /// Within a write that rewrites the history (from the `n`-th on).
    Rewrite(usize),
    /// Anywhere, `ms` after the child is ready.
    Anywhere(u64),
}

/// The side file's lines.
fn side(dir: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(dir.join("acked")).unwrap_or_default();
    // A line the kill cut short has no line break yet: not written.
    let whole = match text.rfind('\n') {
        Some(end) => &text[..=end],
        None => "",
    };
    whole.lines().map(str::to_owned).collect()
}

fn last(lines: &[String], what: &str) -> Option<usize> {
    lines
        .iter()
        .rev()
        .find_map(|l| l.strip_prefix(what)?.trim().parse().ok())
}

fn wait_for(child: &mut Child, dir: &Path, until: impl Fn(&[String]) -> bool) {
    let start = Instant::now();
    loop {
        if until(&side(dir)) {
            return;
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!("the child ended before it was killed: {status}");
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "the child made no progress"
        );
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// The stream of step `step` as the child wrote it before persisting it.
fn stream_of(dir: &Path, id: &ConversationId, step: usize) -> Option<ConversationStream> {
    let bytes = std::fs::read(dir.join(format!("step-{step}.json"))).ok()?;
    let v: Value = serde_json::from_slice(&bytes).expect("whole: written by rename");
    let events = v["events"].as_array().expect("events").clone();
    Some(
        ConversationStream::from_parts(v["base"].clone(), events)
            .expect("JP reads it")
            .with_created_at(id.timestamp()),
    )
}

#[test]
fn sigkill_during_persist_leaves_the_previous_or_the_new_state() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let store = tmp.path().join("store");
    let mut rng = 0x5eed_u64;
    let mut next = |n: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % n
    };
    let rounds = 18u64;
    let mut kept: Vec<(ConversationId, Option<ConversationStream>)> = Vec::new();
    let (mut absent, mut previous, mut in_flight, mut rewrites) = (0, 0, 0, 0);
    for round in 0..rounds {
        let dir = tmp.path().join(format!("round-{round}"));
        std::fs::create_dir_all(&dir).expect("round dir");
        std::fs::create_dir_all(&store).expect("store dir");
        // The store directory is shared by every round.
        std::os::unix::fs::symlink(&store, dir.join("store")).expect("link");
        let moment = match round % 3 {
            0 => Moment::FirstWrite,
            1 => Moment::Rewrite(1 + next(6) as usize),
            _ => Moment::Anywhere(next(400)),
        };
        let mut child = Command::new(std::env::current_exe().expect("this binary"))
            .args([
                "--exact",
                &test_path("child_mode"),
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD, &dir)
            .env("JPSTORE_JP_CRASH_ROUND", round.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("the child");
        match moment {
            Moment::FirstWrite => {
                wait_for(&mut child, &dir, |l| last(l, "pending ").is_some());
                std::thread::sleep(Duration::from_micros(next(40_000)));
            }
            Moment::Rewrite(n) => {
                let step = n * REWRITE - 1;
                wait_for(&mut child, &dir, |l| last(l, "pending ") == Some(step));
                std::thread::sleep(Duration::from_micros(next(15_000)));
            }
            Moment::Anywhere(ms) => {
                wait_for(&mut child, &dir, |l| l.iter().any(|l| l == "ready"));
                std::thread::sleep(Duration::from_millis(ms));
            }
        }
        child.kill().expect("SIGKILL");
        child.wait().expect("reaped");

        let lines = side(&dir);
        let acked = last(&lines, "acked ");
        let pending = last(&lines, "pending ").filter(|p| Some(*p) != acked);
        let id = conversation(round);
        let backend = JpStoreBackend::open(store.to_str().expect("UTF-8")).expect("store");
        let loaded = backend.load_conversation_stream(&id).ok();
        let acked_stream = acked.map(|s| stream_of(&dir, &id, s).expect("the acknowledged step"));
        let flight_stream = pending.and_then(|s| stream_of(&dir, &id, s));
        let outcome = match (&loaded, &acked_stream, &flight_stream) {
            (None, None, _) => "absent",
            (Some(l), Some(a), _) if l == a => "previous",
            (Some(l), _, Some(f)) if l == f => "in flight",
            _ => panic!(
                "round {round} ({moment:?}): the store holds {} events; acknowledged step {acked:?} ({:?} events), in flight {pending:?} ({:?} events)",
                loaded.as_ref().map_or(0, ConversationStream::len),
                acked_stream.as_ref().map(ConversationStream::len),
                flight_stream.as_ref().map(ConversationStream::len),
            ),
        };
        match outcome {
            "absent" => absent += 1,
            "previous" => previous += 1,
            _ => in_flight += 1,
        }
        if loaded.is_some() {
            // The metadata that changed is in the events' record: the title
            // is the one of the step whose events are there, never a mix.
            let meta = backend.load_conversation_metadata(&id).expect("metadata");
            let step = if outcome == "previous" {
                acked
            } else {
                pending
            };
            assert_eq!(
                meta.title,
                step.map(title),
                "round {round}: the title of step {step:?}, whose events are there"
            );
        }
        let rewriting = pending.is_some_and(|p| p % REWRITE == REWRITE - 1);
        if rewriting {
            rewrites += 1;
        }
        eprintln!(
            "round {round} ({moment:?}): acknowledged {acked:?}, in flight {pending:?} (a rewrite: {rewriting}): {outcome}"
        );
        kept.push((id, loaded));
        // Every earlier round's conversation is as its round left it.
        for (id, stream) in &kept {
            assert_eq!(
                &backend.load_conversation_stream(id).ok(),
                stream,
                "conversation {id} changed after its round"
            );
        }
        let report = jpstore_engine::fsck::run(
            backend.store(),
            FsckOptions {
                read_data: true,
                repair: false,
            },
            &mut |_| {},
        )
        .expect("fsck runs");
        assert!(
            report.is_clean(),
            "round {round}: fsck finds damage: {:?}",
            report.findings
        );
    }
    eprintln!("{rounds} rounds: {absent} absent, {previous} previous, {in_flight} in flight; {rewrites} killed while a rewrite was in flight");
    assert!(previous + in_flight > 0);
}

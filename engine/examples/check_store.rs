//! Checking a store with fsck, and repairing it.
//!
//! ```sh
//! cargo run -p jpstore-engine --example check_store              # a demonstration on a temporary store
//! cargo run -p jpstore-engine --example check_store -- STORE     # check the store in STORE (no repair)
//! ```
//!
//! Given a store, the program checks it (every log and every blob's bytes)
//! and prints what it finds; it exits with status 1 if there is damage, and
//! never repairs (`jp-store fsck --repair` does).
//!
//! Without an argument, it makes a store of three conversations, does to
//! two of them what a crash and a bad disk do (an append cut short at the
//! end of one log; one flipped byte in another), and shows fsck finding
//! both, `repair` moving the damage aside (into `quarantine/`: nothing is
//! deleted), and fsck finding the store clean afterwards. `cargo test` runs this demonstration (see the test at the
//! end).

use std::collections::HashMap;
use std::error::Error;
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use jpstore_engine::conversation::ConversationId;
use jpstore_engine::event::{
    ChatRequest, ChatResponse, Entry, EventKind, Object, Payload, ToolCallRequest, ToolCallResponse,
};
use jpstore_engine::fsck::{FsckOptions, FsckProgress, FsckReport};
use jpstore_engine::timestamp::Timestamp;
use jpstore_engine::{NewConversation, Store, StoreOptions};

/// What the demonstration found and did (`main` prints it; the test checks
/// it).
#[derive(Debug)]
pub struct Summary {
    /// The kinds of the findings of the first check (`torn-tail`,
    /// `damaged-record`, ...), in order.
    pub found: Vec<&'static str>,
    /// What the repair did, one line each.
    pub repairs: Vec<String>,
    /// Whether the check after the repair found nothing at all.
    pub clean_after_repair: bool,
    /// The conversations left in the store.
    pub conversations: Vec<ConversationId>,
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let after = if self.clean_after_repair {
            "clean"
        } else {
            "not clean"
        };
        write!(
            f,
            "found {}; {} repairs; then {after}, with {} conversations",
            self.found.join(", "),
            self.repairs.len(),
            self.conversations.len()
        )
    }
}

/// Runs fsck on `store` with `options` and prints what it finds and does.
pub fn check(
    store: &Store,
    options: FsckOptions,
    out: &mut dyn Write,
) -> Result<FsckReport, Box<dyn Error>> {
    // Progress comes as conversations checked, then blob bytes read; a
    // command line would draw a bar. (`Store::fsck_interruptible` also
    // takes a flag a Ctrl-C handler sets, to stop between steps.)
    let mut progress = |_: FsckProgress| {};
    let report = jpstore_engine::fsck::run(store, options, &mut progress)?;
    writeln!(
        out,
        "checked {} conversations ({} records, {} entries), {} blob references, {} blobs read ({} bytes)",
        report.conversations,
        report.records,
        report.entries,
        report.references,
        report.blobs_read,
        report.bytes_read
    )?;
    for finding in &report.findings {
        // Each finding says how bad it is, what kind it is, where (the
        // conversation, the file and the offset in it) and why.
        let place = match (&finding.path, finding.offset) {
            (Some(path), Some(offset)) => format!(" {} at offset {offset}", path.display()),
            (Some(path), None) => format!(" {}", path.display()),
            _ => String::new(),
        };
        writeln!(
            out,
            "  {} {}{place}: {}",
            finding.severity, finding.kind, finding.message
        )?;
    }
    // `is_clean`: nothing worse than a warning (a torn tail is one: what a
    // crash leaves, which the next append cuts).
    let verdict = if report.is_clean() {
        "no damage found"
    } else {
        "DAMAGE found"
    };
    writeln!(out, "  {verdict}")?;
    for repair in &report.repairs {
        writeln!(out, "  repaired: {repair}")?;
    }
    Ok(report)
}

/// The demonstration, on a store made in `dir` (which must be new or
/// empty).
pub fn demonstrate(dir: &Path, out: &mut dyn Write) -> Result<Summary, Box<dyn Error>> {
    let (store, created) = Store::init_new_dir(dir, StoreOptions::default())?;
    if !created {
        let why =
            "the demonstration damages the store it makes, so it needs a new or empty directory";
        return Err(format!("{} is a store already: {why}", dir.display()).into());
    }
    // Three conversations of a turn or two, each with a tool's output (in
    // the blob store, referenced from the log).
    // Where each record starts in its log (the log's length before the
    // append), for the damage done below. The layout of a store is in
    // format-spec.md 4.1: `conversations/<id>/events.log`.
    let log_of = |name: &str| dir.join("conversations").join(name).join("events.log");
    let mut records: HashMap<&str, Vec<usize>> = HashMap::new();
    for (name, turns) in [("kept", 1), ("crashed", 2), ("damaged", 1)] {
        let id = ConversationId::parse(name)?;
        let mut conversation = store.create(NewConversation {
            id: Some(id),
            ..Default::default()
        })?;
        for turn in 0..turns {
            let now = Timestamp::now();
            let call = format!("ls{turn}");
            let events: Vec<Entry<Payload>> = vec![
                Entry::at(now, EventKind::TurnStart),
                Entry::at(
                    now,
                    ChatRequest::text(format!("list the files ({name}, {turn})")),
                ),
                Entry::at(now, ToolCallRequest::new(&call, "ls", Object::new())?),
                Entry::at(
                    now,
                    ToolCallResponse::text(&call, "Cargo.toml\nsrc/\nREADME.md"),
                ),
                Entry::at(now, ChatResponse::message("Three entries.")),
            ];
            // The durable write alone (one record, one fdatasync);
            // `append_turn` adds the automatic compaction a conversation's
            // settings may ask for.
            let start = std::fs::metadata(log_of(name))?.len();
            records
                .entry(name)
                .or_default()
                .push(usize::try_from(start)?);
            conversation.append(events)?;
        }
        // Closing writes the head cache, the proof that these records were
        // whole (format-spec.md 4.6): with it, fsck tells a byte flipped in
        // the last record from an append a crash cut short. A handle
        // dropped without closing writes nothing.
        conversation.close();
    }
    writeln!(
        out,
        "made a store of three conversations in {}",
        dir.display()
    )?;
    let everything = FsckOptions {
        read_data: true,
        repair: false,
    };
    check(&store, everything, out)?;

    // A crash in the middle of an append: the first half of a record at the
    // end of the log, after the last whole one. (The demonstration reaches
    // into the store's files; the layout is in format-spec.md.)
    let log = log_of("crashed");
    let bytes = std::fs::read(&log)?;
    let last_record = records["crashed"].last().copied().unwrap_or(0);
    let record = bytes
        .get(last_record..)
        .ok_or("the log is shorter than read")?;
    let mut torn = bytes.clone();
    torn.extend_from_slice(&record[..record.len() / 2]);
    std::fs::write(&log, torn)?;
    // A bad disk: one byte in the middle of the (one) record of a turn
    // changed.
    let log = log_of("damaged");
    let mut bytes = std::fs::read(&log)?;
    let record = records["damaged"].first().copied().unwrap_or(0);
    let middle = (record + bytes.len()) / 2;
    *bytes
        .get_mut(middle)
        .ok_or("the log is shorter than read")? ^= 0x20;
    std::fs::write(&log, bytes)?;
    writeln!(
        out,
        "cut an append short in `crashed`, flipped a byte in `damaged`"
    )?;

    let found = check(&store, everything, out)?;
    // Repair never deletes: a torn tail is copied into `quarantine/` and
    // cut; a damaged log is moved there whole, with a note of why, and the
    // conversation stays in the store with its whole records before the
    // damage.
    let repaired = check(
        &store,
        FsckOptions {
            read_data: true,
            repair: true,
        },
        out,
    )?;
    let after = check(&store, everything, out)?;
    Ok(Summary {
        found: found.findings.iter().map(|f| f.kind).collect(),
        repairs: repaired.repairs,
        clean_after_repair: after.findings.is_empty(),
        conversations: store.ids()?,
    })
}

fn main() -> ExitCode {
    let stdout = &mut std::io::stdout().lock();
    match std::env::args_os().nth(1) {
        // A store of the user's: checked, not repaired.
        Some(dir) => {
            let checked = Store::open_dir(Path::new(&dir), StoreOptions::default())
                .map_err(Box::<dyn Error>::from)
                .and_then(|store| {
                    let options = FsckOptions {
                        read_data: true,
                        repair: false,
                    };
                    check(&store, options, stdout)
                });
            match checked {
                Ok(report) if report.is_clean() => ExitCode::SUCCESS,
                Ok(_) => ExitCode::from(1),
                Err(e) => fail(&*e),
            }
        }
        // The demonstration, on a temporary directory (removed when the
        // program ends).
        None => {
            let demonstrated = tempfile::tempdir()
                .map_err(Box::<dyn Error>::from)
                .and_then(|temporary| demonstrate(&temporary.path().join("store"), stdout));
            match demonstrated {
                Ok(summary) => {
                    println!("{summary}");
                    ExitCode::SUCCESS
                }
                Err(e) => fail(&*e),
            }
        }
    }
}

/// Prints `e` and what caused it; the exit status of a failure.
fn fail(e: &dyn Error) -> ExitCode {
    eprintln!("check_store: {e}");
    let mut cause = e.source();
    while let Some(c) = cause {
        eprintln!("  caused by: {c}");
        cause = c.source();
    }
    ExitCode::FAILURE
}

// `cargo test` builds this example with the test harness (`test = true` in
// Cargo.toml) and runs these tests, which run the same functions as `main`.
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fsck_finds_a_torn_tail_and_a_flipped_byte_and_repair_leaves_a_clean_store() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut printed = Vec::new();
        let summary = demonstrate(&dir.path().join("store"), &mut printed).expect("demonstrate");
        let printed = String::from_utf8(printed).expect("UTF-8");

        assert_eq!(summary.found, ["torn-tail", "damaged-record"], "{printed}");
        // The tail cut; the damaged log moved into quarantine/; its whole
        // records before the damage kept in the store.
        assert_eq!(summary.repairs.len(), 3, "{printed}");
        assert!(summary.clean_after_repair, "{printed}");
        let left: Vec<&str> = summary.conversations.iter().map(|id| id.as_str()).collect();
        assert_eq!(left, ["crashed", "damaged", "kept"], "{printed}");
        assert!(printed.contains("DAMAGE found"), "{printed}");
        assert!(summary.to_string().contains("then clean"), "{summary}");
    }

    #[test]
    fn the_demonstration_refuses_a_store_that_exists() {
        let dir = tempfile::tempdir().expect("tempdir");
        Store::init_dir(dir.path(), StoreOptions::default()).expect("init");
        let e = demonstrate(dir.path(), &mut Vec::new()).expect_err("a store already");
        assert!(e.to_string().contains("is a store already"), "{e}");
    }
}

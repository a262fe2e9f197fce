//! Attaching a directory to a conversation: its files become the resources
//! of one request (one pack of blobs, one append), the way `jp-store
//! attach` does it; then, after one file changes, the directory is attached
//! again: only the changed file is stored anew, and the view the model is
//! sent replaces the unchanged files, which it has been given already, by
//! short references to them.
//!
//! ```sh
//! cargo run -p jpstore-integrations --example attach_directory                # a sample directory, a temporary store
//! cargo run -p jpstore-integrations --example attach_directory -- DIR         # DIR, a temporary store
//! cargo run -p jpstore-integrations --example attach_directory -- DIR STORE   # DIR, the store in STORE
//! ```
//!
//! `cargo test` runs this program's [`run`] on the sample directory (see the
//! test at the end).

use std::error::Error;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use jpstore_engine::compaction::no_summarizer;
use jpstore_engine::conversation::ConversationId;
use jpstore_engine::event::{ChatResponse, Entry};
use jpstore_engine::{NewConversation, Store, StoreOptions};
use jpstore_integrations::attach::{attach, collect, AttachOutcome, Links};
use jpstore_integrations::provider::{provider_request_view, Provider};

/// What the program did (`main` prints it; the test checks it).
#[derive(Debug)]
pub struct Summary {
    /// The conversation the files were attached to.
    pub conversation: ConversationId,
    /// The names of the files attached, relative to the directory.
    pub attached: Vec<String>,
    /// Paths the walk found but did not attach, with the reason.
    pub skipped: Vec<(PathBuf, String)>,
    /// Blobs stored by the first attach and by the second.
    pub new_blobs: (usize, usize),
    /// Resources of the second request that the view replaced by a
    /// reference to their first delivery.
    pub replaced: u64,
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "conversation {}: {} files attached twice ({} skipped); {} blobs stored, then {}; {} resources sent as references the second time",
            self.conversation,
            self.attached.len(),
            self.skipped.len(),
            self.new_blobs.0,
            self.new_blobs.1,
            self.replaced
        )
    }
}

/// Attaches `tree` to a new conversation of the store in `store_dir` (made
/// if new or empty), changes `changed` (a file of `tree`, which is
/// rewritten) and attaches `tree` again. Writes what it does to `out`.
pub fn run(
    tree: &Path,
    changed: Option<&Path>,
    store_dir: &Path,
    out: &mut dyn Write,
) -> Result<Summary, Box<dyn Error>> {
    let (store, _created) = Store::init_new_dir(store_dir, StoreOptions::default())?;
    let conversation = store.create(NewConversation {
        title: Some(format!("review of {}", tree.display())),
        ..Default::default()
    })?;
    let id = conversation.id().clone();
    // The handle holds the conversation's lock, which `attach` takes: it
    // is closed first.
    conversation.close();

    // Which files: the paths given (here `.`) are taken from the directory
    // the user is in (the second argument, absolute), which the files'
    // names are relative to. A directory is walked honouring `.gitignore`,
    // hidden files are skipped, and a symbolic link leading out of the
    // directory is skipped and reported (a tree does not get to send other
    // files of the machine to a model).
    let tree = std::path::absolute(tree)?;
    let (files, skipped) = collect(&[PathBuf::from(".")], &tree, Links::StayInside);
    for (path, why) in &skipped {
        writeln!(out, "skipped {}: {why}", path.display())?;
    }
    let attached: Vec<String> = files.iter().map(|f| f.name.clone()).collect();
    writeln!(out, "attaching {}", attached.join(", "))?;

    // One request whose resources are the files: their content is stored
    // as one pack (text and binary alike; the MIME type comes from the
    // name, text or binary from the bytes), then one record is appended.
    // With `strict: false`, a file that cannot be read is skipped and
    // reported in the outcome instead of failing the attach.
    let first = attach(
        &store,
        &id,
        &files,
        Some("Review this project.".into()),
        false,
        &mut |_progress| {},
    )?;
    report(&first, out)?;

    // The model answers (canned here), and the user edits a file.
    let answer = Entry::now(ChatResponse::message(
        "The project builds; the README is out of date.",
    ));
    let mut conversation = store.conversation(&id)?;
    conversation.append_turn([answer], &mut no_summarizer)?;
    conversation.close();
    if let Some(changed) = changed {
        let mut text = std::fs::read_to_string(changed)?;
        text.push_str("\nUpdated after the review.\n");
        std::fs::write(changed, text)?;
    }

    // The same directory again: content is addressed by its SHA-256, so
    // only what changed is stored.
    let second = attach(
        &store,
        &id,
        &files,
        Some("I updated it; review it again.".into()),
        false,
        &mut |_progress| {},
    )?;
    report(&second, out)?;

    // What the model is sent: resources it was given in full earlier (same
    // URI, same content) are sent as a short reference to that delivery
    // (`conversation.deduplication`, on by default), so the second request
    // costs only what changed.
    let replaced = jpstore_engine::stats::of_conversation(&store, &id)?
        .context
        .replaced;
    let body = provider_request_view(&store, store.open_view(&id)?, Provider::Anthropic)?;
    writeln!(
        out,
        "the Anthropic request body has {} messages and {} bytes; {replaced} resources of the second request are references",
        body["messages"].as_array().map_or(0, Vec::len),
        serde_json::to_string(&body)?.len(),
    )?;

    Ok(Summary {
        conversation: id,
        attached,
        skipped: skipped
            .into_iter()
            .map(|(path, e)| (path, e.to_string()))
            .collect(),
        new_blobs: (first.new_blobs, second.new_blobs),
        replaced,
    })
}

/// Prints what an attach did.
fn report(outcome: &AttachOutcome, out: &mut dyn Write) -> std::io::Result<()> {
    let pack = match &outcome.pack {
        Some(pack) => format!(", in pack {pack}"),
        None => String::new(),
    };
    writeln!(
        out,
        "turn {}: attached {} files ({} text), {} bytes; new blobs: {}{pack}",
        outcome.turn, outcome.files, outcome.text_files, outcome.bytes, outcome.new_blobs,
    )
}

/// A small project to attach: text, a binary file, a hidden file, a
/// directory `.gitignore` excludes and, on Unix, a link leading out of the
/// tree. Returns the file that the program changes between the attaches.
fn sample_tree(root: &Path) -> std::io::Result<PathBuf> {
    std::fs::create_dir_all(root.join("src"))?;
    std::fs::create_dir_all(root.join("target/debug"))?;
    std::fs::write(root.join(".gitignore"), "target/\n")?;
    std::fs::write(root.join(".env"), "API_KEY=not-for-the-model\n")?;
    std::fs::write(root.join("target/debug/app"), b"\x7fELF build output")?;
    std::fs::write(
        root.join("README.md"),
        "# sample\n\nA counter, incremented from the command line.\n",
    )?;
    let mut main_rs = String::from("fn main() {\n    let mut counter = 0u64;\n");
    for i in 0..20 {
        main_rs.push_str(&format!("    counter += {i}; // step {i}\n"));
    }
    main_rs.push_str("    println!(\"{counter}\");\n}\n");
    std::fs::write(root.join("src/main.rs"), main_rs)?;
    // The first bytes of a PNG image: binary, sent as an image.
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    png.extend((0..=255u8).cycle().take(600));
    std::fs::write(root.join("logo.png"), png)?;
    #[cfg(unix)]
    std::os::unix::fs::symlink("/etc/passwd", root.join("passwd"))?;
    Ok(root.join("README.md"))
}

fn main() -> ExitCode {
    let args: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    // Temporary directories (removed when the program ends) for what the
    // arguments do not name.
    let temporary = match tempfile::tempdir() {
        Ok(t) => t,
        Err(e) => return fail(&e),
    };
    let (tree, changed) = match args.first() {
        // A directory of the user's is attached twice, and left unchanged.
        Some(dir) => (dir.clone(), None),
        None => {
            let tree = temporary.path().join("sample");
            match sample_tree(&tree) {
                Ok(changed) => (tree, Some(changed)),
                Err(e) => return fail(&e),
            }
        }
    };
    let store_dir = match args.get(1) {
        Some(dir) => dir.clone(),
        None => temporary.path().join("store"),
    };
    match run(
        &tree,
        changed.as_deref(),
        &store_dir,
        &mut std::io::stdout().lock(),
    ) {
        Ok(summary) => {
            println!("{summary}");
            ExitCode::SUCCESS
        }
        Err(e) => fail(&*e),
    }
}

/// Prints `e` and what caused it; the exit status of a failure.
fn fail(e: &dyn Error) -> ExitCode {
    eprintln!("attach_directory: {e}");
    let mut cause = e.source();
    while let Some(c) = cause {
        eprintln!("  caused by: {c}");
        cause = c.source();
    }
    ExitCode::FAILURE
}

// `cargo test` builds this example with the test harness (`test = true` in
// Cargo.toml) and runs this test, which runs the same `run` as `main`.
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_is_attached_and_again_only_what_changed_is_stored() {
        let dir = tempfile::tempdir().expect("tempdir");
        let tree = dir.path().join("sample");
        let changed = sample_tree(&tree).expect("sample tree");
        let mut printed = Vec::new();
        let summary = run(
            &tree,
            Some(&changed),
            &dir.path().join("store"),
            &mut printed,
        )
        .expect("run");
        let printed = String::from_utf8(printed).expect("UTF-8");

        // Hidden files (`.env`, `.gitignore`) and what `.gitignore`
        // excludes (`target/`) are left out;
        // the link out of the tree is found and refused.
        assert_eq!(
            summary.attached,
            ["README.md", "logo.png", "src/main.rs"],
            "{printed}"
        );
        if cfg!(unix) {
            assert_eq!(summary.skipped.len(), 1, "{printed}");
            assert!(summary.skipped[0].0.ends_with("passwd"), "{summary:?}");
        }
        // Every file once, then only the changed README.
        assert_eq!(summary.new_blobs, (3, 1), "{printed}");
        // The unchanged files big enough to be worth it (more than 300
        // bytes: src/main.rs and logo.png) are sent as references.
        assert_eq!(summary.replaced, 2, "{printed}");
        assert!(summary.to_string().contains("3 files attached twice"));
    }
}

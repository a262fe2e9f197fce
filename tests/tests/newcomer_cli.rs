//! What a newcomer trips on, through the binary: wording of results and
//! errors, refusals of input that would do harm quietly (an empty summary,
//! a misspelt entry type), the modes of exported files, the help text, the
//! demonstration run twice, progress units.

use std::path::{Path, PathBuf};

use jpstore_tests::{jp_store_bin, run_jp_store, run_jp_store_in, Run};

struct S {
    dir: tempfile::TempDir,
    root: PathBuf,
}

impl S {
    fn new() -> S {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("store");
        let s = S { dir, root };
        s.run(&["init"], b"").ok("init");
        s
    }
    fn work(&self) -> &Path {
        self.dir.path()
    }
    fn run(&self, args: &[&str], stdin: &[u8]) -> Run {
        run_jp_store(&self.root, args, stdin)
    }
    /// A new conversation with `turns` turns of a question and an answer.
    fn conversation(&self, turns: usize) -> String {
        let id = self.run(&["new"], b"").ok("new").trim().to_string();
        for i in 0..turns {
            let turn = format!(
                "{{\"type\":\"turn_start\"}}\n{{\"type\":\"chat_request\",\"content\":\"q{i}\"}}\n{{\"type\":\"chat_response\",\"message\":\"a{i}\"}}"
            );
            self.run(&["append", &id], turn.as_bytes()).ok("append");
        }
        id
    }
}

/// `jp-store ARGS` with no `--store` (help, demo, man), in `cwd`.
#[allow(dead_code)]
fn jp_store_in(cwd: &Path, args: &[&str]) -> Run {
    let out = jpstore_tests::output_of(
        std::process::Command::new(jp_store_bin())
            .current_dir(cwd)
            .args(args)
            .env_remove("JP_STORE_DIR"),
        b"",
    );
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

#[test]
fn an_empty_summary_is_refused_and_nothing_is_compacted() {
    let s = S::new();
    let id = s.conversation(3);
    let log = jpstore_tests::log_path(&s.root, &id);
    let before = std::fs::read(&log).expect("log");
    for summary in ["", "  \n"] {
        let out = s.run(&["compact", &id, "--summary", summary], b"");
        out.expect_code(1, "compact --summary ''");
        assert!(out.stderr.contains("--summary is empty"), "{}", out.stderr);
        assert!(
            out.stderr.contains("nothing was compacted"),
            "{}",
            out.stderr
        );
    }
    std::fs::write(s.work().join("empty.txt"), "").expect("write");
    let out = run_jp_store_in(
        &s.root,
        Some(s.work()),
        &["compact", &id, "--summary-file", "empty.txt"],
        b"",
    );
    out.expect_code(1, "compact --summary-file empty.txt");
    assert!(
        out.stderr.contains("empty.txt holds empty"),
        "{}",
        out.stderr
    );
    assert_eq!(
        std::fs::read(&log).expect("log"),
        before,
        "the log is unchanged"
    );
    let view = s.run(&["view", &id], b"").json("view").to_string();
    assert!(view.contains("q0") && view.contains("a2"), "{view}");
}

#[test]
fn view_refs_says_it_replaces_text_too_and_does() {
    let s = S::new();
    let id = s.conversation(1);
    let view = s.run(&["view", &id, "--refs"], b"").json("view --refs");
    assert_eq!(view[1]["content"]["$text"], "1/content", "{view}");
    assert_eq!(view[2]["message"]["$text"], "2/message", "{view}");
    let help = s.run(&["view", "--help"], b"");
    let help = help.ok("view --help");
    assert!(
        help.contains("{\"$text\": \"<entry>/<field>\", \"size\": N}"),
        "{help}"
    );
    assert!(help.contains("{\"$blob\""), "{help}");
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md"))
            .expect("README");
    assert!(
        readme.contains("`view ID --refs` reads no blob and no entry's text"),
        "README"
    );
}

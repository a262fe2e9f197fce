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
        out.expect_code(2, "compact --summary '' (bad usage)");
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

/// A JP conversation directory of one turn in `dir`.
fn jp_conversation(dir: &Path) {
    std::fs::create_dir_all(dir).expect("mkdir");
    std::fs::write(
        dir.join("events.json"),
        r#"[
  {
    "type": "turn_start",
    "timestamp": "2026-05-29 10:00:00.0"
  },
  {
    "type": "chat_request",
    "timestamp": "2026-05-29 10:00:01.0",
    "content": "question"
  }
]"#,
    )
    .expect("write");
    std::fs::write(
        dir.join("metadata.json"),
        r#"{"title": "T", "last_activated_at": "2026-05-29 10:00:01.0"}"#,
    )
    .expect("write");
}

#[test]
fn counts_of_one_are_singular() {
    let s = S::new();
    jp_conversation(&s.work().join("ws/.jp/conversations/17738399468-t"));
    let ws = s.work().join("ws");
    let out = s.run(&["import", ws.to_str().expect("UTF-8")], b"");
    let out = out.ok("import");
    assert!(
        out.starts_with("imported 1 conversation (2 events)"),
        "{out}"
    );
    assert!(!out.contains("(s)"), "{out}");

    let id = s.run(&["new"], b"").ok("new").trim().to_string();
    let turn = br#"{"type":"turn_start"}
{"type":"chat_request","content":"read it"}
{"type":"tool_call_request","id":"c1","name":"fs_read_file","arguments":{}}
{"type":"tool_call_response","id":"c1","content":"the file's text","is_error":false}
"#;
    let out = s.run(&["append", &id], turn);
    let out = out.ok("append");
    assert!(
        out.starts_with(&format!(
            "appended 4 entries to {id} (1 payload, 1 new blob of "
        )),
        "{out}"
    );

    std::fs::write(s.work().join("one.txt"), "one file\n").expect("write");
    let out = run_jp_store_in(&s.root, Some(s.work()), &["attach", &id, "one.txt"], b"");
    let out = out.ok("attach");
    assert!(out.starts_with("attached 1 file ("), "{out}");
    assert!(out.contains(": 1 new blob, pack"), "{out}");

    let out = s.run(&["fsck"], b"");
    let out = out.ok("fsck");
    assert!(out.starts_with("checked 2 conversations ("), "{out}");
}

#[test]
fn the_tool_and_clap_write_errors_in_one_form_and_bad_usage_exits_2() {
    let s = S::new();
    let id = s.conversation(1);
    // Found by clap and by the tool: one prefix.
    for (args, code) in [
        (&["ls", "--bogus"][..], 2),
        (&["print", "no-such-conversation"][..], 1),
        (&["no-such-command"][..], 2),
    ] {
        let out = s.run(args, b"");
        out.expect_code(code, &format!("{args:?}"));
        assert!(
            out.stderr.starts_with("jp-store: error: "),
            "{args:?}: {}",
            out.stderr
        );
        assert!(!out.stderr.contains("\nerror:"), "{args:?}: {}", out.stderr);
    }
    // An id that cannot be one is bad usage, whatever the command.
    for args in [
        &["print", "a/b"][..],
        &["rm", "../x"][..],
        &["view", ""][..],
        &["fork", &id, "--id", "x.y"][..],
        &["export", "..", "--format", "jp"][..],
        &["copy", "a", "b", "no/pe"][..],
        &["blob", "cat", "xyz"][..],
    ] {
        let out = s.run(args, b"");
        out.expect_code(2, &format!("{args:?}"));
        assert!(
            out.stderr.starts_with("jp-store: error: invalid value"),
            "{args:?}: {}",
            out.stderr
        );
    }
    // A flag that does not apply is bad usage too.
    let out = s.run(&["export", &id, "--format", "jp", "--refs"], b"");
    out.expect_code(2, "export --format jp --refs");
    // The README's table says so.
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md"))
            .expect("README");
    assert!(
        readme.contains("| 2 | bad usage"),
        "README: exit status table"
    );
}

#[test]
fn usage_errors_say_what_a_valid_value_is() {
    let s = S::new();
    let id = s.conversation(2);
    let out = s.run(&["fork", &id, "--last", "0"], b"");
    out.expect_code(2, "fork --last 0");
    assert!(
        out.stderr.contains("--last 0 would fork no turn") && !out.stderr.contains("range"),
        "{}",
        out.stderr
    );
    let out = s.run(&["gc", "--grace", "banana"], b"");
    out.expect_code(2, "gc --grace banana");
    assert!(
        out.stderr.contains("\"banana\" is not a duration") && out.stderr.contains("`30m`"),
        "{}",
        out.stderr
    );
    assert!(!out.stderr.contains("expected number"), "{}", out.stderr);
    std::fs::create_dir_all(s.work().join("src")).expect("mkdir");
    std::fs::write(s.work().join("src/main.rs"), "fn main() {}\n").expect("write");
    let out = run_jp_store_in(&s.root, Some(s.work()), &["resolve", "src/main.rs"], b"");
    out.expect_code(2, "resolve src/main.rs");
    let uri = format!(
        "file://{}",
        std::fs::canonicalize(s.work())
            .expect("canonical")
            .join("src/main.rs")
            .display()
    );
    assert!(
        out.stderr.contains("give it as a file:// URI"),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.contains(&uri)
            || out
                .stderr
                .contains(&format!("file://{}/src/main.rs", s.work().display())),
        "{}",
        out.stderr
    );
    assert!(
        !out.stderr.contains("relative URL without a base"),
        "{}",
        out.stderr
    );
}

#[test]
fn a_copy_conflict_says_what_to_do_next() {
    let s = S::new();
    let id = s.conversation(1);
    let dst = s.work().join("dst");
    let (src_s, dst_s) = (
        s.root.to_str().expect("UTF-8"),
        dst.to_str().expect("UTF-8"),
    );
    s.run(&["copy", src_s, dst_s], b"").ok("copy");
    let turn = |t: &str| {
        format!("{{\"type\":\"turn_start\"}}\n{{\"type\":\"chat_request\",\"content\":\"{t}\"}}\n")
    };
    s.run(&["append", &id], turn("here").as_bytes())
        .ok("append");
    run_jp_store(&dst, &["append", &id], turn("there").as_bytes()).ok("append");
    let out = s.run(&["copy", src_s, dst_s], b"");
    out.expect_code(1, "a diverged copy");
    assert!(
        out.stdout
            .contains(&format!("conflict: {id}: the logs diverged")),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout
            .contains(&format!("jp-store --store {src_s} fork {id}"))
            && out
                .stdout
                .contains(&format!("jp-store --store {dst_s} rm {id}")),
        "{}",
        out.stdout
    );
}

#[test]
fn a_second_export_that_changes_nothing_says_so() {
    let s = S::new();
    let id = s.conversation(1);
    let out_dir = s.work().join("conversations");
    let out_s = out_dir.to_str().expect("UTF-8");
    let first = s.run(&["export", &id, "--format", "jp", "--out", out_s], b"");
    assert!(
        first.ok("export").contains("events.json"),
        "{}",
        first.stdout
    );
    let second = s.run(&["export", &id, "--format", "jp", "--out", out_s], b"");
    assert_eq!(second.ok("export again"), "", "nothing written");
    assert!(
        second.stderr.contains("nothing changed")
            && second
                .stderr
                .contains("exported 1 conversation: 0 files written, 3 unchanged"),
        "{}",
        second.stderr
    );
    let quiet = s.run(
        &["-q", "export", &id, "--format", "jp", "--out", out_s],
        b"",
    );
    quiet.ok("export -q");
    assert_eq!(quiet.stderr, "", "-q says nothing");
}

/// `jp-store ARGS` on a terminal (through `script`), `input` typed ahead
/// and then end of file; `None` where `script` is not installed.
fn on_a_terminal(store: &Path, args: &[&str], input: &[u8]) -> Option<Run> {
    let script = ["/usr/bin/script", "/bin/script"]
        .into_iter()
        .find(|p| Path::new(p).is_file())?;
    let mut line = format!(
        "'{}' --store '{}'",
        jp_store_bin().display(),
        store.display()
    );
    for a in args {
        line.push_str(&format!(" '{a}'"));
    }
    let out = jpstore_tests::output_of(
        std::process::Command::new(script)
            .args(["-qec", &line, "/dev/null"])
            .env_remove("JP_STORE_DIR"),
        input,
    );
    Some(Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    })
}

#[test]
fn append_on_a_terminal_says_what_it_reads_and_how_it_ends() {
    let s = S::new();
    let id = s.run(&["new"], b"").ok("new").trim().to_string();
    let Some(out) = on_a_terminal(
        &s.root,
        &["append", &id],
        b"{\"type\":\"turn_start\"}\n{\"type\":\"chat_request\",\"content\":\"hi\"}\n",
    ) else {
        return jpstore_test_env::skip(
            "append_on_a_terminal_says_what_it_reads_and_how_it_ends",
            jpstore_test_env::Need::Script,
            "`script` is not installed",
        );
    };
    out.expect_code(0, "append on a terminal");
    assert!(
        out.stdout
            .contains(&format!("reading events for {id} from standard input"))
            && out.stdout.contains("(Ctrl-D)"),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("appended 2 entries"), "{}", out.stdout);
    // Not on a pipe.
    let piped = s.run(&["append", &id], b"{\"type\":\"turn_start\"}\n");
    piped.ok("append from a pipe");
    assert!(!piped.stderr.contains("Ctrl-D"), "{}", piped.stderr);
}

#[test]
fn an_unknown_entry_type_is_named_with_the_nearest_known_one_and_strict_refuses_it() {
    let s = S::new();
    let id = s.conversation(1);
    let log = jpstore_tests::log_path(&s.root, &id);
    let typo = b"{\"type\":\"turn_start\"}\n{\"type\":\"chat_request\",\"content\":\"q\"}\n{\"type\":\"chat_respons\",\"message\":\"a\"}\n";
    let before = std::fs::read(&log).expect("log");
    let out = s.run(&["append", &id, "--strict"], typo);
    out.expect_code(1, "append --strict of an unknown type");
    assert!(
        out.stderr.contains("stdin line 3 (entry 3): unknown entry type `chat_respons` (did you mean `chat_response`?)")
            && out.stderr.contains("nothing was appended (--strict)"),
        "{}",
        out.stderr
    );
    assert_eq!(
        std::fs::read(&log).expect("log"),
        before,
        "nothing appended"
    );

    let out = s.run(&["append", &id], typo);
    out.ok("append of an unknown type");
    assert!(
        out.stderr.starts_with("jp-store: warning: stdin line 3 (entry 3): unknown entry type `chat_respons` (did you mean `chat_response`?)"),
        "{}",
        out.stderr
    );
    // A type nothing is near: the known types are listed.
    let out = s.run(
        &["append", &id],
        b"{\"type\":\"x_note\",\"text\":\"kept\"}\n",
    );
    out.ok("append of another type");
    assert!(
        out.stderr
            .contains("unknown entry type `x_note` (the known types are turn_start, chat_request,"),
        "{}",
        out.stderr
    );
    // Known types only: no warning.
    let out = s.run(&["append", &id, "--strict"], b"{\"type\":\"turn_start\"}\n");
    out.ok("append --strict of known types");
    assert_eq!(out.stderr, "", "no warning");
    let export = s.run(&["export", &id], b"").json("export").to_string();
    assert!(
        export.contains("chat_respons\"") && export.contains("x_note"),
        "kept as written"
    );
}

#[test]
fn help_lists_one_line_per_command_and_global_options_after_the_commands_own() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Bare `jp-store`: the list of commands, one line each.
    let bare = jp_store_in(dir.path(), &[]);
    bare.expect_code(2, "jp-store with no command");
    let text = &bare.stderr;
    let list: Vec<&str> = text
        .split("Commands:\n")
        .nth(1)
        .and_then(|rest| rest.split("\n\n").next())
        .expect("a list of commands")
        .lines()
        .collect();
    assert!(list.len() >= 20, "{text}");
    for line in &list {
        assert!(
            line.starts_with("  ") && !line.starts_with("   "),
            "a command's summary continues on a second line: {line:?}\n{text}"
        );
    }
    assert!(
        list.iter().any(|l| l.trim_start().starts_with("attach ")),
        "{text}"
    );
    assert!(
        text.lines().count() < 50,
        "{} lines:\n{text}",
        text.lines().count()
    );
    // A command's help: its own options, then the global ones.
    for command in ["ls", "append", "export", "gc"] {
        let help = jp_store_in(dir.path(), &[command, "--help"]);
        let help = help.ok(command);
        let own = help.find("\nOptions:\n").expect("own options");
        let global = help.find("\nGlobal options:\n").expect("global options");
        assert!(own < global, "{command}: {help}");
        let store = help.find("--store <DIR|URL>").expect("--store");
        let quiet = help.find("--quiet").expect("--quiet");
        assert!(store > global && quiet > global, "{command}: {help}");
        let json_or_help = help.find("-h, --help").expect("--help");
        assert!(json_or_help < global, "{command}: {help}");
    }
}

#[test]
fn append_help_and_the_manual_give_the_event_format_and_its_example_appends() {
    let s = S::new();
    let help = s.run(&["append", "--help"], b"");
    let help = help.ok("append --help");
    for t in [
        "turn_start",
        "chat_request",
        "chat_response",
        "tool_call_request",
        "tool_call_response",
        "inquiry_request",
        "inquiry_response",
        "config_delta",
        "--strict refuses it",
    ] {
        assert!(help.contains(t), "{t}: {help}");
    }
    let example: String = help
        .split("Example, a turn with a tool call")
        .nth(1)
        .expect("an example")
        .lines()
        .skip(1)
        .map(str::trim)
        .filter(|l| l.starts_with('{'))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(example.lines().count(), 5, "{help}");
    let id = s.run(&["new"], b"").ok("new").trim().to_string();
    let out = s.run(&["append", &id, "--strict"], example.as_bytes());
    out.ok("append of the example");
    assert_eq!(out.stderr, "", "no warning");
    let view = s.run(&["view", &id], b"").json("view").to_string();
    assert!(
        view.contains("tool_call_response") && view.contains("Cargo.toml\\nsrc\\n"),
        "{view}"
    );
    // The manual pages.
    let page = s.run(&["man"], b"");
    let page = page.ok("man");
    assert!(page.contains(".SH \"EVENT FORMAT\""), "{page}");
    assert!(page.contains("tool_call_response"), "{page}");
    let pages = s.work().join("man1");
    s.run(&["man", "--dir", pages.to_str().expect("UTF-8")], b"")
        .ok("man --dir");
    let append = std::fs::read_to_string(pages.join("jp-store-append.1")).expect("append page");
    assert!(append.contains("tool_call_request"), "{append}");
    let main = std::fs::read_to_string(pages.join("jp-store.1")).expect("main page");
    assert!(main.contains("EVENT FORMAT"), "{main}");
}

#[test]
fn demo_refuses_a_used_directory_plainly_and_says_where_its_store_is() {
    let dir = tempfile::tempdir().expect("tempdir");
    let first = jp_store_in(dir.path(), &["demo", "--dir", "d"]);
    let out = first.ok("demo --dir d");
    assert!(out.starts_with("store: d (kept)\n"), "{out}");
    assert!(
        out.contains("imported 1 JP conversation: 3 blobs stored\n\n"),
        "{out}"
    );
    assert!(out.contains("jp-store --store d ls"), "{out}");
    let before = jpstore_tests::tree_snapshot(&dir.path().join("d"));
    // Again in the same directory: refused for what it is, nothing changed.
    let again = jp_store_in(dir.path(), &["demo", "--dir", "d"]);
    again.expect_code(1, "demo --dir d again");
    assert!(
        again.stderr.starts_with(
            "jp-store: error: d is not empty (a store, from an earlier run of the demo?)"
        ),
        "{}",
        again.stderr
    );
    assert!(!again.stderr.contains("differs"), "{}", again.stderr);
    assert_eq!(again.stdout, "", "nothing printed as a result");
    assert_eq!(jpstore_tests::tree_snapshot(&dir.path().join("d")), before);
    // Without --dir: no path printed that is gone afterwards.
    let temp = jp_store_in(dir.path(), &["demo"]);
    let out = temp.ok("demo");
    let first_line = out.lines().next().expect("a line");
    assert_eq!(
        first_line,
        "store: a temporary directory, removed when the demo ends (--dir DIR keeps it)"
    );
    let temp_dir = std::env::temp_dir();
    assert!(!out.contains(&*temp_dir.to_string_lossy()), "{out}");
}

/// `jp-store --store STORE ARGS` in `cwd` under the umask `umask`.
fn with_umask(store: &Path, cwd: &Path, umask: &str, args: &[&str]) -> Run {
    let mut command = std::process::Command::new("sh");
    command
        .current_dir(cwd)
        .args(["-c", &format!("umask {umask} && exec \"$0\" \"$@\"")])
        .arg(jp_store_bin());
    jpstore_tests::run_command(command, store, args, b"")
}

fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o7777
}

#[test]
fn exported_files_get_the_umask_and_a_replaced_file_keeps_its_mode() {
    use std::os::unix::fs::PermissionsExt as _;
    let s = S::new();
    let id = s.conversation(1);
    let work = s.work();
    // New files and directories: as the umask says, not owner-only.
    let out = with_umask(
        &s.root,
        work,
        "022",
        &[
            "export",
            &id,
            "--format",
            "jp",
            "--out",
            "ws/.jp/conversations",
        ],
    );
    out.ok("export --format jp");
    let conversations = work.join("ws/.jp/conversations");
    let dir = std::fs::read_dir(&conversations)
        .expect("the export's directory")
        .next()
        .expect("one conversation")
        .expect("entry")
        .path();
    for d in [
        work.join("ws"),
        work.join("ws/.jp"),
        conversations.clone(),
        dir.clone(),
    ] {
        assert_eq!(mode(&d), 0o755, "{}", d.display());
    }
    let events = dir.join("events.json");
    let metadata = dir.join("metadata.json");
    assert_eq!(mode(&events), 0o644);
    assert_eq!(mode(&metadata), 0o644);
    // Replaced: each file keeps the mode its owner gave it.
    std::fs::set_permissions(&events, std::fs::Permissions::from_mode(0o640)).expect("chmod");
    std::fs::set_permissions(&metadata, std::fs::Permissions::from_mode(0o664)).expect("chmod");
    s.run(
        &["append", &id],
        b"{\"type\":\"turn_start\"}\n{\"type\":\"chat_request\",\"content\":\"more\"}\n",
    )
    .ok("append");
    let before = std::fs::read(&events).expect("events");
    let out = with_umask(
        &s.root,
        work,
        "077",
        &[
            "export",
            &id,
            "--format",
            "jp",
            "--out",
            "ws/.jp/conversations",
            "--replace",
        ],
    );
    out.ok("export --replace");
    assert_ne!(std::fs::read(&events).expect("events"), before, "replaced");
    assert_eq!(mode(&events), 0o640, "the replaced file's mode");
    assert_eq!(mode(&metadata), 0o664, "the replaced file's mode");
    // A stricter umask is honoured for new files.
    let out = with_umask(
        &s.root,
        work,
        "077",
        &["export", &id, "--format", "jp", "--out", "private"],
    );
    out.ok("export under umask 077");
    assert_eq!(mode(&work.join("private")), 0o700);
    // The plain JSON export too: a new file from the umask, a replaced one
    // keeps its mode.
    with_umask(&s.root, work, "022", &["export", &id, "--out", "one.json"]).ok("export --out");
    assert_eq!(mode(&work.join("one.json")), 0o644);
    std::fs::set_permissions(
        work.join("one.json"),
        std::fs::Permissions::from_mode(0o600),
    )
    .expect("chmod");
    with_umask(&s.root, work, "022", &["export", &id, "--out", "one.json"])
        .ok("export --out again");
    assert_eq!(mode(&work.join("one.json")), 0o600);
    // The store's own files stay owner-only.
    jpstore_tests::assert_owner_only(&s.root);
}

#[test]
fn progress_counts_each_thing_in_its_own_unit() {
    let s = S::new();
    for _ in 0..3 {
        let id = s.run(&["new"], b"").ok("new").trim().to_string();
        s.run(
            &["append", &id],
            format!(
                "{{\"type\":\"turn_start\"}}\n{{\"type\":\"chat_request\",\"content\":\"q\"}}\n{{\"type\":\"tool_call_request\",\"id\":\"c\",\"name\":\"x\"}}\n{{\"type\":\"tool_call_response\",\"id\":\"c\",\"content\":\"result of {id}\"}}\n"
            )
            .as_bytes(),
        )
        .ok("append");
    }
    // As lines (-v, no terminal): each with its unit.
    let out = s.run(&["-v", "fsck"], b"");
    out.ok("fsck -v");
    assert!(
        out.stderr
            .contains("jp-store: checking conversations: 100% (3 of 3 conversations)"),
        "{}",
        out.stderr
    );
    let out = s.run(&["-v", "fsck", "--read-data"], b"");
    out.ok("fsck --read-data -v");
    assert!(
        out.stderr.contains("jp-store: reading blobs: 100% ("),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains(" B of "), "bytes: {}", out.stderr);
    let ndjson = s.work().join("all.ndjson");
    let out = s.run(
        &[
            "-v",
            "export",
            "--format",
            "ndjson",
            "--out",
            ndjson.to_str().expect("UTF-8"),
        ],
        b"",
    );
    out.ok("export -v");
    assert!(
        out.stderr.contains("(1 of 3 conversations)"),
        "{}",
        out.stderr
    );
    // As bars on a terminal: no frame of `0 B/0 B`, conversations counted
    // as conversations, bytes as bytes.
    let Some(export) = on_a_terminal(
        &s.root,
        &[
            "export",
            "--format",
            "ndjson",
            "--out",
            ndjson.to_str().expect("UTF-8"),
        ],
        b"",
    ) else {
        eprintln!("skipped the terminal: `script` is not installed");
        return;
    };
    export.ok("export on a terminal");
    let gc = on_a_terminal(&s.root, &["gc"], b"").expect("script");
    gc.ok("gc on a terminal");
    let fsck = on_a_terminal(&s.root, &["fsck", "--read-data"], b"").expect("script");
    fsck.ok("fsck on a terminal");
    for (what, run) in [("export", &export), ("gc", &gc), ("fsck", &fsck)] {
        assert!(!run.stdout.contains("0 B/0 B"), "{what}: {}", run.stdout);
        assert!(
            !run.stdout.contains("/0 "),
            "{what}: a frame of nothing: {}",
            run.stdout
        );
    }
    assert!(
        export.stdout.contains("exporting [") && export.stdout.contains("/3 conversations"),
        "{}",
        export.stdout
    );
    assert!(!export.stdout.contains(" B/"), "{}", export.stdout);
    assert!(
        gc.stdout.contains("marking [") && gc.stdout.contains("/3 conversations"),
        "{}",
        gc.stdout
    );
    assert!(!gc.stdout.contains(" B/"), "{}", gc.stdout);
    assert!(
        fsck.stdout.contains("reading blobs [") && fsck.stdout.contains(" B/"),
        "{}",
        fsck.stdout
    );
    assert!(
        !fsck.stdout.contains(" B/3 B"),
        "conversations counted as bytes: {}",
        fsck.stdout
    );
}

/// The README's example of embedding is the engine front page's first
/// example, which runs as a doc test: the lines of its Rust block are the
/// example's lines that rustdoc shows (those not hidden with `#`).
#[test]
fn the_readme_embedding_example_is_the_front_page_doc_test() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README");
    let section = readme
        .split("## Embedding the engine")
        .nth(1)
        .expect("the embedding section");
    let block = |text: &str, fence: &str| -> Vec<String> {
        let start = text.find(fence).expect("a rust block") + fence.len();
        text[start..]
            .lines()
            .skip(1)
            .take_while(|l| l.trim() != "```")
            .map(str::to_owned)
            .collect()
    };
    let shown = block(section, "```rust");
    let front = std::fs::read_to_string(root.join("engine/src/lib.rs")).expect("lib.rs");
    let doc: String = front
        .lines()
        .filter_map(|l| l.strip_prefix("//!"))
        .map(|l| l.strip_prefix(' ').unwrap_or(l))
        .collect::<Vec<_>>()
        .join("\n");
    let example: Vec<String> = block(&doc, "```rust")
        .into_iter()
        .filter(|l| !l.starts_with('#') && !l.starts_with("use ") && !l.is_empty())
        .collect();
    assert!(shown.len() < 15, "{} lines", shown.len());
    assert_eq!(shown, example);
}

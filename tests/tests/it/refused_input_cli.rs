//! `append` input that parses but must not be stored, through the binary:
//! exit status 1, a message naming the line, the entry and the field, and a
//! store left byte for byte as it was.

use std::path::{Path, PathBuf};

use jpstore_tests::{run_jp_store, tree_snapshot, Run};

const CONV: &str = "c";

struct Store {
    _dir: tempfile::TempDir,
    root: PathBuf,
}

impl Store {
    fn new() -> Store {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("store");
        let s = Store { _dir: dir, root };
        s.run(&["init"], b"").ok("init");
        s.run(&["new", "--id", CONV], b"").ok("new");
        s.run(
            &["append", CONV],
            b"{\"type\":\"turn_start\"}\n\
              {\"type\":\"chat_request\",\"content\":\"question\"}\n\
              {\"type\":\"chat_response\",\"reasoning\":\"thinking\"}\n\
              {\"type\":\"chat_response\",\"message\":\"answer\"}\n",
        )
        .ok("append");
        s
    }

    fn run(&self, args: &[&str], stdin: &[u8]) -> Run {
        run_jp_store(&self.root, args, stdin)
    }

    fn root(&self) -> &Path {
        &self.root
    }
}

/// `append` of `stdin` exits 1 with every one of `words` in its message and
/// changes no file of the store.
fn refused(s: &Store, case: &str, stdin: &[u8], words: &[&str]) {
    let before = tree_snapshot(s.root());
    let out = s.run(&["append", CONV], stdin);
    out.expect_code(1, case);
    for w in words {
        assert!(
            out.stderr.contains(w),
            "{case}: the message lacks {w:?}: {}",
            out.stderr
        );
    }
    assert!(
        tree_snapshot(s.root()) == before,
        "{case}: the store changed"
    );
}

#[test]
fn an_undo_of_a_compaction_not_made_yet_is_refused_and_a_later_compaction_holds() {
    let s = Store::new();
    refused(
        &s,
        "undo before any compaction",
        b"{\"type\":\"compaction_undo\",\"undoes\":0}\n",
        &[
            "line 1",
            "(entry 1)",
            "undoes",
            "compaction 0",
            "no compaction before it",
        ],
    );
    // The compaction made now is not revoked by anything.
    s.run(&["compact", CONV], b"").ok("compact");
    let fsck = s.run(&["fsck"], b"");
    fsck.ok("fsck");
    s.run(&["compact", CONV, "--undo"], b"")
        .ok("the compaction is in effect, so it can be undone");
    // Compaction 0 exists; compaction 1 does not, even after an undo in
    // the same batch.
    refused(
        &s,
        "undo of compaction 1 of 1",
        b"{\"type\":\"compaction_undo\",\"undoes\":0}\n{\"type\":\"compaction_undo\",\"undoes\":1}\n",
        &["line 2", "(entry 2)", "undoes", "compaction 1", "the only compaction before it is 0"],
    );
    s.run(&["fsck"], b"").ok("fsck");
}

#[test]
fn a_key_given_twice_is_refused_with_its_line_entry_and_path() {
    let s = Store::new();
    let cases: [(&str, &[u8], &[&str]); 4] = [
        (
            "a top-level key twice, JSON Lines",
            b"{\"type\":\"turn_start\"}\n\
              {\"type\":\"chat_request\",\"content\":\"a\",\"content\":\"b\"}\n",
            &["line 2", "(entry 2)", "field `content`", "duplicate key"],
        ),
        (
            "a nested key twice, JSON Lines",
            b"{\"type\":\"turn_start\"}\n\
              {\"type\":\"tool_call_request\",\"id\":\"t\",\"name\":\"n\",\"arguments\":{\"p\":1,\"q\":{\"r\":1,\"r\":2}}}\n",
            &["line 2", "(entry 2)", "field `arguments.q.r`", "duplicate key"],
        ),
        (
            "a key twice in an array of entries",
            b"[\n{\"type\":\"turn_start\"},\n{\"type\":\"chat_request\",\n\"content\":\"a\",\n\"type\":\"chat_request\"}\n]\n",
            &["line 5", "(entry 2)", "field `type`", "duplicate key"],
        ),
        (
            "inside an array of blocks",
            b"{\"type\":\"turn_start\"}\n\
              {\"type\":\"tool_call_request\",\"id\":\"t\",\"name\":\"n\",\"arguments\":{}}\n\
              {\"type\":\"tool_call_response\",\"id\":\"t\",\"content\":[{\"type\":\"text\",\"text\":\"x\",\"text\":\"y\"}]}\n",
            &["line 3", "(entry 3)", "field `content[0].text`", "duplicate key"],
        ),
    ];
    for (case, stdin, words) in cases {
        refused(&s, case, stdin, words);
    }
}

//! The JP fixture workspace, `tests/fixtures/jp-workspace/`: JP
//! conversations written as JP writes them (serde_json's pretty printer,
//! two spaces, a final line break, `timestamp` before `type`, JP's field
//! and config key order), one quirk of jp-format.md section 2 each, and
//! hand-edited variants (the `hand-` ones: text serde_json would not have
//! written). The files are committed; this module wrote them (`cargo test
//! -p jpstore-integrations write_jp_fixture_workspace -- --ignored`), and
//! says for each how: the tests compare what export gives with the
//! committed bytes, never with this code's output.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::base64::encode;

/// The committed fixture workspace.
pub(crate) fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/jp-workspace")
}

fn b64(s: &str) -> Value {
    Value::String(encode(s))
}

/// A thinking signature: base64 of random-looking bytes, which JP's base64
/// then encodes a second time.
fn signature() -> String {
    use base64::Engine as _;
    let bytes: Vec<u8> = (0u32..96).map(|i| (i * 37 + 11) as u8).collect();
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// An event in JP's key order: `timestamp`, `type`, then `fields` in the
/// order given.
fn ev(ts: &str, ty: &str, fields: Value) -> Value {
    let mut o = serde_json::Map::new();
    o.insert("timestamp".into(), ts.into());
    o.insert("type".into(), ty.into());
    if let Value::Object(f) = fields {
        o.extend(f);
    }
    Value::Object(o)
}

/// JP's base config, in its structs' order (not sorted).
fn base_config() -> Value {
    json!({
        "inherit": true,
        "config_load_paths": [],
        "assistant": {
            "name": "jp",
            "system_prompt": "You are a careful engineer.",
            "instructions": [{"title": "Style", "items": ["Be brief.", "Cite files."]}],
            "model": {
                "id": {"provider": "anthropic", "name": "claude-sonnet-4"},
                "parameters": {"max_tokens": 8192, "reasoning": {"effort": "medium"},
                               "temperature": 0.7, "top_p": null}
            }
        },
        "conversation": {
            "title": {"generate": {"auto": true}},
            "tools": {
                "*": {"run": "ask"},
                "fs_read_file": {"enable": true, "run": "unattended",
                                 "style": {"inline_results": "full"}},
                "cargo_check": {"enable": false}
            },
            "attachments": []
        },
        "style": {"code": {"color": true, "line_numbers": false},
                  "reasoning": {"display": "hidden"}},
        "editor": {"cmd": null, "envs": ["JP_EDITOR", "VISUAL", "EDITOR"]}
    })
}

/// A short coding session: a turn with reasoning (signed), a tool call and
/// its result, and an answer.
fn session() -> Vec<Value> {
    vec![
        ev("2026-05-29 19:40:02.123", "turn_start", json!({})),
        ev(
            "2026-05-29 19:40:02.125",
            "chat_request",
            json!({"content": "Why does the test fail?"}),
        ),
        ev(
            "2026-05-29 19:40:05.5",
            "chat_response",
            json!({"reasoning": "Let me read the test first.",
                   "metadata": {"anthropic_thinking_signature": b64(&signature())}}),
        ),
        ev(
            "2026-05-29 19:40:05.61",
            "tool_call_request",
            json!({"id": "toolu_01", "name": "fs_read_file",
                   "arguments": {"path": b64("src/lib.rs"), "start_line": 1, "end_line": 40}}),
        ),
        ev(
            "2026-05-29 19:40:05.7",
            "tool_call_response",
            json!({"id": "toolu_01", "content": b64("fn main() {}\n"), "is_error": false}),
        ),
        ev(
            "2026-05-29 19:40:09.46732",
            "chat_response",
            json!({"message": "The writer thread is not joined before the reopen."}),
        ),
    ]
}

fn metadata() -> Value {
    json!({"title": "Quirk", "last_activated_at": "2026-05-29 19:40:09.46732"})
}

/// serde_json's pretty form with JP's final line break.
fn jp_text(v: &Value) -> String {
    let mut text = serde_json::to_string_pretty(v).expect("JSON values serialize");
    text.push('\n');
    text
}

/// `text` with `from` replaced by `to`, which must be there.
fn edit(text: &str, from: &str, to: &str) -> String {
    assert!(text.contains(from), "{from:?} is not in the text");
    text.replacen(from, to, 1)
}

/// One conversation directory of the fixture workspace.
struct Conv {
    name: &'static str,
    archived: bool,
    events: String,
    metadata: String,
    base_config: Option<String>,
}

impl Conv {
    fn jp(name: &'static str, events: Vec<Value>) -> Conv {
        Conv {
            name,
            archived: false,
            events: jp_text(&Value::Array(events)),
            metadata: jp_text(&metadata()),
            base_config: Some(jp_text(&base_config())),
        }
    }

    fn without_base(mut self) -> Conv {
        self.base_config = None;
        self
    }
}

fn conversations() -> Vec<Conv> {
    let mut out = Vec::new();
    // --- As JP writes them. -------------------------------------------------
    out.push(Conv::jp("17738399401-base-config-file", session()));
    let mut first = vec![ev(
        "2026-05-29 19:39:00.5",
        "config_delta",
        json!({"delta": base_config()}),
    )];
    first.extend(session());
    out.push(Conv::jp("17738399402-first-config-delta", first).without_base());
    out.push(
        Conv::jp(
            "17738399403-flattened-config-no-turns",
            vec![
                ev(
                    "2026-05-29 19:39:00.0",
                    "config_delta",
                    json!({"assistant": {"name": "jp", "model": {"id": "openai/gpt-4o"}}}),
                ),
                ev(
                    "2026-05-29 19:39:01.0",
                    "chat_request",
                    json!({"content": "no turn_start at all"}),
                ),
                ev(
                    "2026-05-29 19:39:02.0",
                    "chat_response",
                    json!({"message": "ok"}),
                ),
            ],
        )
        .without_base(),
    );
    out.push(Conv::jp("17738399404-no-base-config", session()).without_base());
    let mut archived = Conv::jp("17738399405-archived", session());
    archived.archived = true;
    archived.metadata = jp_text(&json!({"title": "Archived",
        "last_activated_at": "2026-05-29 19:40:09.46732", "archived_at": "2026-06-01 00:00:00.0"}));
    out.push(archived);
    out.push(Conv::jp("17738399406-every-entry-type", every_entry_type()));
    out.push(Conv::jp("17738399407-unknown-entries", unknown_entries()));
    let mut events = session();
    events[1] = ev(
        "2026-05-29 19:40:02.125",
        "chat_request",
        json!({"future_field": {"kept": [1, "two"]}, "content": "a field JP's next version writes"}),
    );
    events[5] = ev(
        "2026-05-29 19:40:09.46732",
        "chat_response",
        json!({"message": "done", "later_field": true}),
    );
    out.push(Conv::jp("17738399408-unknown-field-in-middle", events));
    let requests = vec![
        ev("2026-05-29 19:40:02.0", "turn_start", json!({})),
        ev(
            "2026-05-29 19:40:02.1",
            "chat_request",
            json!({"content": "plain"}),
        ),
        ev(
            "2026-05-29 19:40:02.2",
            "chat_request",
            json!({"content": "x", "author": "me", "schema": {"type": "object"}}),
        ),
        ev(
            "2026-05-29 19:40:02.3",
            "chat_request",
            json!({"content": "y", "author": "you"}),
        ),
        ev(
            "2026-05-29 19:40:02.4",
            "chat_request",
            json!({"content": "z", "schema": {"type": "string"},
                   "metadata": {"k": b64("v")}}),
        ),
    ];
    out.push(Conv::jp("17738399409-field-order-per-type", requests));
    out.push(Conv::jp("17738399410-metadata-nested", metadata_nested()));
    out.push(Conv::jp("17738399411-numbers", numbers()));
    out.push(Conv::jp("17738399412-unicode-and-escapes", unicode()));
    out.push(Conv::jp("17738399413-raw-leaves", raw_leaves()));
    out.push(Conv::jp("17738399414-real-file-quirks", real_file_quirks()));
    let mut ordered = Conv::jp("17738399415-metadata-json-order", session());
    ordered.metadata = jp_text(&json!({
        "last_activated_at": "2026-05-29 19:40:09.46732", "title": "Keys not sorted",
        "pinned_at": "2026-05-29 19:40:00.0", "expires_at": null,
        "labels": {"zeta": "2", "alpha": "1"}, "x_other_tool": {"n": 3, "list": [true, null]}}));
    out.push(ordered);
    let mut empty = Conv::jp("17738399416-empty", Vec::new());
    empty.metadata = jp_text(&json!({"last_activated_at": "2026-05-29 19:40:00.0"}));
    out.push(empty);
    let mut events = session();
    events.insert(
        5,
        ev(
            "2026-05-29 19:40:08.0",
            "config_delta",
            json!({"delta": {"style": {"code": {"color": false}},
                   "assistant": {"model": {"parameters": {"temperature": 0.2, "top_p": null}},
                                 "instructions": []}}}),
        ),
    );
    out.push(Conv::jp("17738399417-config-deltas", events));

    // --- Edited by hand (text serde_json would not write). --------------------
    let four = |v: &Value| {
        let mut buf = Vec::new();
        let fmt = serde_json::ser::PrettyFormatter::with_indent(b"    ");
        let mut ser = serde_json::Serializer::with_formatter(&mut buf, fmt);
        serde::Serialize::serialize(v, &mut ser).expect("serialize");
        String::from_utf8(buf).expect("utf-8") + "\n"
    };
    out.push(Conv {
        name: "17738399418-hand-four-space-indent",
        archived: false,
        events: four(&Value::Array(session())),
        metadata: four(&metadata()),
        base_config: Some(four(&base_config())),
    });
    let mut c = Conv::jp("17738399419-hand-no-final-newline", session());
    c.events.pop();
    c.metadata.pop();
    out.push(c);
    let mut c = Conv::jp("17738399420-hand-number-forms", session());
    c.events = edit(
        &c.events,
        "\"start_line\": 1,\n      \"end_line\": 40",
        "\"start_line\": 1e0,\n      \"end_line\": 4.0E1,\n      \"extra\": [1.50, -0, 18446744073709551616, 0.1e1, 1E-2, 100000000000000000000000]",
    );
    c.base_config = c
        .base_config
        .map(|t| edit(&t, "\"temperature\": 0.7", "\"temperature\": 7e-1"));
    out.push(c);
    let mut c = Conv::jp("17738399421-hand-escapes", session());
    c.events = edit(
        &c.events,
        "\"Why does the test fail?\"",
        "\"Why does the test \\u0066ail\\/\\u00e9 \\uD83D\\uDE00?\"",
    );
    c.events = edit(&c.events, "\"message\":", "\"m\\u0065ssage\":");
    c.metadata = edit(&c.metadata, "\"Quirk\"", "\"Q\\u0075irk \\/ \\\"\"");
    c.base_config = c.base_config.map(|t| {
        edit(
            &t,
            "\"You are a careful engineer.\"",
            "\"You are a careful engineer\\u002E\"",
        )
    });
    out.push(c);
    let mut c = Conv::jp("17738399422-hand-rfc3339-timestamps", session());
    c.events = edit(
        &c.events,
        "\"2026-05-29 19:40:02.125\"",
        "\"2026-05-29T19:40:02.125Z\"",
    );
    c.events = edit(
        &c.events,
        "\"2026-05-29 19:40:05.5\"",
        "\"2026-05-29T21:40:05.500+02:00\"",
    );
    c.events = edit(
        &c.events,
        "\"2026-05-29 19:40:05.61\"",
        "\"2026-05-29 19:40:05.610\"",
    );
    out.push(c);
    let mut c = Conv::jp("17738399423-hand-empty-metadata-object", session());
    c.events = edit(
        &c.events,
        "\"content\": \"Why does the test fail?\"\n",
        "\"content\": \"Why does the test fail?\",\n    \"metadata\": {}\n",
    );
    out.push(c);
    let mut c = Conv::jp("17738399424-hand-arguments-absent", session());
    c.events = edit(
        &c.events,
        "\"name\": \"fs_read_file\",\n    \"arguments\": {\n      \"path\": \"c3JjL2xpYi5ycw==\",\n      \"start_line\": 1,\n      \"end_line\": 40\n    }\n",
        "\"name\": \"fs_read_file\"\n",
    );
    out.push(c);
    let mut c = Conv::jp("17738399425-hand-tabs-crlf", session());
    let tabs = |t: &str| {
        let mut buf = Vec::new();
        let v: Value = serde_json::from_str(t).expect("json");
        let fmt = serde_json::ser::PrettyFormatter::with_indent(b"\t");
        let mut ser = serde_json::Serializer::with_formatter(&mut buf, fmt);
        serde::Serialize::serialize(&v, &mut ser).expect("serialize");
        (String::from_utf8(buf).expect("utf-8") + "\n").replace('\n', "\r\n")
    };
    c.events = tabs(&c.events);
    c.metadata = tabs(&c.metadata);
    c.base_config = c.base_config.map(|t| tabs(&t));
    out.push(c);
    let mut c = Conv::jp("17738399426-hand-compact-one-line", session());
    c.events = Value::Array(session()).to_string();
    c.metadata = metadata().to_string();
    c.base_config = Some(base_config().to_string());
    out.push(c);
    let mut events = session();
    events.push(json!({"type": "turn_start", "timestamp": "2026-05-29 19:41:00.0"}));
    events.push(
        json!({"content": "keys in yet another order", "type": "chat_request",
                       "timestamp": "2026-05-29 19:41:00.1"}),
    );
    out.push(Conv::jp("17738399427-hand-mixed-key-orders", events));
    let mut c = Conv::jp("17738399428-hand-odd-whitespace", session());
    c.events = edit(&c.events, "[\n  {", "[ {");
    c.events = edit(
        &c.events,
        "},\n  {\n    \"timestamp\": \"2026-05-29 19:40:05.5\"",
        "}\n\n  ,  {\n    \"timestamp\": \"2026-05-29 19:40:05.5\"",
    );
    c.events = edit(
        &c.events,
        "\"is_error\": false\n",
        "\"is_error\" :false   \n",
    );
    c.events = edit(&c.events, "}\n]\n", "}\n]\n\n");
    c.metadata = format!("  {}", c.metadata.replace('\n', " \n"));
    out.push(c);
    let mut first = vec![ev(
        "2026-05-29 19:39:00.5",
        "config_delta",
        json!({"delta": base_config(), "note": "after the delta"}),
    )];
    first.extend(session());
    let mut c = Conv::jp("17738399429-hand-first-delta-edited", first).without_base();
    c.events = edit(&c.events, "\"temperature\": 0.7", "\"temperature\": 0.70");
    c.events = edit(&c.events, "\"name\": \"jp\",\n", "\"name\":    \"jp\" ,\n");
    out.push(c);
    let mut c = Conv::jp("17738399430-hand-other-tool-separators", session());
    // Python's `json.dumps(v)`: one line, `", "` and `": "`.
    c.events = python_default(&Value::Array(session()));
    c.metadata = python_default(&metadata());
    out.push(c);
    out
}

/// What Python's `json.dumps(v, ensure_ascii=False)` writes.
fn python_default(v: &Value) -> String {
    match v {
        Value::Array(items) => format!(
            "[{}]",
            items
                .iter()
                .map(python_default)
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Value::Object(o) => format!(
            "{{{}}}",
            o.iter()
                .map(|(k, v)| format!("{}: {}", Value::String(k.clone()), python_default(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        other => other.to_string(),
    }
}

fn every_entry_type() -> Vec<Value> {
    vec![
        ev("2026-05-29 19:40:00.0", "turn_start", json!({})),
        ev(
            "2026-05-29 19:40:00.1",
            "chat_request",
            json!({"content": "Answer as JSON.", "schema": {"type": "object",
                   "properties": {"ok": {"type": "boolean"}}}, "author": "alice"}),
        ),
        ev(
            "2026-05-29 19:40:00.2",
            "chat_response",
            json!({"reasoning": "Thinking."}),
        ),
        ev(
            "2026-05-29 19:40:00.3",
            "chat_response",
            json!({"data": {"ok": true, "list": [1, "two", null, 2.5]}}),
        ),
        ev(
            "2026-05-29 19:40:00.4",
            "chat_response",
            json!({"message": "Done."}),
        ),
        ev(
            "2026-05-29 19:40:00.5",
            "tool_call_request",
            json!({"id": "call_1", "name": "fs_modify_file",
                   "arguments": {"path": b64("a.rs"), "patch": {"old": b64("x"), "new": b64("y")}}}),
        ),
        ev(
            "2026-05-29 19:40:00.6",
            "inquiry_request",
            json!({"id": "q_tool", "source": {"source": "tool", "name": "fs_modify_file"},
                   "question": {"text": "Apply the patch?", "answer_type": "boolean", "default": true}}),
        ),
        ev(
            "2026-05-29 19:40:00.7",
            "inquiry_response",
            json!({"id": "q_tool", "answer": true}),
        ),
        ev(
            "2026-05-29 19:40:00.8",
            "tool_call_response",
            json!({"id": "call_1", "content": b64("patched"), "is_error": false}),
        ),
        ev(
            "2026-05-29 19:40:00.9",
            "tool_call_request",
            json!({"id": "call_2", "name": "cargo_check", "arguments": {}}),
        ),
        ev(
            "2026-05-29 19:40:01.0",
            "tool_call_response",
            json!({"id": "call_2", "content": b64("error[E0308]: mismatched types"), "is_error": true}),
        ),
        ev(
            "2026-05-29 19:40:01.1",
            "inquiry_request",
            json!({"id": "q_assistant", "source": {"source": "assistant"},
                   "question": {"text": "Which file?", "answer_type": "text"}}),
        ),
        ev(
            "2026-05-29 19:40:01.2",
            "inquiry_response",
            json!({"id": "q_assistant", "answer": "src/lib.rs"}),
        ),
        ev(
            "2026-05-29 19:40:01.3",
            "inquiry_request",
            json!({"id": "q_user", "source": {"source": "user"},
                   "question": {"text": "Continue?", "answer_type": "boolean"}}),
        ),
        ev(
            "2026-05-29 19:40:01.4",
            "inquiry_request",
            json!({"id": "q_other", "source": {"source": "other", "name": "ci"},
                   "question": {"text": "Rerun?", "answer_type": "select", "default": "yes"}}),
        ),
        ev(
            "2026-05-29 19:40:01.5",
            "inquiry_response",
            json!({"id": "q_other", "answer": {"choice": "yes", "n": 2}}),
        ),
        ev(
            "2026-05-29 19:40:01.6",
            "config_delta",
            json!({"delta": {"assistant": {"model": {"parameters": {"temperature": 0.1}}}}}),
        ),
        ev("2026-05-29 19:41:00.0", "turn_start", json!({})),
        ev(
            "2026-05-29 19:41:00.1",
            "chat_request",
            json!({"content": "Next."}),
        ),
        ev(
            "2026-05-29 19:41:00.2",
            "compaction",
            json!({"from_turn": 0, "to_turn": 0, "summary": {"summary": "Patched a.rs."}}),
        ),
        ev(
            "2026-05-29 19:41:00.3",
            "compaction",
            json!({"from_turn": 0, "to_turn": 1, "reasoning": "strip",
                   "tool_calls": {"policy": "strip", "request": true, "response": false}}),
        ),
        ev(
            "2026-05-29 19:41:00.4",
            "compaction",
            json!({"from_turn": 1, "to_turn": 1, "tool_calls": {"policy": "omit"}}),
        ),
    ]
}

fn unknown_entries() -> Vec<Value> {
    let mut events = session();
    events.insert(
        2,
        ev(
            "2026-05-29 19:40:03.0",
            "some_new_entry",
            json!({"payload": [b64("x"), {"nested": 1.5}], "metadata": {"k": b64("v")}}),
        ),
    );
    events.push(json!({"kind": "no type at all", "n": 1}));
    events.push(ev(
        "not a timestamp",
        "tool_call_response",
        json!({"id": "x", "content": 5}),
    ));
    events.push(ev(
        "2026-05-29 19:41:00.0",
        "compaction_undo",
        json!({"undoes": 0}),
    ));
    events
}

fn metadata_nested() -> Vec<Value> {
    let mut events = session();
    events[2] = ev(
        "2026-05-29 19:40:05.5",
        "chat_response",
        json!({"reasoning": "Signed twice over.",
               "metadata": {"anthropic": {"signature": b64(&signature()), "redacted": false,
                            "usage": {"input_tokens": 1200, "output_tokens": 87, "ratio": 0.0725},
                            "blocks": [b64("a"), null, [b64("b"), 3]]},
                            "openai": {"response_id": b64("resp_01"), "raw_id": "not base64!"},
                            "empty": {}, "list": []}}),
    );
    events[5] = ev(
        "2026-05-29 19:40:09.46732",
        "chat_response",
        json!({"message": "ok", "metadata": {"finish_reason": b64("end_turn")}}),
    );
    events
}

fn numbers() -> Vec<Value> {
    let mut events = session();
    events[3] = ev(
        "2026-05-29 19:40:05.61",
        "tool_call_request",
        json!({"id": "toolu_01", "name": "calc", "arguments": {
            "ints": [0, 1, -1, 42, u64::MAX, i64::MIN, i64::MAX],
            "floats": [1.0, -0.0, 0.1, 0.5, 2.5, 1e-7, 1.5e300, 1e21, 1e20, 123456.789,
                       5e-324, f64::MAX, f64::MIN_POSITIVE, -1.234_567_890_123_45, 1e15, 1e16, 1e-5]}}),
    );
    events[5] = ev(
        "2026-05-29 19:40:09.46732",
        "chat_response",
        json!({"data": {"sum": 1e100, "count": 7, "mean": -0.333_333_333_333_333_3}}),
    );
    events
}

fn unicode() -> Vec<Value> {
    let text = "café 日本語 😀 \u{2028}\u{2029} \u{1}\u{1f}\u{7f} tab\tnl\ncr\r \"quoted\" back\\slash /slash/ \u{feff}";
    let mut events = session();
    events[1] = ev(
        "2026-05-29 19:40:02.125",
        "chat_request",
        json!({"content": text}),
    );
    events[3] = ev(
        "2026-05-29 19:40:05.61",
        "tool_call_request",
        json!({"id": "toolu_01", "name": "fs_read_file",
               "arguments": {"path": b64("src/ünïcödé.rs"), "query": b64(text),
                             "a/b~c": b64("pointer escapes in the key")}}),
    );
    events[4] = ev(
        "2026-05-29 19:40:05.7",
        "tool_call_response",
        json!({"id": "toolu_01", "content": b64(text), "is_error": false}),
    );
    events[5] = ev(
        "2026-05-29 19:40:09.46732",
        "chat_response",
        json!({"message": text, "metadata": {"ключ": b64(text)}}),
    );
    events
}

fn raw_leaves() -> Vec<Value> {
    let mut events = session();
    events[3] = ev(
        "2026-05-29 19:40:05.61",
        "tool_call_request",
        json!({"id": "toolu_01", "name": "fs_read_file",
               "arguments": {"path": "src/lib.rs", "encoded": b64("yes"), "bin": "//79",
                             "unpadded": "aGVsbG8", "nested": {"raw": "plain text!"}}}),
    );
    events[4] = ev(
        "2026-05-29 19:40:05.7",
        "tool_call_response",
        json!({"id": "toolu_01", "content": "not base64 at all!", "is_error": false}),
    );
    events[2] = ev(
        "2026-05-29 19:40:05.5",
        "chat_response",
        json!({"reasoning": "r", "metadata": {"sig": "not base64 either", "ok": b64("fine")}}),
    );
    events
}

fn real_file_quirks() -> Vec<Value> {
    vec![
        ev(
            "2026-05-29 19:39:59.0",
            "chat_request",
            json!({"content": "before any turn_start"}),
        ),
        ev("2026-05-29 19:40:00.0", "turn_start", json!({})),
        ev("2026-05-29 19:40:00.1", "turn_start", json!({})),
        ev(
            "2026-05-29 19:40:00.2",
            "chat_request",
            json!({"content": "first"}),
        ),
        ev(
            "2026-05-29 19:40:00.3",
            "chat_request",
            json!({"content": "second in the same turn"}),
        ),
        ev(
            "2026-05-29 19:40:00.4",
            "tool_call_request",
            json!({"id": "toolu_01", "name": "a", "arguments": {}}),
        ),
        ev(
            "2026-05-29 19:40:00.5",
            "tool_call_response",
            json!({"id": "toolu_01", "content": b64("one"), "is_error": false}),
        ),
        ev(
            "2026-05-29 19:40:00.6",
            "tool_call_request",
            json!({"id": "toolu_01", "name": "b", "arguments": {}}),
        ),
        ev(
            "2026-05-29 19:40:00.7",
            "tool_call_response",
            json!({"id": "toolu_01", "content": b64("two, same id"), "is_error": false}),
        ),
        ev(
            "2026-05-29 19:40:00.8",
            "inquiry_request",
            json!({"id": "q1", "source": {"source": "user"},
                   "question": {"text": "Never answered", "answer_type": "text"}}),
        ),
        ev(
            "2026-05-29 19:40:00.9",
            "tool_call_request",
            json!({"id": "orphan", "name": "cargo_test", "arguments": {"filter": b64("x")}}),
        ),
    ]
}

/// Writes the fixture workspace (replacing it).
#[test]
#[ignore = "writes the committed fixtures; run by hand after changing them"]
fn write_jp_fixture_workspace() {
    let root = workspace();
    let base = root.join(".jp").join("conversations");
    let _ = std::fs::remove_dir_all(&base);
    for c in conversations() {
        let dir = if c.archived {
            base.join(".archive").join(c.name)
        } else {
            base.join(c.name)
        };
        std::fs::create_dir_all(&dir).expect("mkdir");
        std::fs::write(dir.join("events.json"), &c.events).expect("write");
        std::fs::write(dir.join("metadata.json"), &c.metadata).expect("write");
        if let Some(b) = &c.base_config {
            std::fs::write(dir.join("base_config.json"), b).expect("write");
        }
    }
}

//! Resource deduplication: each identity case of RFD 067, the threshold, the
//! lookback, both switches (also changed mid-conversation), deliveries that
//! compaction removed, chains, the shape of replacements, and the config
//! errors.

use jpstore_blobstore::BlobId;
use serde_json::{json, Value};

use super::*;
use crate::event::json::{parse_entry, ParseMode};
use crate::event::{BlobRef, Block, ChatRequest, Entry, EventKind, Payload};
use crate::projection::{view, view_traced, view_with_config};
use crate::timestamp::Timestamp;

/// Entries from JSON values; inline content becomes a reference to its hash
/// (no blob store: the pass never reads content).
fn stream(lines: &[Value]) -> Vec<Entry<BlobRef>> {
    lines
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let mut v = v.clone();
            v["timestamp"] = Timestamp::from_unix(1_700_000_000 + i as i64, 0)
                .expect("time")
                .to_string()
                .into();
            parse_entry(&v, ParseMode::Lenient)
                .expect("valid entry")
                .hashed()
        })
        .collect()
}

fn ts() -> Value {
    json!({"type": "turn_start"})
}
fn q(s: &str) -> Value {
    json!({"type": "chat_request", "content": s})
}
fn attach(resources: &[(&str, &str)]) -> Value {
    let r: Vec<Value> = resources
        .iter()
        .map(|(uri, text)| json!({"uri": uri, "text": text, "mimeType": "text/x-rust"}))
        .collect();
    json!({"type": "chat_request", "content": "look", "resources": r})
}
fn call(id: &str, name: &str) -> Value {
    json!({"type": "tool_call_request", "id": id, "name": name, "arguments": {}})
}
fn block(uri: &str, text: &str) -> Value {
    json!({"type": "resource", "resource": {"uri": uri, "text": text}})
}
fn resp(id: &str, blocks: Vec<Value>) -> Value {
    json!({"type": "tool_call_response", "id": id, "content": blocks, "is_error": false})
}
/// One turn where tool `name` (call `id`) reads `uri` with content `text`.
fn read(id: &str, name: &str, uri: &str, text: &str) -> Vec<Value> {
    vec![
        ts(),
        q("read it"),
        call(id, name),
        resp(id, vec![block(uri, text)]),
    ]
}
fn delta(d: Value) -> Value {
    json!({"type": "config_delta", "delta": d})
}
fn body(n: usize, seed: char) -> String {
    std::iter::repeat_n(seed, n).collect()
}
fn sha(text: &str) -> BlobId {
    BlobId::of(text.as_bytes())
}

const FOO: &str = "file:///project/src/foo.rs";
const BAR: &str = "file:///project/src/bar.rs";

/// The settings of a config given as JSON.
fn cfg(v: Value) -> crate::config::Settings {
    match v {
        Value::Object(o) => crate::config::Settings::parse(&o).expect("good settings"),
        _ => panic!("config must be an object"),
    }
}

/// What the model gets for each resource of the view, in order: `FULL uri`
/// or `REF <message>`.
fn outcomes(view: &[Entry<Payload>]) -> Vec<String> {
    let mut out = Vec::new();
    let text = |p: &Payload| match p {
        Payload::Inline(b) => String::from_utf8(b.clone()).expect("utf-8"),
        Payload::Ref(_) => panic!("a reference message is inline"),
    };
    for e in view {
        match e.event().map(|e| &e.kind) {
            Some(EventKind::ChatRequest(r)) => {
                for res in &r.resources {
                    match res.content.payload() {
                        Payload::Ref(_) => out.push(format!("FULL {}", res.uri)),
                        p => out.push(format!("REF {}", text(p))),
                    }
                }
            }
            Some(EventKind::ToolCallResponse(r)) => {
                for b in &r.content {
                    match b {
                        Block::Resource(rb) => out.push(format!("FULL {}", rb.resource.uri)),
                        Block::Text(t) if matches!(t.text, Payload::Inline(_)) => {
                            let s = text(&t.text);
                            if s.starts_with("The content of") {
                                out.push(format!("REF {s}"));
                            }
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    out
}

fn run(lines: &[Value], base: Value) -> Vec<String> {
    outcomes(&view_with_config(&stream(lines), &cfg(base)))
}

fn tool_ref(uri: &str, text: &str, id: &str, turn: u64) -> String {
    format!(
        "REF The content of {uri} is identical to the result of tool call `{id}` in turn {turn} \
         (checksum: sha256:{}). The file has not changed. Refer to that earlier result for the \
         full contents.",
        sha(text)
    )
}

fn attachment_ref(uri: &str, text: &str, turn: u64) -> String {
    format!(
        "REF The content of {uri} is identical to the attachment at turn {turn} (checksum: \
         sha256:{}). The file has not changed. Refer to the attached content.",
        sha(text)
    )
}

fn full(uri: &str) -> String {
    format!("FULL {uri}")
}

// ----- identity (RFD 067, "How matching handles identity correctly") ---------

#[test]
fn same_file_different_content_is_delivered() {
    let (a, b) = (body(1000, 'a'), body(1000, 'b'));
    let mut lines = read("c0", "fs_read_file", FOO, &a);
    lines.extend(read("c1", "fs_read_file", FOO, &b));
    assert_eq!(run(&lines, json!({})), [full(FOO), full(FOO)]);
}

#[test]
fn different_files_same_content_are_delivered() {
    let a = body(1000, 'a');
    let mut lines = read("c0", "fs_read_file", FOO, &a);
    lines.extend(read("c1", "fs_read_file", BAR, &a));
    assert_eq!(run(&lines, json!({})), [full(FOO), full(BAR)]);
}

#[test]
fn same_file_same_content_is_a_reference() {
    let a = body(1000, 'a');
    let mut lines = read("c0", "fs_read_file", FOO, &a);
    lines.extend(read("c1", "fs_read_file", FOO, &a));
    assert_eq!(
        run(&lines, json!({})),
        [full(FOO), tool_ref(FOO, &a, "c0", 0)]
    );
}

#[test]
fn attachment_then_tool_for_the_same_file_is_a_reference() {
    let a = body(1000, 'a');
    let mut lines = vec![ts(), attach(&[(FOO, &a)])];
    lines.extend(read("c1", "fs_read_file", FOO, &a));
    assert_eq!(
        run(&lines, json!({})),
        [full(FOO), attachment_ref(FOO, &a, 0)]
    );
}

#[test]
fn same_line_range_twice_is_a_reference() {
    let range = format!("{FOO}#L10-200");
    let a = body(800, 'r');
    let mut lines = read("c0", "fs_read_file", &range, &a);
    lines.extend(read("c1", "fs_read_file", &range, &a));
    assert_eq!(
        run(&lines, json!({})),
        [full(&range), tool_ref(&range, &a, "c0", 0)]
    );
}

#[test]
fn line_range_against_the_full_file_is_delivered() {
    // Even with the same bytes: the fragment makes another URI.
    let a = body(800, 'r');
    let range = format!("{FOO}#L10-200");
    let mut lines = vec![ts(), attach(&[(FOO, &a)])];
    lines.extend(read("c1", "fs_read_file", &range, &a));
    assert_eq!(run(&lines, json!({})), [full(FOO), full(&range)]);
}

#[test]
fn uris_are_compared_as_given() {
    let a = body(800, 'a');
    let dotted = "file:///project/./src/foo.rs";
    let mut lines = read("c0", "fs_read_file", FOO, &a);
    lines.extend(read("c1", "fs_read_file", dotted, &a));
    assert_eq!(run(&lines, json!({})), [full(FOO), full(dotted)]);
}

// ----- threshold and lookback ---------------------------------------------------

#[test]
fn only_resources_larger_than_min_bytes_are_replaced() {
    let at = body(300, 'a');
    let over = body(301, 'b');
    let mut lines = read("c0", "t", FOO, &at);
    lines.extend(read("c1", "t", FOO, &at));
    lines.extend(read("c2", "t", BAR, &over));
    lines.extend(read("c3", "t", BAR, &over));
    assert_eq!(
        run(&lines, json!({})),
        [
            full(FOO),
            full(FOO),
            full(BAR),
            tool_ref(BAR, &over, "c2", 2)
        ]
    );
    // The threshold comes from the config.
    let conf = json!({"conversation": {"deduplication": {"min_bytes": 299}}});
    assert_eq!(
        run(&lines, conf),
        [
            full(FOO),
            tool_ref(FOO, &at, "c0", 0),
            full(BAR),
            tool_ref(BAR, &over, "c2", 2)
        ]
    );
}

/// Reads of FOO (same content) at the given turns, other turns without.
fn reads_at(turns: &[u64], last: u64, text: &str) -> Vec<Value> {
    let mut lines = Vec::new();
    for t in 0..=last {
        if turns.contains(&t) {
            lines.extend(read(&format!("c{t}"), "fs_read_file", FOO, text));
        } else {
            lines.extend([ts(), q("talk")]);
        }
    }
    lines
}

#[test]
fn the_original_must_be_within_lookback_turns() {
    let a = body(1000, 'a');
    // Default 30: 30 turns back is within, 31 is not.
    assert_eq!(
        run(&reads_at(&[0, 30], 30, &a), json!({})),
        [full(FOO), tool_ref(FOO, &a, "c0", 0)]
    );
    assert_eq!(
        run(&reads_at(&[0, 31], 31, &a), json!({})),
        [full(FOO), full(FOO)]
    );
    // Configured; a copy delivered again in full is the new original.
    let conf = json!({"conversation": {"deduplication": {"lookback_turns": 2}}});
    assert_eq!(
        run(&reads_at(&[0, 2, 5, 6], 6, &a), conf),
        [
            full(FOO),
            tool_ref(FOO, &a, "c0", 0),
            full(FOO),
            tool_ref(FOO, &a, "c5", 5)
        ]
    );
}

// ----- switches ----------------------------------------------------------------

#[test]
fn the_conversation_switch_turns_it_off() {
    let a = body(1000, 'a');
    let lines = reads_at(&[0, 1], 1, &a);
    let off = json!({"conversation": {"deduplication": {"enabled": false}}});
    assert_eq!(run(&lines, off), [full(FOO), full(FOO)]);
    let on = json!({"conversation": {"deduplication": {"enabled": true}}});
    assert_eq!(run(&lines, on), [full(FOO), tool_ref(FOO, &a, "c0", 0)]);
}

#[test]
fn the_per_tool_switch_turns_it_off_for_that_tool() {
    let a = body(1000, 'a');
    let mut lines = read("c0", "fs_read_file", FOO, &a);
    lines.extend(read("c1", "fs_read_file", FOO, &a));
    lines.extend(read("c2", "cat", FOO, &a));
    let conf = json!({"conversation": {"tools": {"fs_read_file": {"deduplicate": false}}}});
    // The copy of the switched-off tool is delivered, and is itself a full
    // delivery that later copies may point at.
    assert_eq!(
        run(&lines, conf),
        [full(FOO), full(FOO), tool_ref(FOO, &a, "c1", 1)]
    );
}

#[test]
fn the_config_in_effect_at_the_event_decides() {
    let a = body(1000, 'a');
    let mut lines = read("c0", "fs_read_file", FOO, &a);
    lines.extend(read("c1", "fs_read_file", FOO, &a));
    lines.push(delta(
        json!({"conversation": {"deduplication": {"enabled": false}}}),
    ));
    lines.extend(read("c2", "fs_read_file", FOO, &a));
    lines.push(delta(
        json!({"conversation": {"deduplication": {"enabled": true}, "tools": {"fs_read_file": {"deduplicate": false}}}}),
    ));
    lines.extend(read("c3", "fs_read_file", FOO, &a));
    lines.extend(read("c4", "cat", FOO, &a));
    lines.push(delta(
        json!({"conversation": {"tools": {"fs_read_file": {"deduplicate": true}}}}),
    ));
    lines.extend(read("c5", "fs_read_file", FOO, &a));
    assert_eq!(
        run(&lines, json!({})),
        [
            full(FOO),
            tool_ref(FOO, &a, "c0", 0),
            full(FOO),
            full(FOO),
            tool_ref(FOO, &a, "c3", 3),
            tool_ref(FOO, &a, "c3", 3),
        ]
    );
    // A delta inside the same turn applies from its place on.
    let mut lines = read("c0", "fs_read_file", FOO, &a);
    lines.extend([
        call("c1", "fs_read_file"),
        resp("c1", vec![block(FOO, &a)]),
        delta(json!({"conversation": {"deduplication": {"enabled": false}}})),
        call("c2", "fs_read_file"),
        resp("c2", vec![block(FOO, &a)]),
    ]);
    assert_eq!(
        run(&lines, json!({})),
        [full(FOO), tool_ref(FOO, &a, "c0", 0), full(FOO)]
    );
}

// ----- compaction ----------------------------------------------------------------

fn compaction(from: u64, to: u64, extra: Value) -> Value {
    let mut c = json!({"type": "compaction", "from_turn": from, "to_turn": to});
    if let (Value::Object(c), Value::Object(e)) = (&mut c, extra) {
        c.extend(e);
    }
    c
}

#[test]
fn a_delivery_compaction_removed_is_not_referenced() {
    let a = body(1000, 'a');
    for policy in [
        json!({"tool_calls": {"policy": "strip", "request": true, "response": true}}),
        json!({"tool_calls": {"policy": "omit"}}),
        json!({"summary": {"summary": "they read foo.rs"}}),
    ] {
        let mut lines = reads_at(&[0, 1], 1, &a);
        lines.push(compaction(0, 0, policy.clone()));
        assert_eq!(run(&lines, json!({})), [full(FOO)], "{policy}");
    }
    // A compaction that keeps the response (stripping only requests) keeps
    // the delivery, so the copy is a reference.
    let mut lines = reads_at(&[0, 1], 1, &a);
    lines.push(compaction(
        0,
        0,
        json!({"tool_calls": {"policy": "strip", "request": true, "response": false}}),
    ));
    assert_eq!(
        run(&lines, json!({})),
        [full(FOO), tool_ref(FOO, &a, "c0", 0)]
    );
    // The attachment of a summarized turn is gone too.
    let mut lines = vec![ts(), attach(&[(FOO, &a)])];
    lines.extend(read("c1", "fs_read_file", FOO, &a));
    lines.push(compaction(0, 0, json!({"summary": {"summary": "s"}})));
    assert_eq!(run(&lines, json!({})), [full(FOO)]);
}

#[test]
fn turns_are_the_views_turns() {
    // Turns 0-2 summarized into one view turn: the read of raw turn 3 is at
    // view turn 1.
    let a = body(1000, 'a');
    let mut lines = reads_at(&[3, 4], 4, &a);
    lines.push(compaction(0, 2, json!({"summary": {"summary": "s"}})));
    assert_eq!(
        run(&lines, json!({})),
        [full(FOO), tool_ref(FOO, &a, "c3", 1)]
    );
}

// ----- chains and shapes -------------------------------------------------------------

#[test]
fn a_chain_points_at_the_full_delivery() {
    let a = body(1000, 'a');
    let lines = reads_at(&[0, 1, 2], 2, &a);
    assert_eq!(
        run(&lines, json!({})),
        [
            full(FOO),
            tool_ref(FOO, &a, "c0", 0),
            tool_ref(FOO, &a, "c0", 0)
        ]
    );
}

#[test]
fn each_block_is_decided_alone_and_keeps_its_place() {
    let (a, b, c) = (body(1000, 'a'), body(1000, 'b'), body(1000, 'c'));
    let baz = "file:///project/src/baz.rs";
    let mut lines = vec![
        ts(),
        q("read"),
        call("c0", "fs_read_file"),
        resp("c0", vec![block(FOO, &a), block(BAR, &b)]),
    ];
    lines.extend([
        ts(),
        q("again"),
        call("c1", "fs_read_file"),
        resp(
            "c1",
            vec![
                block(FOO, &a),
                json!({"type": "text", "text": "3 files"}),
                block(baz, &c),
                block(BAR, &b),
            ],
        ),
    ]);
    let v = view_with_config(&stream(&lines), &crate::config::Settings::default());
    assert_eq!(
        outcomes(&v),
        [
            full(FOO),
            full(BAR),
            tool_ref(FOO, &a, "c0", 0),
            full(baz),
            tool_ref(BAR, &b, "c0", 0)
        ]
    );
    let Some(EventKind::ToolCallResponse(r)) = v.last().and_then(|e| e.event()).map(|e| &e.kind)
    else {
        panic!("the last event is the response");
    };
    let kept = Payload::Ref(BlobRef {
        id: sha("3 files"),
        size: 7,
    });
    assert!(matches!(&r.content[1], Block::Text(t) if t.text == kept));
    assert!(matches!(&r.content[0], Block::Text(t) if t.mime_type.is_none()));
}

#[test]
fn a_repeated_attachment_becomes_a_short_text_resource() {
    let a = body(1000, 'a');
    let formatted = json!({"uri": FOO, "text": a, "mimeType": "text/x-rust", "name": "src/foo.rs",
                           "formatted": body(2000, 'f')});
    let lines = vec![
        ts(),
        call("c0", "fs_read_file"),
        resp("c0", vec![block(FOO, &a)]),
        ts(),
        json!({"type": "chat_request", "content": "again", "resources": [formatted]}),
    ];
    let v = view_with_config(&stream(&lines), &crate::config::Settings::default());
    let Some(EventKind::ChatRequest(ChatRequest { resources, .. })) =
        v.last().and_then(|e| e.event()).map(|e| &e.kind)
    else {
        panic!("the last event is the request");
    };
    let r = &resources[0];
    assert_eq!(r.uri, FOO);
    assert_eq!(r.name.as_deref(), Some("src/foo.rs"));
    assert_eq!(r.mime_type.as_deref(), Some("text/plain"));
    assert_eq!(r.formatted, None, "formatted is not sent either");
    assert_eq!(
        outcomes(&v),
        [full(FOO), tool_ref(FOO, &a, "c0", 0)],
        "matched on the raw content, not on formatted"
    );
    // Saved: raw content and formatted, less the message.
    let t = view_traced(&stream(&lines), &crate::config::Settings::default());
    let msg = tool_ref(FOO, &a, "c0", 0).len() as u64 - 4;
    assert_eq!(t.dedup.bytes_saved(), 3000 - msg);
}

#[test]
fn formatted_is_not_part_of_the_identity() {
    let (a, b) = (body(1000, 'a'), body(1000, 'b'));
    let same_formatted = |text: &str| json!({"type": "resource", "resource": {"uri": FOO, "text": text, "formatted": "F"}});
    let lines = vec![
        ts(),
        call("c0", "t"),
        resp("c0", vec![same_formatted(&a)]),
        ts(),
        call("c1", "t"),
        resp("c1", vec![same_formatted(&b)]),
    ];
    assert_eq!(run(&lines, json!({})), [full(FOO), full(FOO)]);
}

#[test]
fn binary_resources_and_non_file_uris() {
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::STANDARD.encode(vec![7u8; 900]);
    let url = "https://example.com/logo.png";
    let png = json!({"type": "resource", "resource": {"uri": url, "blob": bytes, "mimeType": "image/png"}});
    let lines = vec![
        ts(),
        call("c0", "web_fetch"),
        resp("c0", vec![png.clone()]),
        ts(),
        call("c1", "web_fetch"),
        resp("c1", vec![png]),
    ];
    let out = run(&lines, json!({}));
    assert_eq!(out[0], full(url));
    assert_eq!(
        out[1],
        format!(
            "REF The content of {url} is identical to the result of tool call `c0` in turn 0 \
             (checksum: sha256:{}). The resource has not changed. Refer to that earlier result \
             for the full contents.",
            BlobId::of(&[7u8; 900])
        )
    );
}

// ----- the plain view, traces and config errors ------------------------------------

#[test]
fn the_plain_view_does_not_deduplicate() {
    let a = body(1000, 'a');
    let lines = reads_at(&[0, 1], 1, &a);
    assert_eq!(outcomes(&view(&stream(&lines))), [full(FOO), full(FOO)]);
    // Apart from the replaced block, the views are equal.
    let plain = view(&stream(&lines));
    let with = view_with_config(&stream(&lines), &crate::config::Settings::default());
    assert_eq!(plain.len(), with.len());
    let differ: Vec<usize> = (0..plain.len()).filter(|&i| plain[i] != with[i]).collect();
    assert_eq!(differ, [7]);
}

#[test]
fn the_trace_names_origins_and_replacements() {
    let a = body(1000, 'a');
    let mut lines = vec![delta(json!({"x": 1}))];
    lines.extend(reads_at(&[0, 1], 1, &a));
    let t = view_traced(&stream(&lines), &crate::config::Settings::default());
    // The delta is not part of the view: entry i of the view is entry i+1.
    assert_eq!(t.origin, (1..=8).collect::<Vec<_>>());
    assert_eq!(t.dedup.replacements.len(), 1);
    let r = &t.dedup.replacements[0];
    assert_eq!((r.turn, r.original_turn), (1, 0));
    assert_eq!(r.original, Origin::ToolCall("c0".into()));
    assert_eq!(r.checksum, sha(&a));
    assert_eq!(r.bytes, 1000);
}

#[test]
fn a_setting_of_the_wrong_type_in_a_delta_is_not_applied_and_the_others_are() {
    let a = body(1000, 'a');
    let replaced = |conf: Value| {
        let mut lines = vec![delta(conf)];
        lines.extend(reads_at(&[0, 1], 1, &a));
        view_traced(&stream(&lines), &crate::config::Settings::default())
            .dedup
            .replacements
            .len()
    };
    assert_eq!(replaced(json!({})), 1, "the second read is replaced");
    for dedup in [
        json!({"enabled": "no"}),
        json!({"min_bytes": -1}),
        json!({"lookback_turns": 1.5}),
    ] {
        let conf = json!({"conversation": {"deduplication": dedup}});
        let Value::Object(o) = &conf else {
            panic!("an object")
        };
        crate::config::Settings::parse(o).expect_err("a bad setting");
        assert_eq!(replaced(conf.clone()), 1, "{conf} is not applied");
    }
    assert_eq!(
        replaced(json!({"conversation": {"deduplication": {"enabled": false}}})),
        0
    );
    assert_eq!(
        replaced(json!({"conversation": {"deduplication": {"enabled": "no", "min_bytes": 5000}}})),
        0,
        "the good setting beside a bad one applies"
    );
}

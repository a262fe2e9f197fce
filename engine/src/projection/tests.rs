//! One test per rule of jp-format.md sections 3-6, and property tests.

use proptest::prelude::*;
use serde_json::{json, Value};

use super::*;
use crate::event::json::{blob_ref_json, parse_entry, payload_json, render_entry, ParseMode};
use crate::event::{BlobRef, Entry, Payload};
use crate::timestamp::Timestamp;
use jpstore_blobstore::BlobId;

thread_local! {
    /// Content of the references the tests made, to show it.
    static CONTENT: std::cell::RefCell<HashMap<BlobId, Vec<u8>>> = Default::default();
}

fn remember(b: Vec<u8>) -> BlobRef {
    let r = BlobRef {
        id: BlobId::of(&b),
        size: b.len() as u64,
    };
    CONTENT.with(|c| c.borrow_mut().insert(r.id, b));
    r
}

/// Entries from compact JSON lines; `timestamp` defaults to second `i` of the
/// stream; inline content becomes a reference to its hash.
fn stream(lines: &[Value]) -> Vec<Entry<BlobRef>> {
    lines
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let mut v = v.clone();
            if v.get("timestamp").is_none() {
                v["timestamp"] = Timestamp::from_unix(1_700_000_000 + i as i64, 0)
                    .expect("time")
                    .to_string()
                    .into();
            }
            parse_entry(&v, ParseMode::Lenient)
                .expect("valid")
                .try_map_content(&mut |p| match p {
                    Payload::Inline(b) => Ok::<_, ()>(remember(b)),
                    Payload::Ref(r) => Ok(r),
                })
                .expect("map")
        })
        .collect()
}

/// A compact rendering of a view for assertions: one string per entry.
fn show(entries: &[Entry<Payload>]) -> Vec<String> {
    entries
        .iter()
        .map(|e| {
            let v = render_entry(e, &mut |p: &Payload, k| match p {
                Payload::Ref(r) => {
                    let b = CONTENT.with(|c| c.borrow().get(&r.id).cloned());
                    payload_json(&Payload::Inline(b.unwrap_or_default()), k)
                }
                _ => payload_json(p, k),
            })
            .expect("render");
            let t = v["type"].as_str().unwrap_or("?").to_owned();
            match t.as_str() {
                "turn_start" => "TS".into(),
                "chat_request" => format!("Q:{}", v["content"].as_str().unwrap_or("")),
                "chat_response" => {
                    if let Some(m) = v.get("message") {
                        format!("A:{}", m.as_str().unwrap_or(""))
                    } else if let Some(r) = v.get("reasoning") {
                        format!("R:{}", r.as_str().unwrap_or(""))
                    } else {
                        "D".into()
                    }
                }
                "tool_call_request" => {
                    format!("call {} {}", v["id"].as_str().unwrap_or(""), v["arguments"])
                }
                "tool_call_response" => {
                    format!("resp {} {}", v["id"].as_str().unwrap_or(""), v["content"])
                }
                "config_delta" => "CFG".into(),
                "inquiry_request" => "INQ".into(),
                other => format!("?{other}"),
            }
        })
        .collect()
}

fn ts() -> Value {
    json!({"type": "turn_start"})
}
fn q(s: &str) -> Value {
    json!({"type": "chat_request", "content": s})
}
fn a(s: &str) -> Value {
    json!({"type": "chat_response", "message": s})
}
fn r(s: &str) -> Value {
    json!({"type": "chat_response", "reasoning": s})
}
fn call(id: &str, name: &str) -> Value {
    json!({"type": "tool_call_request", "id": id, "name": name, "arguments": {"p": 1}})
}
fn resp(id: &str, text: &str) -> Value {
    json!({"type": "tool_call_response", "id": id, "content": text, "is_error": false})
}
fn compaction(from: u64, to: u64, extra: Value) -> Value {
    let mut c = json!({"type": "compaction", "from_turn": from, "to_turn": to});
    if let (Value::Object(c), Value::Object(e)) = (&mut c, extra) {
        c.extend(e);
    }
    c
}
fn at(mut v: Value, second: i64) -> Value {
    v["timestamp"] = Timestamp::from_unix(1_800_000_000 + second, 0)
        .expect("time")
        .to_string()
        .into();
    v
}

fn three_turns() -> Vec<Value> {
    vec![
        ts(),
        q("q0"),
        r("think0"),
        call("c0", "fs_read_file"),
        resp("c0", "file0"),
        a("a0"),
        ts(),
        q("q1"),
        r("think1"),
        call("c1", "cargo_check"),
        resp("c1", "out1"),
        a("a1"),
        ts(),
        q("q2"),
        a("a2"),
    ]
}

#[test]
fn without_compactions_the_view_is_the_conversation_events() {
    let s = stream(&three_turns());
    assert_eq!(show(&view(&s)).len(), 15);
    assert_eq!(project(&s).len(), 15);
}

#[test]
fn reasoning_strip_drops_reasoning_in_range_only() {
    let mut lines = three_turns();
    lines.push(compaction(0, 0, json!({"reasoning": "strip"})));
    let v = show(&view(&stream(&lines)));
    assert!(!v.contains(&"R:think0".to_string()));
    assert!(v.contains(&"R:think1".to_string()));
}

#[test]
fn tool_calls_omit_drops_both_sides() {
    let mut lines = three_turns();
    lines.push(compaction(1, 1, json!({"tool_calls": {"policy": "omit"}})));
    let v = show(&view(&stream(&lines)));
    assert!(v.iter().all(|e| !e.contains("c1")), "{v:?}");
    assert!(v.iter().any(|e| e.contains("c0")));
}

#[test]
fn strip_request_empties_arguments_and_keeps_id_and_name() {
    let mut lines = three_turns();
    lines.push(compaction(
        0,
        1,
        json!({"tool_calls": {"policy": "strip", "request": true, "response": false}}),
    ));
    let out = view(&stream(&lines));
    let v = show(&out);
    assert!(v.contains(&"call c0 {}".to_string()), "{v:?}");
    assert!(v.contains(&"resp c0 \"file0\"".to_string()), "{v:?}");
    let names: Vec<String> = out
        .iter()
        .filter_map(|e| match e.event().map(|e| &e.kind) {
            Some(EventKind::ToolCallRequest(r)) => Some(r.name.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(names, ["fs_read_file", "cargo_check"]);
}

#[test]
fn strip_response_replaces_content_with_the_tool_name_and_outcome() {
    let mut lines = vec![
        ts(),
        q("q"),
        call("c0", "fs_read_file"),
        resp("c0", "big"),
        call("c1", "cargo_test"),
        json!({"type": "tool_call_response", "id": "c1", "content": "failed", "is_error": true}),
        json!({"type": "tool_call_response", "id": "zz", "content": "no request", "is_error": false}),
    ];
    lines.push(compaction(
        0,
        0,
        json!({"tool_calls": {"policy": "strip", "request": false, "response": true}}),
    ));
    let out = project(&stream(&lines));
    let v = show(&out);
    assert!(
        v.contains(&"resp c0 \"[compacted] fs_read_file: success\"".to_string()),
        "{v:?}"
    );
    assert!(
        v.contains(&"resp c1 \"[compacted] cargo_test: error\"".to_string()),
        "{v:?}"
    );
    assert!(
        v.contains(&"resp zz \"[compacted] unknown: success\"".to_string()),
        "{v:?}"
    );
    let flags: Vec<bool> = out
        .iter()
        .filter_map(|e| match e.event().map(|e| &e.kind) {
            Some(EventKind::ToolCallResponse(r)) => Some(r.is_error),
            _ => None,
        })
        .collect();
    assert_eq!(flags, [false, true, false], "the error flag is kept");
}

#[test]
fn per_tool_overrides_keep_what_they_name() {
    let mut lines = three_turns();
    lines.push(compaction(0, 1, json!({
        "tool_calls": {"policy": "strip", "request": true, "response": true},
        "tool_overrides": {"fs_read_file": {"request": "keep"}, "cargo_check": {"response": "keep"}}
    })));
    let v = show(&view(&stream(&lines)));
    assert!(v.contains(&"call c0 {\"p\":1}".to_string()), "{v:?}");
    assert!(
        v.contains(&"resp c0 \"[compacted] fs_read_file: success\"".to_string()),
        "{v:?}"
    );
    assert!(v.contains(&"call c1 {}".to_string()), "{v:?}");
    assert!(v.contains(&"resp c1 \"out1\"".to_string()), "{v:?}");
}

#[test]
fn summary_replaces_turns_and_injects_three_events_with_the_first_timestamp() {
    let mut lines = three_turns();
    lines[0] = at(ts(), 5);
    lines.push(json!({"type": "config_delta", "delta": {"x": 1}}));
    lines.push(compaction(
        0,
        1,
        json!({"summary": {"summary": "S"}, "reasoning": "strip"}),
    ));
    // A config delta inside the summarized range passes through.
    lines.insert(3, json!({"type": "config_delta", "delta": {"y": 2}}));
    let out = project(&stream(&lines));
    let v = show(&out);
    assert_eq!(
        v,
        [
            "TS",
            "Q:[Summary of previous conversation]",
            "A:S",
            "CFG",
            "TS",
            "Q:q2",
            "A:a2",
            "CFG"
        ],
    );
    let first = out[0].event().expect("event").timestamp;
    assert_eq!(first, Timestamp::from_unix(1_800_000_005, 0).expect("time"));
    assert!(out[..3]
        .iter()
        .all(|e| e.event().expect("event").timestamp == first));
}

#[test]
fn a_newer_summary_inside_an_older_one_splits_it() {
    let mut lines: Vec<Value> = (0..5)
        .flat_map(|i| [ts(), q(&format!("q{i}")), a(&format!("a{i}"))])
        .collect();
    lines.push(at(
        compaction(0, 4, json!({"summary": {"summary": "OLD"}})),
        1,
    ));
    lines.push(at(
        compaction(2, 2, json!({"summary": {"summary": "NEW"}})),
        2,
    ));
    let v = show(&project(&stream(&lines)));
    let summaries: Vec<&String> = v.iter().filter(|s| s.starts_with("A:")).collect();
    assert_eq!(summaries, ["A:OLD", "A:NEW", "A:OLD"]);
}

#[test]
fn latest_timestamp_wins_and_ties_go_to_the_later_entry() {
    let base: Vec<Value> = (0..2)
        .flat_map(|i| {
            [
                ts(),
                q(&format!("q{i}")),
                r("thinking"),
                a(&format!("a{i}")),
            ]
        })
        .collect();
    // Older summary with a later stream position loses to a newer one.
    let mut lines = base.clone();
    lines.push(at(
        compaction(0, 1, json!({"summary": {"summary": "NEWER"}})),
        10,
    ));
    lines.push(at(
        compaction(0, 1, json!({"summary": {"summary": "OLDER"}})),
        5,
    ));
    assert!(show(&project(&stream(&lines))).contains(&"A:NEWER".to_string()));
    // Equal timestamps: the later in the stream wins.
    let mut lines = base.clone();
    lines.push(at(
        compaction(0, 1, json!({"summary": {"summary": "FIRST"}})),
        7,
    ));
    lines.push(at(
        compaction(0, 1, json!({"summary": {"summary": "SECOND"}})),
        7,
    ));
    assert!(show(&project(&stream(&lines))).contains(&"A:SECOND".to_string()));
    // Kinds are resolved separately: a newer mechanical compaction does not
    // undo an older reasoning strip.
    let mut lines = base;
    lines.push(at(compaction(0, 1, json!({"reasoning": "strip"})), 1));
    lines.push(at(
        compaction(0, 1, json!({"tool_calls": {"policy": "omit"}})),
        2,
    ));
    assert!(!show(&project(&stream(&lines)))
        .iter()
        .any(|e| e.starts_with("R:")));
}

#[test]
fn a_summary_overrides_the_other_kinds_and_ranges_are_clamped() {
    let mut lines = three_turns();
    lines.push(at(
        compaction(0, 99, json!({"summary": {"summary": "ALL"}})),
        1,
    ));
    lines.push(at(
        compaction(
            0,
            2,
            json!({"reasoning": "strip", "tool_calls": {"policy": "omit"}}),
        ),
        2,
    ));
    let v = show(&project(&stream(&lines)));
    assert_eq!(v, ["TS", "Q:[Summary of previous conversation]", "A:ALL"]);
    // A range starting past the last turn changes nothing.
    let mut lines = three_turns();
    lines.push(compaction(7, 9, json!({"summary": {"summary": "X"}})));
    assert_eq!(show(&project(&stream(&lines))).len(), 15);
}

#[test]
fn inquiries_are_untouched_by_policies_and_not_in_the_view() {
    let mut lines = vec![
        ts(),
        q("q"),
        json!({"type": "inquiry_request", "id": "i", "source": {"source": "user"}, "question": {"text": "?"}}),
        a("a"),
    ];
    lines.push(compaction(
        0,
        0,
        json!({"reasoning": "strip", "tool_calls": {"policy": "omit"}}),
    ));
    let projected = show(&project(&stream(&lines)));
    assert!(projected.contains(&"INQ".to_string()));
    assert!(!show(&view(&stream(&lines))).contains(&"INQ".to_string()));
}

#[test]
fn orphaned_requests_get_an_interrupted_response_and_orphaned_responses_go() {
    let lines = vec![
        ts(),
        q("q"),
        call("c1", "x"),
        call("c2", "y"),
        resp("c2", "ok"),
        resp("c9", "stray"),
        a("a"),
    ];
    let v = show(&view(&stream(&lines)));
    assert_eq!(
        v,
        [
            "TS",
            "Q:q",
            "call c1 {\"p\":1}",
            "resp c1 \"Tool call was interrupted.\"",
            "call c2 {\"p\":1}",
            "resp c2 \"ok\"",
            "A:a"
        ]
    );
    let out = view(&stream(&lines));
    let interrupted = out.iter().find_map(|e| match e.event().map(|e| &e.kind) {
        Some(EventKind::ToolCallResponse(r)) if r.id == "c1" => Some(r.is_error),
        _ => None,
    });
    assert_eq!(interrupted, Some(true));
}

#[test]
fn reused_tool_ids_pair_in_order() {
    let lines = vec![
        ts(),
        q("q"),
        call("t", "a"),
        resp("t", "1"),
        call("t", "b"),
        resp("t", "2"),
        call("t", "c"),
    ];
    let v = show(&view(&stream(&lines)));
    assert_eq!(
        &v[v.len() - 2..],
        ["call t {\"p\":1}", "resp t \"Tool call was interrupted.\""]
    );
    assert_eq!(v.iter().filter(|e| e.starts_with("resp")).count(), 3);
}

#[test]
fn views_with_refs_hold_references_not_content() {
    let lines = vec![ts(), q("q"), call("c", "x"), resp("c", "some content")];
    let out = view(&stream(&lines));
    let Some(EventKind::ToolCallResponse(r)) = out[3].event().map(|e| &e.kind) else {
        panic!("a response")
    };
    let Block::Text(t) = &r.content[0] else {
        panic!("text")
    };
    let Payload::Ref(b) = &t.text else {
        panic!("a reference")
    };
    assert_eq!(blob_ref_json(b)["size"], 12);
}

// ----- properties ------------------------------------------------------------

fn arb_line() -> impl Strategy<Value = Value> {
    let id = prop::sample::select(vec!["a", "b", "c"]);
    prop_oneof![
        3 => Just(ts()),
        2 => "[a-z]{0,3}".prop_map(|s| q(&s)),
        1 => Just(r("r")),
        2 => Just(a("m")),
        3 => (id.clone(), prop::sample::select(vec!["x", "y"])).prop_map(|(i, n)| call(i, n)),
        3 => (id, any::<bool>()).prop_map(|(i, e)| json!({"type": "tool_call_response", "id": i, "content": "c", "is_error": e})),
        1 => Just(json!({"type": "config_delta", "delta": {"k": 1}})),
        1 => Just(json!({"type": "mystery", "k": 1})),
        2 => (0u64..6, 0u64..6, 0u8..4, any::<bool>(), 0i64..4).prop_map(|(x, y, k, keep, t)| {
            let extra = match k {
                0 => json!({"summary": {"summary": "S"}}),
                1 => json!({"reasoning": "strip"}),
                2 => json!({"tool_calls": {"policy": "omit"}}),
                _ => json!({"tool_calls": {"policy": "strip", "request": true, "response": true}}),
            };
            let mut c = at(compaction(x.min(y), x.max(y), extra), t);
            if keep {
                c["tool_overrides"] = json!({"x": {"request": "keep", "response": "keep"}});
            }
            c
        }),
    ]
}

/// The stored form of a projected stream (inline text stored as references
/// to its hash), to project it again.
fn restore(entries: &[Entry<Payload>]) -> Vec<Entry<BlobRef>> {
    entries
        .iter()
        .map(|e| {
            e.clone()
                .try_map_content(&mut |p| match p {
                    Payload::Inline(b) => Ok::<_, ()>(remember(b)),
                    Payload::Ref(r) => Ok(r),
                })
                .expect("map")
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn views_never_leave_a_response_without_its_request(lines in prop::collection::vec(arb_line(), 0..40)) {
        let out = view(&stream(&lines));
        let mut open: HashMap<String, usize> = HashMap::new();
        for e in &out {
            match e.event().map(|e| &e.kind) {
                Some(EventKind::ToolCallRequest(r)) => *open.entry(r.id.clone()).or_default() += 1,
                Some(EventKind::ToolCallResponse(r)) => {
                    let n = open.get_mut(&r.id);
                    prop_assert!(n.as_ref().is_some_and(|n| **n > 0), "response {} without request", r.id);
                    if let Some(n) = n { *n -= 1; }
                }
                Some(EventKind::Compaction(_) | EventKind::ConfigDelta(_) | EventKind::InquiryRequest(_) | EventKind::InquiryResponse(_)) => {
                    prop_assert!(false, "not a view event");
                }
                _ => {}
            }
        }
        prop_assert!(open.values().all(|n| *n == 0), "a request without response: {open:?}");
    }

    #[test]
    fn projecting_twice_equals_projecting_once(lines in prop::collection::vec(arb_line(), 0..40)) {
        let once = project(&stream(&lines));
        let twice = project(&restore(&once));
        prop_assert_eq!(show(&twice), show(&once));
        let v1 = view(&stream(&lines));
        let v2 = view(&restore(&v1));
        prop_assert_eq!(show(&v2), show(&v1));
    }
}

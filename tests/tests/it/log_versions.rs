//! The two log formats hold the same conversations: any generated
//! conversation appended to a version 1 log and to a version 2 log reads
//! back equal and gives the same view (every projection rule: compactions
//! and their undos, summaries, stripped and omitted tool calls, per-tool
//! overrides, orphans, deduplication with config deltas), the same export
//! and the same provider bodies; `view --refs` of the version 2 log differs
//! only where a body part is shown as a reference, and each reference
//! names the field of the entry it stands for.

use jpstore_engine::internal::{ConversationIdInterior as _, StoreInterior as _};
use std::path::Path;

use jpstore_engine::conversation::ConversationId;
use jpstore_engine::event::{Entry, EventKind, Object};
use jpstore_engine::export::ContentMode;
use jpstore_engine::internal::export::conversation_json;
use jpstore_engine::timestamp::Timestamp;
use jpstore_engine::Framing;
use jpstore_engine::{NewConversation, Store, StoreOptions};
use jpstore_integrations::provider::{
    provider_request_view, write_provider_request_view, Provider,
};
use jpstore_tests::crash::parse;
use jpstore_tests::ts;
use proptest::prelude::*;
use serde_json::{json, Value};

/// One tool call of a generated turn.
#[derive(Debug, Clone)]
struct Call {
    tool: u8,
    /// The response: none (an orphan request), text, or a resource.
    response: Option<(bool, u8, u8)>,
    error: bool,
}

/// One step of a generated conversation.
#[derive(Debug, Clone)]
enum Step {
    Turn {
        request: String,
        attachments: Vec<(u8, u8)>,
        reasoning: Option<(String, bool)>,
        calls: Vec<Call>,
        answer: Option<String>,
    },
    Delta(u8),
    Compaction {
        from: u8,
        len: u8,
        summary: bool,
        reasoning: bool,
        tools: u8,
        overrides: bool,
    },
    Undo(u8),
    /// An exchange of a rarer shape (see [`rare`]).
    Rare(u8),
}

const TOOLS: [&str; 3] = ["fs_read_file", "fs_grep_files", "cargo_check"];

fn call() -> impl Strategy<Value = Call> {
    (
        0u8..3,
        prop::option::weighted(0.85, (any::<bool>(), 0u8..3, 0u8..3)),
        prop::bool::weighted(0.1),
    )
        .prop_map(|(tool, response, error)| Call {
            tool,
            response,
            error,
        })
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (
            "[a-z \"\\\\é\n]{0,40}",
            prop::collection::vec((0u8..3, 0u8..3), 0..3),
            prop::option::of(("[a-z ]{0,30}", any::<bool>())),
            prop::collection::vec(call(), 0..4),
            prop::option::of("[a-z .]{0,30}"),
        )
            .prop_map(|(request, attachments, reasoning, calls, answer)| Step::Turn {
                request,
                attachments,
                reasoning,
                calls,
                answer,
            }),
        1 => (0u8..4).prop_map(Step::Delta),
        2 => (0u8..8, 0u8..4, any::<bool>(), any::<bool>(), 0u8..3, any::<bool>()).prop_map(
            |(from, len, summary, reasoning, tools, overrides)| Step::Compaction {
                from,
                len,
                summary,
                reasoning,
                tools,
                overrides,
            }
        ),
        1 => (0u8..4).prop_map(Step::Undo),
        2 => (0u8..RARE).prop_map(Step::Rare),
    ]
}

/// How many shapes [`rare`] knows.
const RARE: u8 = 6;

/// Exchange `k` of the rarer shapes a request body is made from: arguments
/// of every kind of value, signatures deep in the metadata (or a key of that
/// name holding something else first), structured output, tool responses
/// of several text blocks (blank ones among them).
fn rare(k: u8, id: &str, tick: &mut dyn FnMut() -> String) -> Vec<Value> {
    let call = |tick: &mut dyn FnMut() -> String, arguments: Value| {
        json!({"type": "tool_call_request", "timestamp": tick(), "id": id,
            "name": "fs_grep_files", "arguments": arguments})
    };
    let response = |tick: &mut dyn FnMut() -> String, content: Value| {
        json!({"type": "tool_call_response", "timestamp": tick(), "id": id,
            "content": content, "is_error": false})
    };
    match k {
        0 => vec![
            call(
                tick,
                json!({"pattern": "fn \"main\"\n\t\u{1}é😀", "n": -3, "f": 1.5e-7,
                "big": u64::MAX, "nested": {"a": [null, true, {"b": []}], "c": {}},
                "sig": signature(7)}),
            ),
            response(
                tick,
                json!([{"type": "text", "text": "one"}, {"type": "text", "text": "  \n "},
                {"type": "text", "text": "\u{a0}\u{3000}"}, {"type": "text", "text": "three"}]),
            ),
        ],
        1 => vec![
            json!({"type": "chat_response", "timestamp": tick(), "reasoning": "deep",
            "metadata": {"signature": {"signature": 3}, "list": [{"x": 1}, {"signature": signature(3)}],
                "later": {"signature": "not this one"}}}),
        ],
        2 => vec![
            json!({"type": "chat_response", "timestamp": tick(), "reasoning": "short signature",
            "metadata": {"provider": {"signature": "abc"}}}),
        ],
        3 => vec![json!({"type": "chat_response", "timestamp": tick(),
            "data": {"answer": 42, "why": ["a", "b\"c"]}})],
        4 => vec![call(tick, json!({})), response(tick, json!(""))],
        _ => vec![
            json!({"type": "chat_request", "timestamp": tick(), "content": "   ", "author": "me",
                "schema": {"type": "object"}}),
            json!({"type": "chat_response", "timestamp": tick(), "message": "\n"}),
        ],
    }
}

/// Content of resource `c` (large enough to be deduplicated).
fn content(c: u8) -> String {
    format!(
        "{c}: {}",
        "fn main() { println!(\"same content\"); }\n".repeat(12)
    )
}

fn signature(seed: usize) -> String {
    use base64::Engine as _;
    let bytes: Vec<u8> = (0..96).map(|i| (i * 31 + seed * 7) as u8).collect();
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// The steps as batches of JSON entries, one per step, with increasing
/// timestamps; undos name compactions made before them (or are left out).
fn batches(steps: &[Step]) -> Vec<Vec<Value>> {
    let mut t = 0u64;
    let mut tick = || {
        t += 1;
        ts(t)
    };
    let mut out = Vec::new();
    let mut compactions = 0u8;
    let mut call_id = 0;
    for (n, s) in steps.iter().enumerate() {
        let mut batch = Vec::new();
        match s {
            Step::Turn {
                request,
                attachments,
                reasoning,
                calls,
                answer,
            } => {
                batch.push(json!({"type": "turn_start", "timestamp": tick()}));
                let mut req =
                    json!({"type": "chat_request", "timestamp": tick(), "content": request});
                if !attachments.is_empty() {
                    req["resources"] = attachments
                        .iter()
                        .map(|(u, c)| json!({"uri": format!("file:///src/{u}.rs"), "text": content(*c), "mimeType": "text/rust"}))
                        .collect();
                }
                batch.push(req);
                if let Some((text, signed)) = reasoning {
                    let mut r =
                        json!({"type": "chat_response", "timestamp": tick(), "reasoning": text});
                    if *signed {
                        r["metadata"] = json!({"anthropic": {"signature": signature(n)}});
                    }
                    batch.push(r);
                }
                for c in calls {
                    call_id += 1;
                    let id = format!("call_{call_id}");
                    batch.push(json!({"type": "tool_call_request", "timestamp": tick(), "id": id,
                        "name": TOOLS[c.tool as usize], "arguments": {"path": format!("src/{}.rs", c.tool), "n": call_id}}));
                    if let Some((text, u, k)) = c.response {
                        let content = if text {
                            json!(format!("output of {id}"))
                        } else {
                            json!([{"type": "resource", "resource": {"uri": format!("file:///src/{u}.rs"), "text": content(k)}},
                                   {"type": "text", "text": "and a note", "mimeType": "text/plain"}])
                        };
                        batch.push(
                            json!({"type": "tool_call_response", "timestamp": tick(), "id": id,
                            "content": content, "is_error": c.error}),
                        );
                    }
                }
                if let Some(a) = answer {
                    batch.push(json!({"type": "chat_response", "timestamp": tick(), "message": a}));
                }
            }
            Step::Delta(d) => {
                let delta = match d {
                    0 => json!({"conversation": {"deduplication": {"enabled": false}}}),
                    1 => {
                        json!({"conversation": {"deduplication": {"enabled": true, "min_bytes": 10}}})
                    }
                    2 => {
                        json!({"conversation": {"tools": {"fs_read_file": {"deduplicate": false}}}})
                    }
                    _ => json!({"conversation": {"deduplication": {"lookback_turns": 1}}}),
                };
                batch.push(json!({"type": "config_delta", "timestamp": tick(), "delta": delta}));
            }
            Step::Compaction {
                from,
                len,
                summary,
                reasoning,
                tools,
                overrides,
            } => {
                let mut c = json!({"type": "compaction", "timestamp": tick(),
                    "from_turn": from, "to_turn": u64::from(*from) + u64::from(*len)});
                if *summary {
                    c["summary"] = json!({"summary": format!("summary {n}")});
                }
                if *reasoning {
                    c["reasoning"] = json!("strip");
                }
                match tools {
                    1 => c["tool_calls"] = json!({"policy": "omit"}),
                    2 => {
                        c["tool_calls"] =
                            json!({"policy": "strip", "request": true, "response": true})
                    }
                    _ => {}
                }
                if *overrides {
                    c["tool_overrides"] = json!({"fs_grep_files": {"response": "keep"}});
                }
                batch.push(c);
                compactions += 1;
            }
            Step::Undo(k) => {
                if compactions == 0 {
                    continue;
                }
                batch.push(json!({"type": "compaction_undo", "timestamp": tick(), "undoes": k % compactions}));
            }
            Step::Rare(k) => {
                call_id += 1;
                batch.extend(rare(*k, &format!("call_{call_id}"), &mut tick));
            }
        }
        out.push(batch);
    }
    out
}

fn store_of(dir: &Path, framing: Framing) -> Store {
    let options = StoreOptions {
        new_log_framing: framing,
        ..StoreOptions::default()
    };
    Store::init_dir(dir, options).expect("init")
}

/// The conversation of `batches` in a new store of `framing`.
fn conversation(dir: &Path, framing: Framing, batches: &[Vec<Value>]) -> (Store, ConversationId) {
    let store = store_of(dir, framing);
    let id = ConversationId::parse("c").expect("id");
    let mut w = store
        .create(NewConversation {
            id: Some(id.clone()),
            base_config: Some(Object::new()),
            created: Some(Timestamp::from_unix(1_780_000_000, 7).expect("time")),
            ..NewConversation::default()
        })
        .expect("create");
    for b in batches {
        w.append(parse(b)).expect("append");
    }
    w.close();
    (store, id)
}

/// Checks that the version 2 `view --refs` is the version 1 one but where
/// a body part is a reference `{"$text": "<entry>/<field>", "size": n}`:
/// there the entry's field (in `entries`) must be the value the version 1
/// view shows.
fn same_but_references(v1: &Value, v2: &Value, entries: &[Entry], key: Option<&str>) {
    match (v1, v2) {
        (_, Value::Object(o)) if o.contains_key("$text") => {
            let reference = o["$text"].as_str().expect("a reference is a string");
            let (entry, field) = reference.split_once('/').expect("<entry>/<field>");
            assert_eq!(
                Some(field),
                key,
                "{reference} stands for the field it is the value of"
            );
            let entry: usize = entry.parse().expect("an entry index");
            let json = jpstore_engine::internal::event::json::render_entry(
                &entries[entry],
                &mut |r, _| {
                    Ok::<_, String>(jpstore_engine::internal::event::json::blob_ref_json(r))
                },
            )
            .expect("render");
            assert_eq!(&json[field], v1, "{reference}");
            if let Value::String(s) = v1 {
                assert_eq!(o["size"], json!(s.len()), "{reference}: the size of a text");
            }
        }
        (Value::Object(a), Value::Object(b)) => {
            assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
            for (k, va) in a {
                same_but_references(va, &b[k], entries, Some(k));
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            assert_eq!(a.len(), b.len());
            for (x, y) in a.iter().zip(b) {
                same_but_references(x, y, entries, None);
            }
        }
        _ => assert_eq!(v1, v2),
    }
}

fn check(steps: &[Step]) {
    let batches: Vec<Vec<Value>> = batches(steps)
        .into_iter()
        .filter(|b| !b.is_empty())
        .collect();
    let dir = tempfile::tempdir().expect("tempdir");
    let (s1, id) = conversation(&dir.path().join("v1"), Framing::V1, &batches);
    let (s2, _) = conversation(&dir.path().join("v2"), Framing::V2, &batches);
    let log = |s: &Store| std::fs::read(s.display(&id.log_path())).expect("read log");
    assert_eq!(jpstore_tests::log_version(&log(&s1)), 1);
    assert_eq!(jpstore_tests::log_version(&log(&s2)), 2);
    let (c1, c2) = (
        s1.read(&id).expect("read v1"),
        s2.read(&id).expect("read v2"),
    );
    assert_eq!(c1.entries, c2.entries);
    assert_eq!(c1.state, c2.state);
    // The view, owned and rendered.
    fn open<'s>(s: &'s Store, id: &ConversationId) -> jpstore_engine::export::ConversationView<'s> {
        s.open_view(id).expect("view")
    }
    assert_eq!(
        open(&s1, &id).into_entries().expect("v1"),
        open(&s2, &id).into_entries().expect("v2")
    );
    assert_eq!(
        open(&s1, &id).render(ContentMode::Inline).expect("v1"),
        open(&s2, &id).render(ContentMode::Inline).expect("v2")
    );
    let refs = |s: &Store| -> Value {
        serde_json::from_slice(&open(s, &id).render(ContentMode::Refs).expect("refs"))
            .expect("json")
    };
    same_but_references(&refs(&s1), &refs(&s2), &c2.entries, None);
    // The export and the provider bodies.
    for mode in [ContentMode::Inline, ContentMode::Refs] {
        assert_eq!(
            conversation_json(&s1, &c1, mode).expect("v1"),
            conversation_json(&s2, &c2, mode).expect("v2")
        );
    }
    // The version 2 body is written from the log image (texts borrowed,
    // arguments from their binary form), the version 1 body from decoded
    // entries: the same bytes.
    for p in [Provider::Anthropic, Provider::OpenAi] {
        let body = |s: &Store| {
            let mut out = Vec::new();
            write_provider_request_view(s, open(s, &id), p, &mut out).expect("request body");
            String::from_utf8(out).expect("UTF-8")
        };
        assert_eq!(body(&s1), body(&s2), "{p:?}");
        assert_eq!(
            provider_request_view(&s1, open(&s1, &id), p).expect("v1"),
            provider_request_view(&s2, open(&s2, &id), p).expect("v2"),
            "{p:?}"
        );
    }
    // Something of everything the rules decide on is there, sometimes.
    let _ = c2
        .entries
        .iter()
        .filter(|e| matches!(e.event().map(|e| &e.kind), Some(EventKind::Compaction(_))))
        .count();
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn both_log_versions_give_the_same_views_exports_and_requests(
        steps in prop::collection::vec(step(), 1..14)
    ) {
        check(&steps);
    }
}

#[test]
fn a_conversation_with_every_rule_gives_the_same_views_in_both_versions() {
    let turn = |calls: Vec<Call>| Step::Turn {
        request: "look at \"this\"".into(),
        attachments: vec![(0, 0), (1, 1)],
        reasoning: Some(("hmm".into(), true)),
        calls,
        answer: Some("done".into()),
    };
    let read = |response| Call {
        tool: 0,
        response,
        error: false,
    };
    let steps = vec![
        turn(vec![read(Some((false, 0, 0))), read(None)]),
        turn(vec![read(Some((false, 0, 0))), read(Some((true, 0, 0)))]),
        Step::Delta(1),
        turn(vec![read(Some((false, 1, 1)))]),
        Step::Compaction {
            from: 0,
            len: 0,
            summary: true,
            reasoning: false,
            tools: 0,
            overrides: false,
        },
        Step::Compaction {
            from: 1,
            len: 1,
            summary: false,
            reasoning: true,
            tools: 2,
            overrides: true,
        },
        turn(vec![read(Some((false, 0, 0)))]),
        Step::Undo(0),
        Step::Delta(0),
        turn(vec![read(Some((false, 1, 1)))]),
    ];
    let rare: Vec<Step> = (0..RARE).map(Step::Rare).collect();
    check(&[steps, rare].concat());
}

/// A view long enough to be planned in two halves (split at a
/// `turn_start`, or at the one injected before a summary) gives the bytes
/// of the same view planned in one piece, from its entries, for both
/// providers and both log versions.
#[test]
fn a_long_view_is_planned_in_halves_as_in_one_piece() {
    use jpstore_integrations::provider::{
        write_anthropic_request, write_openai_request, RequestOptions,
    };
    let turn = |k: usize| Step::Turn {
        request: format!("question {k}"),
        attachments: vec![],
        reasoning: Some((format!("thought {k}"), k % 2 == 0)),
        // A text response, read borrowed, and a resource one, decoded (on
        // every core: there are more than `PARALLEL_DECODE` of them).
        calls: vec![
            Call {
                tool: (k % 3) as u8,
                response: Some((true, 0, 0)),
                error: k % 5 == 0,
            },
            Call {
                tool: 0,
                response: Some((false, (k % 3) as u8, (k % 2) as u8)),
                error: false,
            },
            Call {
                tool: 1,
                response: Some((false, (k % 2) as u8, (k % 3) as u8)),
                error: k % 7 == 0,
            },
        ],
        // No answer: every turn ends with a tool result, so the user
        // messages on both sides of the split are one message (Anthropic).
        answer: None,
    };
    let mut steps: Vec<Step> = (0..360).map(turn).collect();
    // A summary over turns in the middle (where the halves meet), rarer
    // shapes, and a tool call left without a response at the end.
    steps.insert(
        300,
        Step::Compaction {
            from: 150,
            len: 30,
            summary: true,
            reasoning: false,
            tools: 0,
            overrides: false,
        },
    );
    steps.extend((0..RARE).map(Step::Rare));
    let batches = batches(&steps);
    let dir = tempfile::tempdir().expect("tempdir");
    for framing in [Framing::V1, Framing::V2] {
        let (store, id) = conversation(&dir.path().join(format!("{framing:?}")), framing, &batches);
        let view = || store.open_view(&id).expect("view");
        let options = RequestOptions::of_view(&view());
        let entries = view().into_entries().expect("entries");
        assert!(entries.len() > 2048, "{} entries", entries.len());
        let mut read = |r: &jpstore_engine::event::BlobRef| Ok(store.blobs().get_content(&r.id)?);
        for p in [Provider::Anthropic, Provider::OpenAi] {
            let mut halves = Vec::new();
            write_provider_request_view(&store, view(), p, &mut halves).expect("halves");
            let mut whole = Vec::new();
            match p {
                Provider::Anthropic => {
                    write_anthropic_request(&entries, &options, &mut read, &mut whole)
                }
                Provider::OpenAi => write_openai_request(&entries, &options, &mut read, &mut whole),
            }
            .expect("one piece");
            assert!(halves == whole, "{framing:?} {p:?}: the same bytes");
        }
    }
}

/// A request body of a version 2 log reads the bodies of the entries it
/// sends, checked first: damage to one is an error naming the log; damage
/// to a body it does not use (the conversation's metadata patch) is not
/// its to report, and reading the whole conversation reports it
/// (format-spec.md 3, "What the checksums cover").
#[test]
fn a_request_body_reports_damage_to_a_body_it_sends() {
    let steps = vec![Step::Turn {
        request: "the question".into(),
        attachments: vec![],
        reasoning: None,
        calls: vec![],
        answer: Some("an answer that is sent".into()),
    }];
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, id) = conversation(dir.path(), Framing::V2, &batches(&steps));
    // The head cache proves the records whole: a bad body is damage, not a
    // record being written.
    drop(store.writer(&id).expect("a writer"));
    let log = store.display(&id.log_path());
    let bytes = std::fs::read(&log).expect("read log");
    let flip = |needle: &[u8]| {
        let at = bytes
            .windows(needle.len())
            .position(|w| w == needle)
            .expect("the text is in the log");
        let mut damaged = bytes.clone();
        damaged[at] ^= 0x20;
        std::fs::write(&log, damaged).expect("write log");
    };
    let body = |p| {
        let mut out = Vec::new();
        write_provider_request_view(&store, store.open_view(&id)?, p, &mut out).map(|()| out)
    };
    for p in [Provider::Anthropic, Provider::OpenAi] {
        flip(b"an answer that is sent");
        let err = body(p).expect_err("damage to a body it sends");
        assert!(err.is_corruption(), "{p:?}: {err}");
        assert!(
            err.to_string().contains(&log.display().to_string()),
            "{err}"
        );
        // The creation's metadata patch (its `created` field).
        flip(b"created");
        body(p).expect("a body it does not read");
        assert!(store.read(&id).expect_err("read whole").is_corruption());
    }
    std::fs::write(&log, &bytes).expect("write log");
    assert!(body(Provider::Anthropic).is_ok());
}

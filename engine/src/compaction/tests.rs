//! Tests of creating compactions: bounds (jp-format.md section 5), profiles
//! and hints from config, summary overlap, dry run, undo.

use serde_json::{json, Value};

use super::*;
use crate::conversation::ConversationId;
use crate::event::input::parse_input;
use crate::event::json::ParseMode;
use crate::event::Object;
use crate::{NewConversation, Store, StoreOptions};

fn obj(v: Value) -> Object {
    match v {
        Value::Object(o) => o,
        _ => panic!("not an object"),
    }
}

fn t(secs: i64) -> Timestamp {
    Timestamp::from_unix(1_800_000_000 + secs, 0).expect("time")
}

/// `turns` turns, turn i starting at second 100*i; optional compactions.
fn entries(turns: u64, compactions: &[(u64, u64, bool)]) -> Vec<Entry> {
    let mut text = String::new();
    for i in 0..turns {
        text.push_str(&format!(
            "{{\"type\":\"turn_start\",\"timestamp\":\"{}\"}}\n{{\"type\":\"chat_request\",\"content\":\"q{i}\",\"timestamp\":\"{}\"}}\n",
            t(100 * i as i64), t(100 * i as i64 + 1)
        ));
    }
    for (from, to, summary) in compactions {
        let s = if *summary {
            ",\"summary\":{\"summary\":\"S\"}"
        } else {
            ",\"reasoning\":\"strip\""
        };
        text.push_str(&format!(
            "{{\"type\":\"compaction\",\"from_turn\":{from},\"to_turn\":{to}{s},\"timestamp\":\"{}\"}}\n",
            t(10_000)
        ));
    }
    if text.is_empty() {
        return Vec::new();
    }
    parse_input(&text, ParseMode::Lenient)
        .expect("input")
        .entries
        .into_iter()
        .map(|e| {
            e.try_map_content(&mut |_| Err::<BlobRef, ()>(()))
                .expect("no content")
        })
        .collect()
}

#[test]
fn bounds_parse() {
    assert_eq!(Bound::parse("3").expect("abs"), Bound::Absolute(3));
    assert_eq!(Bound::parse("-2").expect("end"), Bound::FromEnd(2));
    assert_eq!(
        Bound::parse("last").expect("last"),
        Bound::AfterLastCompaction
    );
    assert_eq!(
        Bound::parse("5h").expect("dur"),
        Bound::Ago(Duration::from_secs(5 * 3600))
    );
    assert_eq!(
        Bound::parse("1h 30m").expect("dur"),
        Bound::Ago(Duration::from_secs(5400))
    );
    for bad in ["", "x", "-", "--1", "3.5", "-x"] {
        assert!(Bound::parse(bad).is_err(), "accepted {bad:?}");
    }
}

#[test]
fn bounds_resolve_as_the_format_says() {
    let e = entries(5, &[]); // turns 0..=4, last = 4
    let now = t(10_000);
    let r = |from, to| resolve_range(&e, from, to, 0, now);
    assert_eq!(r(None, None).expect("all"), (0, 4));
    assert_eq!(
        r(Some(Bound::Absolute(2)), Some(Bound::Absolute(99))).expect("clamped"),
        (2, 4)
    );
    assert!(matches!(
        r(Some(Bound::Absolute(5)), None),
        Err(CompactionError::OutOfRange { .. })
    ));
    assert_eq!(
        r(Some(Bound::FromEnd(99)), None).expect("saturates"),
        (0, 4)
    );
    assert_eq!(r(Some(Bound::FromEnd(1)), None).expect("from end"), (3, 4));
    assert_eq!(r(None, Some(Bound::FromEnd(2))).expect("to end"), (0, 2));
    assert!(matches!(
        r(None, Some(Bound::FromEnd(5))),
        Err(CompactionError::OutOfRange { .. })
    ));
    assert!(matches!(
        r(Some(Bound::Absolute(3)), Some(Bound::Absolute(1))),
        Err(CompactionError::EmptyRange { from: 3, to: 1 })
    ));
    // keep_last is the default `to`; keeping every turn is refused as such.
    assert_eq!(resolve_range(&e, None, None, 2, now).expect("keep"), (0, 2));
    assert_eq!(resolve_range(&e, None, None, 4, now).expect("keep"), (0, 0));
    assert!(matches!(
        resolve_range(&e, None, None, 5, now),
        Err(CompactionError::OutOfRange {
            what: "--keep-last",
            last: 4,
            ..
        })
    ));
    // Durations: turn i started at 100*i seconds; now is 10_000.
    let now = t(250);
    let ago = |s| Some(Bound::Ago(Duration::from_secs(s)));
    // now-100 = 150: turn 1 is active; `from` is the turn after it.
    assert_eq!(
        resolve_range(&e, ago(100), None, 0, now).expect("from dur"),
        (2, 4)
    );
    assert_eq!(
        resolve_range(&e, None, ago(100), 0, now).expect("to dur"),
        (0, 1)
    );
    // Before the first turn: no turn active.
    assert_eq!(
        resolve_range(&e, ago(10_000), None, 0, now).expect("from before"),
        (0, 4)
    );
    assert!(resolve_range(&e, None, ago(10_000), 0, now).is_err());
    // No turns at all.
    assert!(matches!(
        resolve_range(&entries(0, &[]), None, None, 0, now),
        Err(CompactionError::NoTurns)
    ));
}

#[test]
fn last_means_after_the_last_compaction_in_effect() {
    let now = t(10_000);
    let e = entries(5, &[(0, 1, false), (0, 2, false)]);
    assert_eq!(
        resolve_range(&e, Some(Bound::AfterLastCompaction), None, 0, now).expect("last"),
        (3, 4)
    );
    let e = entries(5, &[(0, 4, false)]);
    assert!(resolve_range(&e, Some(Bound::AfterLastCompaction), None, 0, now).is_err());
    let e = entries(3, &[]);
    assert_eq!(
        resolve_range(&e, Some(Bound::AfterLastCompaction), None, 0, now).expect("none"),
        (0, 2)
    );
}

#[test]
fn summary_ranges_grow_over_intersecting_summaries_until_stable() {
    let e = entries(
        10,
        &[(2, 4, true), (4, 6, true), (8, 9, true), (0, 9, false)],
    );
    assert_eq!(extend_over_summaries(&e, 5, 5), (2, 6));
    assert_eq!(extend_over_summaries(&e, 0, 1), (0, 1), "no intersection");
    assert_eq!(extend_over_summaries(&e, 7, 8), (7, 9));
    assert_eq!(
        extend_over_summaries(&e, 1, 9),
        (1, 9),
        "contains them all already"
    );
}

#[test]
fn profiles_and_hints_come_from_config() {
    let cfg = obj(json!({"conversation": {
        "compaction": {"default_profile": "light", "keep_last": 2, "profiles": {
            "light": {"reasoning": "strip"},
            "tools": {"tool_calls": {"policy": "strip", "request": false, "response": true}},
            "gone": {"tool_calls": "omit"},
            "heavy": {"summary": {"policy": "summarize", "command": "cat"}},
        }},
        "tools": {"fs_read_file": {"compaction": {"request": "keep", "response": "strip"}}, "other": {"enable": true}}
    }}));
    let s = Settings::parse(&cfg).expect("settings");
    let c = &s.conversation.compaction;
    let light = Profile::from_settings(c, None).expect("default");
    assert_eq!(
        (light.name.as_str(), light.strip_reasoning, light.tool_calls),
        ("light", true, None)
    );
    assert_eq!(
        Profile::from_settings(c, Some("tools"))
            .expect("tools")
            .tool_calls,
        Some(ToolCallPolicy::Strip {
            request: false,
            response: true
        })
    );
    assert_eq!(
        Profile::from_settings(c, Some("gone"))
            .expect("gone")
            .tool_calls,
        Some(ToolCallPolicy::Omit)
    );
    assert!(Profile::from_settings(c, Some("heavy"))
        .expect("heavy")
        .summary
        .is_some());
    let err = Profile::from_settings(c, Some("nope")).expect_err("unknown");
    assert!(
        err.to_string().contains("gone, heavy, light, tools"),
        "{err}"
    );
    let hints = tool_hints(&s);
    assert_eq!(hints.len(), 1);
    assert_eq!(hints["fs_read_file"].request, Some(FieldMode::Keep));
    // No config: the built-in default strips reasoning and tool calls.
    let none = Settings::default();
    assert_eq!(
        Profile::from_settings(&none.conversation.compaction, None).expect("builtin"),
        Profile::builtin_default()
    );
    // A tool_calls table without a policy is of the right type, and is
    // refused when the profile is used.
    let no_policy = Settings::parse(&obj(json!({"conversation": {"compaction": {
        "profiles": {"p": {"tool_calls": {"request": false}}}}}})))
    .expect("settings");
    let err = Profile::from_settings(&no_policy.conversation.compaction, Some("p"))
        .expect_err("no policy");
    assert_eq!(
        err.to_string(),
        "config: conversation.compaction.profiles.p.tool_calls.policy must be \"strip\" or \"omit\""
    );
}

#[test]
fn automatic_compaction_settings_take_their_defaults() {
    let auto = AutoSettings::from_settings(&Settings::default());
    assert_eq!(
        auto,
        AutoSettings {
            enabled: false,
            trigger_ratio: 0.75,
            profile: None,
            min_turns: 5,
            context_window: None,
        }
    );
    let from_model = Settings::parse(&obj(json!({"assistant": {"model": {"context_window": 9}}})))
        .expect("settings");
    assert_eq!(
        AutoSettings::from_settings(&from_model).context_window,
        Some(9)
    );
    let both = Settings::parse(&obj(json!({"assistant": {"model": {"context_window": 9}},
        "conversation": {"compaction": {"auto": {"context_window": 5}}}})))
    .expect("settings");
    assert_eq!(AutoSettings::from_settings(&both).context_window, Some(5));
}

fn store_with_turns(turns: usize) -> (tempfile::TempDir, Store, ConversationId) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::init_dir(&dir.path().join("s"), StoreOptions::default()).expect("init");
    let id = ConversationId::parse("c").expect("id");
    let mut w = store
        .create(NewConversation {
            id: Some(id.clone()),
            base_config: Some(obj(json!({"conversation": {"tools": {"fs_read_file": {"compaction": {"request": "keep"}}}}}))),
            ..Default::default()
        })
        .expect("create");
    for i in 0..turns {
        let text = format!(
            "{{\"type\":\"turn_start\"}}\n{{\"type\":\"chat_request\",\"content\":\"q{i}\"}}\n{{\"type\":\"chat_response\",\"reasoning\":\"thinking hard about {i}\"}}\n\
             {{\"type\":\"tool_call_request\",\"id\":\"c{i}\",\"name\":\"fs_read_file\",\"arguments\":{{\"path\":\"f{i}\"}}}}\n\
             {{\"type\":\"tool_call_response\",\"id\":\"c{i}\",\"content\":\"{}\"}}\n{{\"type\":\"chat_response\",\"message\":\"a{i}\"}}\n",
            "x".repeat(400)
        );
        let batch = parse_input(
            &text,
            ParseMode::Strict {
                now: Timestamp::now(),
            },
        )
        .expect("input")
        .entries;
        w.append(batch).expect("append");
    }
    drop(w);
    (dir, store, id)
}

#[test]
fn compact_appends_a_frozen_compaction_and_dry_run_writes_nothing() {
    let (_d, store, id) = store_with_turns(4);
    let log_len = |s: &Store| s.read(&id).expect("read").log_end;
    let before = log_len(&store);
    let mut no_summary = |_: &SummaryTable, _: &[Entry]| -> Result<String, SummaryFailure> {
        panic!("no summary needed")
    };
    let req = CompactRequest {
        to: Some(Bound::FromEnd(1)),
        dry_run: true,
        ..Default::default()
    };
    let out = store
        .compact(&id, &req, Timestamp::now(), &mut no_summary)
        .expect("dry run");
    assert_eq!(out.offset, None);
    assert_eq!(log_len(&store), before, "a dry run writes nothing");
    assert_eq!((out.compaction.from_turn, out.compaction.to_turn), (0, 2));
    assert_eq!(out.changes.len(), 3);
    assert!(
        out.changes
            .iter()
            .all(|c| c.reasoning == 1 && c.responses == 1 && c.requests == 0),
        "fs_read_file's request is kept by its hint: {:?}",
        out.changes
    );
    assert!(
        out.tokens_after < out.tokens_before,
        "{} -> {}",
        out.tokens_before,
        out.tokens_after
    );
    assert_eq!(
        out.compaction.tool_overrides["fs_read_file"].request,
        Some(FieldMode::Keep),
        "hints are frozen"
    );

    let req = CompactRequest {
        dry_run: false,
        ..req
    };
    let out = store
        .compact(&id, &req, Timestamp::now(), &mut no_summary)
        .expect("compact");
    assert!(out.offset.is_some());
    let conv = store.read(&id).expect("read");
    let view = crate::projection::view(&conv.entries);
    let reasoning = view
        .iter()
        .filter(|e| {
            matches!(
                e.event().map(|e| &e.kind),
                Some(EventKind::ChatResponse(
                    crate::event::ChatResponse::Reasoning(_)
                ))
            )
        })
        .count();
    assert_eq!(reasoning, 1, "only the last turn keeps its reasoning");
    // `last` now starts after turn 2.
    let req = CompactRequest {
        from: Some(Bound::AfterLastCompaction),
        to: Some(Bound::Absolute(3)),
        dry_run: true,
        ..Default::default()
    };
    let out = store
        .compact(&id, &req, Timestamp::now(), &mut no_summary)
        .expect("last");
    assert_eq!((out.compaction.from_turn, out.compaction.to_turn), (3, 3));
}

#[test]
fn summaries_read_raw_events_of_the_grown_range_and_undo_restores_the_view() {
    let (_d, store, id) = store_with_turns(5);
    {
        let mut w = store.writer(&id).expect("writer");
        let cfg = "{\"type\":\"config_delta\",\"delta\":{\"conversation\":{\"compaction\":{\"profiles\":{\"heavy\":{\"summary\":{\"policy\":\"summarize\",\"instructions\":\"Keep paths.\"}}}}}}}";
        w.append(
            parse_input(
                cfg,
                ParseMode::Strict {
                    now: Timestamp::now(),
                },
            )
            .expect("cfg")
            .entries,
        )
        .expect("append");
    }
    let view_len = |s: &Store| crate::projection::view(&s.read(&id).expect("read").entries).len();
    let full = view_len(&store);
    let mut seen = Vec::new();
    let mut summarize = |table: &SummaryTable, raw: &[Entry]| -> Result<String, SummaryFailure> {
        assert_eq!(table.instructions.as_deref(), Some("Keep paths."));
        seen.push(raw.len());
        Ok(format!("summary of {} raw entries", raw.len()))
    };
    let heavy = |from, to| CompactRequest {
        profile: Some("heavy".into()),
        from: Some(Bound::Absolute(from)),
        to: Some(Bound::Absolute(to)),
        ..Default::default()
    };
    let first = store
        .compact(&id, &heavy(1, 2), Timestamp::now(), &mut summarize)
        .expect("summary");
    assert_eq!(
        first.compaction.summary.as_deref(),
        Some("summary of 12 raw entries")
    );
    // A second summary over 2..=3 grows to 1..=3 and reads raw events, not
    // the first summary.
    let second = store
        .compact(&id, &heavy(2, 3), Timestamp::now(), &mut summarize)
        .expect("summary");
    assert_eq!(
        (second.compaction.from_turn, second.compaction.to_turn),
        (1, 3)
    );
    assert_eq!(second.requested, (2, 3));
    assert_eq!(seen, [12, 18]);
    // --summary text needs no summarizer.
    let given = CompactRequest {
        summary: Some("given".into()),
        ..heavy(4, 4)
    };
    let out = store
        .compact(&id, &given, Timestamp::now(), &mut |_: &SummaryTable,
                                                      _: &[Entry]|
         -> Result<
            String,
            SummaryFailure,
        > {
            panic!("not called")
        })
        .expect("given");
    assert_eq!(out.compaction.summary.as_deref(), Some("given"));
    assert!(view_len(&store) < full);
    // Undo the three, last first, then check the view is whole again.
    assert_eq!(
        store
            .undo_compaction(&id, None, Timestamp::now())
            .expect("undo"),
        3
    );
    assert_eq!(
        store
            .undo_compaction(&id, Some(1), Timestamp::now())
            .expect("undo 1"),
        1
    );
    assert!(store
        .undo_compaction(&id, Some(1), Timestamp::now())
        .expect_err("twice")
        .to_string()
        .contains("undone already"));
    assert!(store
        .undo_compaction(&id, Some(9), Timestamp::now())
        .expect_err("none")
        .to_string()
        .contains("no compaction 9"));
    assert_eq!(
        store
            .undo_compaction(&id, None, Timestamp::now())
            .expect("undo"),
        2
    );
    assert_eq!(
        view_len(&store),
        full,
        "the view is as if no compaction had been made"
    );
    assert!(store.undo_compaction(&id, None, Timestamp::now()).is_err());
    // A summary text given with the request replaces the range even under
    // a profile that only strips: the summarizer is never asked.
    let given = CompactRequest {
        summary: Some("what happened so far".into()),
        ..Default::default()
    };
    let out = store
        .compact(&id, &given, Timestamp::now(), &mut |_: &SummaryTable,
                                                      _: &[Entry]|
         -> Result<
            String,
            SummaryFailure,
        > {
            panic!("a given summary needs no summarizer")
        })
        .expect("a given summary under a stripping profile");
    assert_eq!(
        out.compaction.summary.as_deref(),
        Some("what happened so far")
    );
    assert!(!out.compaction.strip_reasoning && out.compaction.tool_calls.is_none());
    let view = crate::projection::view(&store.read(&id).expect("read").entries);
    let texts: Vec<String> = view
        .iter()
        .filter_map(|e| match e.event().map(|e| &e.kind) {
            Some(EventKind::ChatRequest(r)) => Some(r.content.clone()),
            Some(EventKind::ChatResponse(crate::event::ChatResponse::Message(m))) => {
                Some(m.clone())
            }
            _ => None,
        })
        .collect();
    assert!(
        texts.iter().any(|t| t.contains("what happened so far")),
        "the summary is in the view: {texts:?}"
    );
}

/// The automatic compaction after a completed turn, in a handle of its own:
/// decided from its state and settings.
fn auto_compact(
    store: &Store,
    id: &ConversationId,
    summarize: &mut Summarizer<'_>,
) -> Result<Option<CompactOutcome>, CompactionError> {
    let mut conversation = store.conversation(id).expect("open");
    let out = conversation.auto_compact(Timestamp::now(), summarize);
    conversation.close();
    out
}

#[test]
fn automatic_compaction_fires_only_past_the_threshold() {
    let (_d, store, id) = store_with_turns(6);
    let mut never =
        |_: &SummaryTable, _: &[Entry]| -> Result<String, SummaryFailure> { panic!("no summary") };
    // Disabled by default.
    assert_eq!(auto_compact(&store, &id, &mut never).expect("auto"), None);
    let set = |cfg: Value| {
        let mut w = store.writer(&id).expect("writer");
        let text = json!({"type": "config_delta", "delta": cfg}).to_string();
        w.append(
            parse_input(
                &text,
                ParseMode::Strict {
                    now: Timestamp::now(),
                },
            )
            .expect("cfg")
            .entries,
        )
        .expect("append");
    };
    // Enabled, but the view (about 6 x 130 tokens) is under 0.75 x 100_000.
    set(
        json!({"conversation": {"compaction": {"keep_last": 1, "auto": {"enabled": true, "context_window": 100_000}}}}),
    );
    assert_eq!(auto_compact(&store, &id, &mut never).expect("auto"), None);
    // Over the threshold, but not more than min_turns turns.
    set(json!({"conversation": {"compaction": {"auto": {"context_window": 200, "min_turns": 6}}}}));
    assert_eq!(auto_compact(&store, &id, &mut never).expect("auto"), None);
    set(json!({"conversation": {"compaction": {"auto": {"min_turns": 2}}}}));
    let out = auto_compact(&store, &id, &mut never)
        .expect("auto")
        .expect("fired");
    assert_eq!((out.compaction.from_turn, out.compaction.to_turn), (0, 4));
    assert_eq!(out.compaction.source, Some(CompactionSource::Auto));
    // Everything up to keep_last is compacted: a second call does nothing.
    assert_eq!(auto_compact(&store, &id, &mut never).expect("auto"), None);
}

#[test]
fn a_turn_completes_with_the_assistant_message() {
    let e = |text: &str| -> Vec<Entry> {
        parse_input(text, ParseMode::Lenient)
            .expect("input")
            .entries
            .into_iter()
            .map(|e| {
                e.try_map_content(&mut |_| Err::<BlobRef, ()>(()))
                    .expect("no content")
            })
            .collect()
    };
    assert!(completes_turn(&e("{\"type\":\"chat_response\",\"message\":\"a\",\"timestamp\":\"2026-01-01 00:00:00.0\"}\n{\"type\":\"config_delta\",\"delta\":{},\"timestamp\":\"2026-01-01 00:00:00.0\"}")));
    assert!(!completes_turn(&e(
        "{\"type\":\"chat_request\",\"content\":\"q\",\"timestamp\":\"2026-01-01 00:00:00.0\"}"
    )));
    assert!(!completes_turn(&e(
        "{\"type\":\"chat_response\",\"reasoning\":\"r\",\"timestamp\":\"2026-01-01 00:00:00.0\"}"
    )));
}

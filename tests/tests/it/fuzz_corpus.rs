//! Replays the committed fuzz corpus (`tests/fuzz/corpus/<target>/`) and
//! every crash the fuzzers found (`tests/fuzz/artifacts/<target>/`) through
//! the fuzz targets' bodies: CI covers the decoders on every input ever
//! found interesting, without running a fuzzer. Each input must be handled
//! without a panic.

use jpstore_engine::internal::StoreInterior as _;
use std::path::{Path, PathBuf};

use jpstore_tests::fuzz_targets::TARGETS;

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz")
}

fn inputs(kind: &str, target: &str) -> Vec<PathBuf> {
    let dir = fuzz_dir().join(kind).join(target);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

#[test]
fn every_corpus_input_and_artifact_is_handled_without_a_panic() {
    let mut total = 0;
    for (name, target) in TARGETS {
        let corpus = inputs("corpus", name);
        assert!(!corpus.is_empty(), "no seed corpus for target {name}");
        for path in corpus.iter().chain(inputs("artifacts", name).iter()) {
            let data = std::fs::read(path).expect("read input");
            let result = std::panic::catch_unwind(|| target(&data));
            assert!(
                result.is_ok(),
                "target {name} panicked on {}",
                path.display()
            );
            total += 1;
        }
    }
    assert!(total >= TARGETS.len());
}

/// Writes the seed corpus: valid encodings of every kind, which the fuzzers
/// mutate. Run once with `cargo test -p jpstore-tests --test it --
/// --ignored fuzz_corpus::write_seed_corpus` after a format change, and
/// commit the files.
#[test]
#[ignore = "writes the seed corpus into the source tree"]
fn write_seed_corpus() {
    use jpstore_blobstore::{object, BlobId};
    use jpstore_engine::internal::conversation::codec;
    use jpstore_engine::internal::event::input::parse_input;
    use jpstore_engine::internal::event::json::ParseMode;
    use jpstore_engine::timestamp::Timestamp;
    use jpstore_engine::{NewConversation, Store, StoreOptions};

    let write = |target: &str, name: &str, data: &[u8]| {
        let dir = fuzz_dir().join("corpus").join(target);
        std::fs::create_dir_all(&dir).expect("mkdir");
        std::fs::write(dir.join(name), data).expect("write seed");
    };
    let events = r#"[{"type":"turn_start","timestamp":"2026-05-29 19:40:02.123"},
{"type":"chat_request","content":"hi","resources":[{"uri":"file:///a.rs","mimeType":"text/x-rust","text":"fn a() {}"}]},
{"type":"chat_response","reasoning":"think","metadata":{"anthropic":{"signature":"c2ln"}}},
{"type":"tool_call_request","id":"c1","name":"fs_read_file","arguments":{"path":"a.rs"}},
{"type":"tool_call_response","id":"c1","content":[{"type":"text","text":"x"},{"type":"resource","resource":{"uri":"file:///b","blob":"AAEC"}}],"is_error":false},
{"type":"compaction","from_turn":0,"to_turn":0,"reasoning":"strip","tool_calls":{"policy":"strip","request":true,"response":true},"tool_overrides":{"x":{"request":"keep"}},"source":"auto"},
{"type":"config_delta","delta":{"a":{"b":[1,2]}}},
{"type":"mystery","k":1}]"#;
    write("json_events", "array.json", events.as_bytes());
    write(
        "json_events",
        "lines.jsonl",
        b"{\"type\":\"turn_start\"}\n{\"type\":\"chat_request\",\"content\":\"q\"}\n",
    );
    // Blob objects: zstd and raw.
    let text = "fn main() { println!(\"hello\"); }\n".repeat(20);
    let zstd = object::encode(text.as_bytes(), 3).expect("encode");
    let raw = object::encode(b"xyz", 3).expect("encode");
    for (name, obj, content) in [
        ("zstd.obj", &zstd, text.as_bytes()),
        ("raw.obj", &raw, &b"xyz"[..]),
    ] {
        let mut with_id = BlobId::of(content).as_bytes().to_vec();
        with_id.extend_from_slice(obj);
        write("blob_object", name, &with_id);
    }
    // A real store: its log, head, pack index and config. Every time in it
    // is this one, so that writing the corpus again writes the same bytes.
    let now = Timestamp::parse("2026-05-29 19:40:02.123").expect("a JP timestamp");
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::init_dir(dir.path(), StoreOptions::default()).expect("init");
    let mut w = store
        .create(NewConversation {
            id: Some(jpstore_engine::conversation::ConversationId::parse("c").expect("id")),
            title: Some("seed".into()),
            created: Some(now),
            ..Default::default()
        })
        .expect("create");
    let parsed = parse_input(events, ParseMode::Strict { now }).expect("events");
    for e in parsed.entries.into_iter().filter(|e| {
        !matches!(
            e.event().map(|e| &e.kind),
            Some(jpstore_engine::event::EventKind::ToolCallResponse(_))
        )
    }) {
        w.append(vec![e]).expect("append");
    }
    let mut text_many = String::from("{\"type\":\"turn_start\"}\n");
    for i in 0..6 {
        text_many.push_str(&format!(
            "{{\"type\":\"tool_call_request\",\"id\":\"p{i}\",\"name\":\"t\",\"arguments\":{{}}}}\n{{\"type\":\"tool_call_response\",\"id\":\"p{i}\",\"content\":\"packed {i}\"}}\n"
        ));
    }
    w.append(
        parse_input(&text_many, ParseMode::Strict { now })
            .expect("many")
            .entries,
    )
    .expect("append many");
    // Closing writes the head cache (a dropped handle writes nothing).
    w.close();
    let conv_dir = dir.path().join("conversations/c");
    write(
        "log_file",
        "log",
        &std::fs::read(conv_dir.join("events.log")).expect("log"),
    );
    write(
        "head_file",
        "head",
        &std::fs::read(conv_dir.join("head")).expect("head"),
    );
    let conv = store
        .read(&jpstore_engine::conversation::ConversationId::parse("c").expect("id"))
        .expect("read");
    for (i, e) in conv.entries.iter().enumerate().take(8) {
        write("log_entry", &format!("entry{i}"), &codec::encode_event(e));
    }
    // A packed entry: a batch of at least `codec::PACK_MIN` bytes (the
    // conversation's entries, over and over) packs.
    let mut encoded: Vec<Vec<u8>> = Vec::new();
    for e in conv.entries.iter().cycle() {
        if encoded.iter().map(Vec::len).sum::<usize>() >= codec::PACK_MIN {
            break;
        }
        encoded.push(codec::encode_event(e));
    }
    write(
        "log_entry",
        "packed",
        &codec::pack(&encoded).expect("a long batch is worth packing"),
    );
    let idx = std::fs::read_dir(dir.path().join("blobs/packs"))
        .expect("packs")
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "idx"))
        .expect("an index");
    write("pack_index", "index", &std::fs::read(idx).expect("idx"));
    write_pack_v2_seeds();
    write_record_v2_seeds();
    write(
        "config_toml",
        "template.toml",
        jpstore_engine::internal::config::WORKSPACE_CONFIG_TEMPLATE.as_bytes(),
    );
    write(
        "config_toml",
        "set.toml",
        b"[conversation.compaction]\nkeep_last = 3\n[conversation.compaction.profiles.default]\nreasoning = \"strip\"\ntool_calls = { policy = \"strip\", request = true, response = false }\n[[x.y]]\nz = 1979-05-27T07:32:00Z\n",
    );
    write(
        "config_json",
        "config.json",
        br#"{"assistant":{"model":{"id":"anthropic/claude"}},"list":[1,2.5,null,true]}"#,
    );
    // JP files: a few conversations of the fixture workspace, each as
    // events.json, 0xFF, metadata.json[, 0xFF, base_config.json].
    let fixtures =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/jp-workspace/.jp/conversations");
    for name in [
        "17738399401-base-config-file",
        "17738399402-first-config-delta",
        "17738399407-unknown-entries",
        "17738399421-hand-escapes",
        "17738399425-hand-tabs-crlf",
        "17738399428-hand-odd-whitespace",
    ] {
        let dir = fixtures.join(name);
        let mut data = std::fs::read(dir.join("events.json")).expect("read");
        data.push(0xff);
        data.extend(std::fs::read(dir.join("metadata.json")).expect("read"));
        if let Ok(base) = std::fs::read(dir.join("base_config.json")) {
            data.push(0xff);
            data.extend(base);
        }
        write("jp_files", &format!("{name}.bin"), &data);
    }
}

/// Writes the seeds of the `pack_v2` target alone (an index of version 2
/// of several groups, a zstd group and a raw group): `cargo test -p
/// jpstore-tests --test it -- --ignored
/// fuzz_corpus::write_pack_v2_seed_corpus`.
#[test]
#[ignore = "writes the seed corpus into the source tree"]
fn write_pack_v2_seed_corpus() {
    write_pack_v2_seeds();
}

/// Writes the seeds of `record_v2`: the sections of records of version 2
/// holding one entry of every kind (and an unknown one), plain and
/// compressed. Run alone with `cargo test -p jpstore-tests --test it --
/// --ignored fuzz_corpus::write_record_v2_seeds`.
#[test]
#[ignore = "writes the seed corpus into the source tree"]
fn write_record_v2_seeds() {
    use jpstore_engine::internal::conversation::sections::{finish, LOG_LEVEL};
    use jpstore_engine::internal::event::binary::encode::RecordBuilder;
    use jpstore_engine::internal::event::input::parse_input;
    use jpstore_engine::internal::event::json::ParseMode;
    use jpstore_engine::timestamp::Timestamp;
    use jpstore_engine::{NewConversation, Store, StoreOptions};

    let events = r#"[{"type":"turn_start","timestamp":"2026-05-29 19:40:02.123"},
{"type":"chat_request","timestamp":"2026-05-29 19:40:03.0","content":"hi","author":"me","resources":[{"uri":"file:///a.rs","mimeType":"text/x-rust","text":"fn a() {}"}]},
{"type":"chat_response","timestamp":"2026-05-29 19:40:04.0","reasoning":"think","metadata":{"anthropic":{"signature":"c2lnbmF0dXJlIGJ5dGVzIG9mIGEgcHJvdmlkZXIsIGxvbmcgZW5vdWdoIHRvIGJlIHN0b3JlZCBhcyBieXRlcw=="}}},
{"type":"chat_response","timestamp":"2026-05-29 19:40:04.5","message":"hello","k":[1,-2,1.5,null,true]},
{"type":"chat_response","timestamp":"2026-05-29 19:40:04.6","data":{"x":[1,2]}},
{"type":"tool_call_request","timestamp":"2026-05-29 19:40:05.0","id":"c1","name":"fs_read_file","arguments":{"path":"a.rs"}},
{"type":"tool_call_response","timestamp":"2026-05-29 19:40:06.0","id":"c1","content":[{"type":"text","text":"x"},{"type":"resource","resource":{"uri":"file:///b","blob":"AAEC"}}],"is_error":false},
{"type":"inquiry_request","timestamp":"2026-05-29 19:40:07.0","id":"q1","source":{"tool":"t"},"question":{"text":"ok?"}},
{"type":"inquiry_response","timestamp":"2026-05-29 19:40:08.0","id":"q1","answer":true},
{"type":"compaction","timestamp":"2026-05-29 19:40:09.0","from_turn":0,"to_turn":0,"reasoning":"strip","tool_calls":{"policy":"strip","request":true,"response":true},"tool_overrides":{"x":{"request":"keep"}},"source":"auto"},
{"type":"compaction_undo","timestamp":"2026-05-29 19:40:10.0","undoes":0},
{"type":"config_delta","timestamp":"2026-05-29 19:40:11.0","delta":{"a":{"b":[1,2]}}},
{"type":"mystery","k":1}]"#;
    let parsed = parse_input(
        events,
        ParseMode::Strict {
            now: Timestamp::from_unix(0, 0).expect("epoch"),
        },
    )
    .expect("events")
    .entries;
    // The entries in stored form (content as blob references), as a store
    // reads them back.
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::init_dir(dir.path(), StoreOptions::default()).expect("init");
    let id = jpstore_engine::conversation::ConversationId::parse("c").expect("id");
    let mut w = store
        .create(NewConversation {
            id: Some(id.clone()),
            ..Default::default()
        })
        .expect("create");
    w.append(parsed).expect("append");
    // Closing writes the head cache (a dropped handle writes nothing).
    w.close();
    let entries = store.read(&id).expect("read").entries;
    let mut record = RecordBuilder::new();
    // Enough of them for the sections to be worth compressing.
    while record.plain_len() < 40_000 {
        for e in &entries {
            record.push_entry(e).expect("encode");
        }
    }
    let dir = fuzz_dir().join("corpus").join("record_v2");
    std::fs::create_dir_all(&dir).expect("mkdir");
    for (name, level) in [("plain", None), ("zstd", Some(LOG_LEVEL))] {
        let s = finish(&record, level);
        let heads_len = u32::try_from(s.heads.len()).expect("small");
        let seed = [&heads_len.to_le_bytes()[..], &s.heads, &s.body].concat();
        std::fs::write(dir.join(name), seed).expect("write seed");
    }
    let mut one = RecordBuilder::new();
    for e in &entries {
        one.push_entry(e).expect("encode");
    }
    let s = finish(&one, None);
    let heads_len = u32::try_from(s.heads.len()).expect("small");
    std::fs::write(
        dir.join("one_of_each"),
        [&heads_len.to_le_bytes()[..], &s.heads, &s.body].concat(),
    )
    .expect("write seed");
}

fn write_pack_v2_seeds() {
    use jpstore_blobstore::backend::FileBackend;
    use jpstore_blobstore::storage::{LocalStorage, Storage};
    use jpstore_blobstore::{group, BlobStore, Options};

    let write = |name: &str, data: &[u8]| {
        let dir = fuzz_dir().join("corpus").join("pack_v2");
        std::fs::create_dir_all(&dir).expect("mkdir");
        std::fs::write(dir.join(name), data).expect("write seed");
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let storage: std::sync::Arc<dyn Storage> =
        std::sync::Arc::new(LocalStorage::open(dir.path()).expect("storage"));
    let store = BlobStore::open(
        FileBackend::shared(storage),
        "blobs",
        Options {
            threads: 1,
            ..Options::default()
        },
    )
    .expect("open");
    // Small objects sharing groups, one alone in its own (over 256 KiB).
    let mut items: Vec<Vec<u8>> = (0..12u32)
        .map(|i| format!("seed object {i}: ").repeat(20).into_bytes())
        .collect();
    items.push(b"fn main() {}\n".repeat(30_000));
    store
        .put_batch(items.len(), |i| Ok(items[i].clone()), &mut |_| {})
        .expect("batch");
    let idx = std::fs::read_dir(dir.path().join("blobs/packs"))
        .expect("packs")
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "idx"))
        .expect("an index");
    write("index", &std::fs::read(idx).expect("idx"));
    let mut zstd = Vec::new();
    group::encode_group(
        &b"grouped, grouped, grouped objects\n".repeat(40),
        3,
        &mut zstd,
        &mut Vec::new(),
    )
    .expect("encode");
    write("group_zstd", &zstd);
    let mut raw = Vec::new();
    group::encode_group(b"xyz", 3, &mut raw, &mut Vec::new()).expect("encode");
    write("group_raw", &raw);
}

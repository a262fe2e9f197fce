//! JP conversations for the benchmarks, built with JP's own types
//! (`jp_conversation`'s API, as JP's query loop builds them): chat
//! requests, reasoning with a thinking signature in its metadata, tool calls
//! (file reads and commands) whose results are command output or source text of 0.5 to 15 KiB
//! (an error now and then), answers, and config deltas. Deterministic: the
//! same seed gives the same text (the timestamps are JP's `now`).
#![allow(dead_code)]

use jp_config::PartialAppConfig;
use jp_conversation::event::{ChatRequest, ChatResponse, ToolCallRequest, ToolCallResponse};
use jp_conversation::{Conversation, ConversationEvent, ConversationId, ConversationStream};
use serde_json::{json, Map, Value};

/// A small deterministic generator (xorshift64*).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `lo..=hi`.
    pub fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + (self.next() % (hi - lo + 1) as u64) as usize
    }
}

const WORDS: &[&str] = &[
    "the",
    "a",
    "function",
    "returns",
    "error",
    "when",
    "file",
    "is",
    "missing",
    "we",
    "should",
    "check",
    "config",
    "value",
    "before",
    "reading",
    "it",
    "test",
    "fails",
    "because",
    "lock",
    "held",
    "by",
    "another",
    "process",
    "so",
    "retry",
    "after",
    "write",
    "append",
    "record",
    "stream",
    "event",
    "turn",
    "tool",
    "call",
    "result",
    "path",
    "line",
    "module",
    "type",
    "struct",
    "field",
    "option",
    "none",
    "some",
    "match",
    "iterator",
    "buffer",
    "bytes",
    "offset",
    "length",
    "hash",
    "index",
    "cache",
    "store",
    "conversation",
    "metadata",
    "title",
    "compaction",
    "reasoning",
    "summary",
    "request",
    "response",
    "provider",
    "model",
    "token",
];

/// Prose of about `len` bytes.
pub fn prose(rng: &mut Rng, len: usize) -> String {
    let mut s = String::with_capacity(len + 16);
    while s.len() < len {
        s.push_str(WORDS[rng.range(0, WORDS.len() - 1)]);
        s.push(match rng.range(0, 14) {
            0 => '.',
            1 => ',',
            2 => '\n',
            _ => ' ',
        });
    }
    s
}

/// Source text of about `len` bytes.
pub fn code(rng: &mut Rng, len: usize) -> String {
    let mut s = String::with_capacity(len + 80);
    while s.len() < len {
        let indent = "    ".repeat(rng.range(0, 3));
        let n = rng.range(0, 9999);
        match rng.range(0, 4) {
            0 => s.push_str(&format!(
                "{indent}let v{n} = self.{}(&{}, {n})?;\n",
                WORDS[n % 60],
                WORDS[(n / 7) % 60]
            )),
            1 => s.push_str(&format!(
                "{indent}// {}\n",
                prose(rng, 40).replace('\n', " ")
            )),
            2 => s.push_str(&format!(
                "{indent}if v{n} > {} {{ return Err(Error::{}); }}\n",
                n / 3,
                WORDS[n % 40]
            )),
            3 => s.push_str(&format!(
                "{indent}pub fn {}_{n}(&mut self) -> Result<()> {{\n",
                WORDS[n % 50]
            )),
            _ => s.push_str(&format!("{indent}}}\n")),
        }
    }
    s
}

/// A thinking signature: base64 characters, as providers send them.
pub fn signature(rng: &mut Rng, len: usize) -> String {
    const B64: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    (0..len)
        .map(|_| B64[(rng.next() % 64) as usize] as char)
        .collect()
}

/// A JP config delta from its JSON.
pub fn delta(value: Value) -> PartialAppConfig {
    serde_json::from_value(value).expect("a partial config JP reads")
}

/// A base config holding what JP requires and a system prompt.
pub fn base_config() -> Value {
    json!({
        "conversation": {"tools": {"*": {"run": "ask"}}},
        "assistant": {
            "system_prompt": "You are a careful engineer working in a Rust repository.",
            "model": {"id": {"provider": "anthropic", "name": "claude-sonnet-4"}}
        }
    })
}

/// An empty stream of the base config.
pub fn empty() -> ConversationStream {
    ConversationStream::from_parts(base_config(), Vec::new()).expect("a stream")
}

/// The id JP gives a conversation created `n` deciseconds after a fixed
/// time.
pub fn id(n: i64) -> ConversationId {
    ConversationId::try_from_deciseconds(17_738_400_000 + n).expect("an id")
}

/// Metadata of a titled conversation.
pub fn metadata(title: &str) -> Conversation {
    Conversation {
        title: Some(title.to_owned()),
        ..Default::default()
    }
}

/// Adds turn `t` to `s`: a request, reasoning with a signature, one to
/// three tool calls with their results, an answer; a config delta before
/// every 15th turn. `scale` (1 for the realistic shape) divides the sizes
/// of the texts.
pub fn add_turn(s: &mut ConversationStream, rng: &mut Rng, t: usize, scale: usize) {
    if t % 15 == 14 {
        s.add_config_delta(delta(json!({
            "assistant": {"model": {"parameters": {"max_tokens": 4096 + 256 * (t % 8)}}}
        })));
    }
    s.start_turn(ChatRequest {
        content: {
            let n = rng.range(150, 900) / scale;
            prose(rng, n)
        },
        schema: None,
        author: None,
    });
    let reasoning = {
        let n = rng.range(300, 1800) / scale;
        prose(rng, n)
    };
    let sig = {
        let n = rng.range(300, 700) / scale;
        signature(rng, n)
    };
    let calls = rng.range(1, 3);
    let mut turn = s.current_turn_mut();
    turn = turn.add_event(
        ConversationEvent::now(ChatResponse::reasoning(reasoning))
            .with_metadata_field("anthropic_thinking_signature", sig),
    );
    for c in 0..calls {
        let id = format!("toolu_{t:05}_{c}_{:016x}", rng.next());
        let mut args = Map::new();
        let (name, result) = if rng.range(0, 2) == 0 {
            args.insert(
                "command".into(),
                json!(format!("cargo test -p engine {}", WORDS[t % 60])),
            );
            ("run_command", {
                let n = rng.range(500, 5200) / scale;
                prose(rng, n)
            })
        } else {
            args.insert(
                "path".into(),
                json!(format!("src/{}/{}.rs", WORDS[t % 30], WORDS[c * 7 % 60])),
            );
            args.insert("start_line".into(), json!(1 + t % 200));
            ("fs_read_file", {
                let n = rng.range(1280, 15 * 1024) / scale;
                code(rng, n)
            })
        };
        let result = if rng.range(0, 9) == 0 {
            Err(format!("no such file: {}", WORDS[t % 60]))
        } else {
            Ok(result)
        };
        turn = turn
            .add_tool_call_request(ToolCallRequest::new(id.clone(), name.into(), args))
            .add_tool_call_response(ToolCallResponse { id, result });
    }
    turn.add_chat_response(ChatResponse::message({
        let n = rng.range(200, 1500) / scale;
        prose(rng, n)
    }))
    .build()
    .expect("a turn");
}

/// A stream of at least `events` events of the given scale, and the number
/// of turns it holds.
pub fn stream(seed: u64, events: usize, scale: usize) -> (ConversationStream, usize) {
    let mut rng = Rng::new(seed);
    let mut s = empty();
    let mut t = 0;
    while s.len() < events {
        add_turn(&mut s, &mut rng, t, scale);
        t += 1;
    }
    (s, t)
}

/// `base` as JP persisted it turn by turn: the stream cut before each of
/// its turns after the first (its own events, times and config deltas, so
/// that each is a prefix of the next), then `base` itself.
pub fn prefixes(base: &ConversationStream) -> Vec<ConversationStream> {
    let (config, events) = base.to_parts().expect("JP's parts");
    let mut out: Vec<ConversationStream> = events
        .iter()
        .enumerate()
        .filter(|(_, e)| e["type"] == "turn_start")
        .skip(1)
        .map(|(at, _)| {
            ConversationStream::from_parts(config.clone(), events[..at].to_vec())
                .expect("a stream")
                .with_created_at(base.created_at)
        })
        .collect();
    out.push(base.clone());
    out
}

//! Deterministic conversations shaped like real coding-agent sessions, as
//! JSON entries in jp-store's plain JSON form (the input of `append`).
//!
//! A conversation is a run of turns. Each turn is:
//!
//! ```text
//! turn_start
//! chat_request            the user's message (prose)
//! chat_response reasoning  with a long base64 thinking signature in `metadata`
//! N x ( [chat_response reasoning]   interleaved thinking, sometimes
//!       tool_call_request           read / grep / modify / run a command
//!       tool_call_response )        code-like text from `code.rs`
//! chat_response message   the answer (prose)
//! ```
//!
//! Tool response sizes follow [`TOOL_RESPONSE_PERCENTILES`]: from about a
//! hundred bytes to 100 KB, median under 1 KiB (most tool output is a short
//! grep, a diff or a compiler message; a few whole-file reads dominate the
//! bytes). A share of file reads re-read a file read earlier, with the same
//! path and the same content, as agents do after losing track of a file:
//! these are the repeated payloads that the blob store deduplicates.
//!
//! [`jp_events_json`] renders entries the way JP writes `events.json`
//! (pretty-printed, base64 on tool response content, tool argument string
//! leaves and metadata string leaves; `jp-format.md` section 2).

use base64::Engine as _;
use jpstore_engine::timestamp::Timestamp;
use serde_json::{json, Map, Value};

use super::code;
use super::rng::Rng;

/// Tool response content size percentiles: `(percentile, bytes)`, from the
/// smallest (p0) to the largest (p100), interpolated log-linearly.
pub const TOOL_RESPONSE_PERCENTILES: &[(f64, f64)] = &[
    (0.0, 120.0),
    (10.0, 240.0),
    (25.0, 400.0),
    (50.0, 780.0),
    (70.0, 1_500.0),
    (80.0, 2_600.0),
    (90.0, 6_500.0),
    (95.0, 14_000.0),
    (98.0, 32_000.0),
    (99.5, 64_000.0),
    (100.0, 100_000.0),
];

/// Unix time of the first event of every generated conversation
/// (2026-05-29 19:42:36 UTC).
pub const START_UNIX: i64 = 1_780_083_756;

/// Shape of a generated conversation. [`ConversationShape::default`] models
/// a coding agent; the fields can be changed for other workloads.
#[derive(Clone, Debug, PartialEq)]
pub struct ConversationShape {
    /// Tool calls per turn: uniform in this range, except for
    /// `long_turn_share` of turns.
    pub tool_calls: (usize, usize),
    /// Share of turns with many tool calls (uniform in `long_turn_calls`).
    pub long_turn_share: f64,
    /// Tool calls of a long turn.
    pub long_turn_calls: (usize, usize),
    /// Chance that a tool call is preceded by a reasoning event of its own.
    pub interleaved_reasoning: f64,
    /// Chance that a file read re-reads an earlier file (same content).
    pub repeated_read_share: f64,
    /// Share of tool calls that fail (`is_error`).
    pub error_share: f64,
    /// Bytes of the thinking signature before base64 (uniform in the range).
    pub signature_bytes: (usize, usize),
}

impl Default for ConversationShape {
    fn default() -> Self {
        Self {
            tool_calls: (0, 7),
            long_turn_share: 0.1,
            long_turn_calls: (8, 20),
            interleaved_reasoning: 0.3,
            repeated_read_share: 0.15,
            error_share: 0.03,
            signature_bytes: (200, 1_200),
        }
    }
}

/// The tools a generated agent calls.
const TOOLS: &[&str] = &[
    "fs_read_file",
    "fs_grep_files",
    "fs_modify_file",
    "cargo_check",
    "git_diff",
];

/// Directories of the generated project's files.
const DIRS: &[&str] = &[
    "src",
    "src/conversation",
    "src/event",
    "src/log",
    "src/storage",
    "tests",
    "benches",
];

impl ConversationShape {
    /// A conversation of the default shape with exactly `events` entries,
    /// from `seed`.
    pub fn generate(seed: u64, events: usize) -> Vec<Value> {
        Self::default().build(seed, events)
    }

    /// A conversation of this shape with exactly `events` entries. The same
    /// seed always gives the same entries; a longer conversation starts with
    /// the entries of a shorter one, except for the shorter one's last turn,
    /// which is cut to fit. A cut never leaves a tool call without its
    /// response: the conversation can be appended to and answered.
    pub fn build(&self, seed: u64, events: usize) -> Vec<Value> {
        let mut g = Gen {
            shape: self,
            rng: Rng::new(seed),
            secs: START_UNIX,
            nanos: 0,
            reads: Vec::new(),
            files: Vec::new(),
            call: 0,
        };
        let mut out = Vec::with_capacity(events);
        while out.len() < events {
            let mut turn = g.turn();
            let room = events - out.len();
            if turn.len() > room {
                turn.truncate(room);
                // A request cut from its response becomes the answer.
                if turn.last().and_then(|e| e["type"].as_str()) == Some("tool_call_request") {
                    let t = turn.len() - 1;
                    let ts = turn[t]["timestamp"].clone();
                    turn[t] = json!({
                        "type": "chat_response",
                        "timestamp": ts,
                        "message": code::prose(&mut g.rng, 200),
                    });
                }
            }
            out.extend(turn);
        }
        out
    }
}

struct Gen<'a> {
    shape: &'a ConversationShape,
    rng: Rng,
    secs: i64,
    nanos: u32,
    /// Files read so far: (path, content), for repeated reads.
    reads: Vec<(String, String)>,
    /// Paths of the project's files, grown as new ones are touched.
    files: Vec<String>,
    /// Tool calls so far (ids are unique within a conversation).
    call: u64,
}

impl Gen<'_> {
    /// Advances the clock by `lo..hi` milliseconds and returns the time.
    fn tick(&mut self, lo: usize, hi: usize) -> Value {
        let ms = self.rng.range(lo, hi) as u64;
        let nanos =
            u64::from(self.nanos) + (ms % 1000) * 1_000_000 + self.rng.below(1000) as u64 * 1000;
        self.secs += (ms / 1000) as i64 + (nanos / 1_000_000_000) as i64;
        self.nanos = (nanos % 1_000_000_000) as u32;
        let t = Timestamp::from_unix(self.secs, self.nanos).expect("a timestamp in range");
        Value::String(t.to_string())
    }

    fn turn(&mut self) -> Vec<Value> {
        let s = self.shape;
        let mut out = Vec::new();
        // The user comes back after half a minute to ten minutes.
        out.push(json!({"type": "turn_start", "timestamp": self.tick(30_000, 600_000)}));
        let ask_len = 40 + self.rng.zipf(600);
        out.push(json!({
            "type": "chat_request",
            "timestamp": self.tick(5, 50),
            "content": code::prose(&mut self.rng, ask_len),
        }));
        out.push(self.reasoning(300, 3_000));
        let calls = if self.rng.chance(s.long_turn_share) {
            self.rng.range(s.long_turn_calls.0, s.long_turn_calls.1)
        } else {
            self.rng.range(s.tool_calls.0, s.tool_calls.1)
        };
        for i in 0..calls {
            if i > 0 && self.rng.chance(s.interleaved_reasoning) {
                out.push(self.reasoning(100, 1_000));
            }
            let (request, response) = self.tool_call();
            out.push(request);
            out.push(response);
        }
        let answer_len = 80 + self.rng.zipf(1_500);
        out.push(json!({
            "type": "chat_response",
            "timestamp": self.tick(1_000, 20_000),
            "message": code::prose(&mut self.rng, answer_len),
        }));
        out
    }

    fn reasoning(&mut self, lo: usize, hi: usize) -> Value {
        let len = self.rng.range(lo, hi);
        let (a, b) = self.shape.signature_bytes;
        let mut sig = vec![0u8; self.rng.range(a, b)];
        self.rng.fill(&mut sig);
        json!({
            "type": "chat_response",
            "timestamp": self.tick(500, 10_000),
            "reasoning": code::prose(&mut self.rng, len),
            "metadata": {
                "anthropic_thinking_signature":
                    base64::engine::general_purpose::STANDARD.encode(&sig),
            },
        })
    }

    fn path(&mut self) -> String {
        if !self.files.is_empty() && self.rng.chance(0.7) {
            let n = self.files.len();
            return self.files[n - 1 - self.rng.zipf(n)].clone();
        }
        let dir = *self.rng.pick(DIRS);
        let name = code::prose(&mut self.rng, 4)
            .trim_end_matches(['.', ':'])
            .to_lowercase()
            .replace([' ', '`'], "_");
        let path = format!("{dir}/{name}_{}.rs", self.files.len());
        self.files.push(path.clone());
        path
    }

    fn tool_call(&mut self) -> (Value, Value) {
        self.call += 1;
        let id = self.call_id();
        let size = size_at_percentile(self.rng.unit() * 100.0) as usize;
        // Large outputs are whole files; small ones come from any tool.
        let tool = if size > 8_000 {
            if self.rng.chance(0.8) {
                "fs_read_file"
            } else {
                "fs_grep_files"
            }
        } else {
            *self.rng.pick(TOOLS)
        };
        let repeat = tool == "fs_read_file"
            && !self.reads.is_empty()
            && self.rng.chance(self.shape.repeated_read_share);
        let (arguments, content) = if repeat {
            let n = self.reads.len();
            let (path, content) = self.reads[n - 1 - self.rng.zipf(n)].clone();
            (json!({"path": path}), content)
        } else {
            // Tools other than reads frame the code (line numbers, diff
            // marks): generate less and cut the output to the drawn size.
            let raw = if tool == "fs_read_file" {
                size
            } else {
                size * 3 / 4
            };
            let mut code = Vec::new();
            code::generate(&mut self.rng, raw, &mut code);
            let code = String::from_utf8_lossy(&code).into_owned();
            let (arguments, mut content) = self.tool_output(tool, &code);
            if content.len() > size {
                let mut cut = size;
                while !content.is_char_boundary(cut) {
                    cut -= 1;
                }
                content.truncate(cut);
            }
            (arguments, content)
        };
        let request = json!({
            "type": "tool_call_request",
            "timestamp": self.tick(500, 8_000),
            "id": id,
            "name": tool,
            "arguments": arguments,
        });
        let response = json!({
            "type": "tool_call_response",
            "timestamp": self.tick(20, 3_000),
            "id": id,
            "content": content,
            "is_error": self.rng.chance(self.shape.error_share),
        });
        (request, response)
    }

    /// Arguments and output of one call of `tool`, around generated code.
    fn tool_output(&mut self, tool: &str, code: &str) -> (Value, String) {
        let path = self.path();
        match tool {
            "fs_read_file" => {
                self.reads.push((path.clone(), code.to_owned()));
                (json!({"path": path}), code.to_owned())
            }
            "fs_grep_files" => {
                let pattern = code
                    .split_whitespace()
                    .find(|w| w.len() > 4)
                    .unwrap_or("fn")
                    .to_owned();
                let mut out = String::with_capacity(code.len() + code.len() / 2);
                for (n, line) in code
                    .lines()
                    .enumerate()
                    .filter(|(_, l)| !l.trim().is_empty())
                {
                    let file = if self.rng.chance(0.2) {
                        self.path()
                    } else {
                        path.clone()
                    };
                    out.push_str(&format!("{file}:{}: {}\n", n + 1, line.trim_start()));
                }
                (json!({"pattern": pattern, "paths": [path]}), out)
            }
            "fs_modify_file" => {
                let mut diff = format!("--- a/{path}\n+++ b/{path}\n@@ -1 +1 @@\n");
                for line in code.lines() {
                    let sign = match self.rng.below(6) {
                        0 => '-',
                        1 => '+',
                        _ => ' ',
                    };
                    diff.push(sign);
                    diff.push_str(line);
                    diff.push('\n');
                }
                let split = code.len() / 2;
                let split = (split..code.len())
                    .find(|&i| code.is_char_boundary(i))
                    .unwrap_or(code.len());
                (
                    json!({"path": path, "old": &code[..split], "new": &code[split..]}),
                    diff,
                )
            }
            "cargo_check" => {
                let mut out = String::from("    Checking jp-store v0.1.0\n");
                for (n, line) in code.lines().enumerate() {
                    if n % 6 == 0 {
                        out.push_str(&format!(
                            "error[E0{}]: mismatched types\n  --> {path}:{}:{}\n   |\n",
                            300 + self.rng.below(400),
                            n + 1,
                            1 + self.rng.below(40)
                        ));
                    }
                    out.push_str(&format!("{:>4} | {line}\n", n + 1));
                }
                (json!({"package": "jp-store", "all_targets": true}), out)
            }
            _ => {
                let mut out = format!("diff --git a/{path} b/{path}\n");
                for line in code.lines() {
                    out.push(if self.rng.chance(0.5) { '+' } else { ' ' });
                    out.push_str(line);
                    out.push('\n');
                }
                (json!({"paths": [path]}), out)
            }
        }
    }

    /// An Anthropic-style tool call id (`toolu_01` + 22 base62 characters).
    fn call_id(&mut self) -> String {
        const ALPHABET: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
        let mut id = String::from("toolu_01");
        for _ in 0..22 {
            id.push(*self.rng.pick(ALPHABET) as char);
        }
        id
    }
}

/// The tool response size at percentile `p` (0..=100).
pub fn size_at_percentile(p: f64) -> f64 {
    let p = p.clamp(0.0, 100.0);
    for w in TOOL_RESPONSE_PERCENTILES.windows(2) {
        let ((p0, s0), (p1, s1)) = (w[0], w[1]);
        if p <= p1 {
            let t = if p1 > p0 { (p - p0) / (p1 - p0) } else { 0.0 };
            return (s0.ln() + t * (s1.ln() - s0.ln())).exp();
        }
    }
    TOOL_RESPONSE_PERCENTILES[TOOL_RESPONSE_PERCENTILES.len() - 1].1
}

/// Bytes of every tool response content of `entries`, in order.
pub fn tool_response_sizes(entries: &[Value]) -> Vec<usize> {
    entries
        .iter()
        .filter(|e| e["type"] == "tool_call_response")
        .filter_map(|e| e["content"].as_str().map(str::len))
        .collect()
}

/// `entries` as JP writes `events.json`: one array, pretty-printed with a
/// 2-space indent and a trailing newline, with JP's base64 (standard
/// alphabet, padded) on the whole `tool_call_response.content` string and on
/// every string leaf of `tool_call_request.arguments` and of any `metadata`
/// (jp-format.md section 2).
pub fn jp_events_json(entries: &[Value]) -> String {
    let mut text =
        serde_json::to_string_pretty(&jp_entries(entries)).expect("JSON values serialize");
    text.push('\n');
    text
}

/// `entries` as JP holds them before writing `events.json`: with JP's
/// base64 applied (see [`jp_events_json`]).
pub fn jp_entries(entries: &[Value]) -> Vec<Value> {
    entries.iter().map(jp_entry).collect()
}

fn jp_entry(entry: &Value) -> Value {
    let Value::Object(obj) = entry else {
        return entry.clone();
    };
    let kind = obj.get("type").and_then(Value::as_str).unwrap_or_default();
    let out: Map<String, Value> = obj
        .iter()
        .map(|(k, v)| {
            let v = match (kind, k.as_str()) {
                ("tool_call_response", "content") => base64_leaves(v),
                ("tool_call_request", "arguments") | (_, "metadata") => base64_leaves(v),
                _ => v.clone(),
            };
            (k.clone(), v)
        })
        .collect();
    Value::Object(out)
}

/// What JP does to every entry of `events.json` after parsing it: the
/// inverse of its base64 (see [`jp_events_json`]), applied in place and
/// leniently, as JP applies it (jp-format.md section 2): a string that is
/// not valid base64, or does not decode to UTF-8, is kept as it is.
pub fn jp_decode_entry(entry: &mut Value) {
    let Value::Object(obj) = entry else { return };
    let kind = obj.get("type").and_then(Value::as_str).unwrap_or_default();
    let response = kind == "tool_call_response";
    let request = kind == "tool_call_request";
    for (k, v) in obj.iter_mut() {
        match k.as_str() {
            "content" if response => unbase64_leaves(v),
            "arguments" if request => unbase64_leaves(v),
            "metadata" => unbase64_leaves(v),
            _ => {}
        }
    }
}

fn unbase64_leaves(v: &mut Value) {
    match v {
        Value::String(s) => {
            if let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(s.as_bytes()) {
                if let Ok(text) = String::from_utf8(bytes) {
                    *s = text;
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(unbase64_leaves),
        Value::Object(o) => o.values_mut().for_each(unbase64_leaves),
        _ => {}
    }
}

fn base64_leaves(v: &Value) -> Value {
    match v {
        Value::String(s) => Value::String(base64::engine::general_purpose::STANDARD.encode(s)),
        Value::Array(items) => Value::Array(items.iter().map(base64_leaves).collect()),
        Value::Object(o) => Value::Object(
            o.iter()
                .map(|(k, v)| (k.clone(), base64_leaves(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jpstore_engine::internal::event::json::{parse_entry, ParseMode};

    fn median(mut v: Vec<usize>) -> usize {
        v.sort_unstable();
        v[v.len() / 2]
    }

    #[test]
    fn deterministic_exact_and_prefix_stable() {
        let a = ConversationShape::generate(7, 2_000);
        assert_eq!(a.len(), 2_000);
        assert_eq!(a, ConversationShape::generate(7, 2_000));
        assert_ne!(a, ConversationShape::generate(8, 2_000));
        for n in [0, 1, 2, 3, 17, 100] {
            assert_eq!(ConversationShape::generate(7, n).len(), n);
        }
        // Everything but the last (cut) turn of a shorter conversation is a
        // prefix of a longer one.
        let short = ConversationShape::generate(7, 500);
        let last_turn = short
            .iter()
            .rposition(|e| e["type"] == "turn_start")
            .expect("a turn");
        assert_eq!(short[..last_turn], a[..last_turn]);
    }

    #[test]
    fn jp_decoding_inverts_jp_encoding() {
        let entries = ConversationShape::generate(5, 600);
        let mut decoded = jp_entries(&entries);
        assert_ne!(decoded, entries, "JP's base64 changes the entries");
        decoded.iter_mut().for_each(jp_decode_entry);
        assert_eq!(decoded, entries);
        // Lenient: a leaf that is not base64 of UTF-8 stays as it is.
        let mut odd =
            json!({"type": "tool_call_request", "arguments": {"a": "not base64!", "b": "/w=="}});
        let before = odd.clone();
        jp_decode_entry(&mut odd);
        assert_eq!(odd, before);
    }

    #[test]
    fn tool_response_sizes_have_the_stated_distribution() {
        let entries = ConversationShape::generate(1, 10_000);
        let sizes = tool_response_sizes(&entries);
        assert!(sizes.len() > 2_000, "{} tool responses", sizes.len());
        let m = median(sizes.clone());
        assert!((300..1_024).contains(&m), "median {m}");
        let (min, max) = (
            sizes.iter().copied().min().expect("sizes"),
            sizes.iter().copied().max().expect("sizes"),
        );
        assert!(min >= 100, "smallest {min}");
        assert!((30_000..=110_000).contains(&max), "largest {max}");
        // The distribution's own median is under 1 KiB too.
        assert!(size_at_percentile(50.0) < 1_024.0);
    }

    #[test]
    fn repeated_reads_repeat_content() {
        let entries = ConversationShape::generate(3, 10_000);
        let mut contents: Vec<&str> = entries
            .iter()
            .filter(|e| e["type"] == "tool_call_response")
            .filter_map(|e| e["content"].as_str())
            .collect();
        let all = contents.len();
        contents.sort_unstable();
        contents.dedup();
        let repeats = all - contents.len();
        assert!(
            repeats * 100 >= all && repeats * 100 <= all * 15,
            "{repeats} repeats of {all}"
        );
    }

    #[test]
    fn tool_output_compresses_like_code() {
        let entries = ConversationShape::generate(5, 3_000);
        let text: Vec<u8> = entries
            .iter()
            .filter(|e| e["type"] == "tool_call_response")
            .filter_map(|e| e["content"].as_str())
            .flat_map(|s| s.bytes())
            .collect();
        let packed = zstd::bulk::compress(&text, 3).expect("compress").len();
        let ratio = text.len() as f64 / packed as f64;
        assert!(ratio > 3.0, "zstd-3 ratio {ratio:.2}");
    }

    #[test]
    fn every_entry_parses_strictly_and_tool_calls_pair_up() {
        let now = Timestamp::from_unix(START_UNIX, 0).expect("time");
        let entries = ConversationShape::generate(9, 1_500);
        let mut open = std::collections::HashSet::new();
        let mut last = String::new();
        for (i, e) in entries.iter().enumerate() {
            parse_entry(e, ParseMode::Strict { now }).unwrap_or_else(|err| panic!("{i}: {err}"));
            let ts = e["timestamp"].as_str().expect("timestamp");
            let t = Timestamp::parse(ts).expect("valid timestamp");
            assert!(last.is_empty() || Timestamp::parse(&last).expect("ts") < t);
            last = ts.to_owned();
            match e["type"].as_str() {
                Some("tool_call_request") => {
                    assert!(open.insert(e["id"].clone()), "id reused");
                }
                Some("tool_call_response") => assert!(open.remove(&e["id"])),
                Some("turn_start") => assert!(open.is_empty()),
                _ => {}
            }
        }
        assert!(entries
            .iter()
            .any(|e| e["metadata"]["anthropic_thinking_signature"]
                .as_str()
                .is_some_and(|s| s.len() > 200)));
    }

    #[test]
    fn jp_form_base64_encodes_what_jp_encodes() {
        let entries = ConversationShape::generate(2, 300);
        let text = jp_events_json(&entries);
        assert!(text.starts_with("[\n  {\n    \"type\"") && text.ends_with("]\n"));
        let back: Vec<Value> = serde_json::from_str(&text).expect("valid JSON");
        assert_eq!(back.len(), entries.len());
        let b64 = |v: &Value| {
            Value::String(
                base64::engine::general_purpose::STANDARD.encode(v.as_str().expect("a string")),
            )
        };
        for (plain, jp) in entries.iter().zip(&back) {
            match plain["type"].as_str() {
                Some("tool_call_response") => {
                    assert_eq!(jp["content"], b64(&plain["content"]));
                    assert_eq!(jp["is_error"], plain["is_error"]);
                }
                Some("tool_call_request") => {
                    if plain["arguments"]["path"].is_string() {
                        assert_eq!(jp["arguments"]["path"], b64(&plain["arguments"]["path"]));
                    }
                    if let Some(p) = plain["arguments"]["paths"].get(0) {
                        assert_eq!(jp["arguments"]["paths"][0], b64(p));
                    }
                    assert_eq!(jp["name"], plain["name"]);
                }
                Some("chat_response") if plain.get("metadata").is_some() => {
                    let k = "anthropic_thinking_signature";
                    assert_eq!(jp["metadata"][k], b64(&plain["metadata"][k]));
                    assert_eq!(jp["reasoning"], plain["reasoning"]);
                }
                _ => assert_eq!(jp, plain),
            }
        }
    }
}

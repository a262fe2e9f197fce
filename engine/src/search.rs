//! Searching the text of conversations (`jp-store grep`, the web view's
//! search box): a regular expression over the decoded text of every entry
//! of the stored log, and of the text content those entries reference in
//! the blob store.
//!
//! What is searched, as *parts* of an entry (each part's text has its own
//! lines, numbered from 1):
//!
//! | entry | part | text |
//! |---|---|---|
//! | `chat_request` | `message` | the message |
//! | `chat_request` | `resource` | each text resource's content (a blob) |
//! | `chat_response` | `message`, `reasoning`, `data` | the text (data: its JSON) |
//! | `tool_call_request` | `arguments` | one `key: value` line per argument, string values as they are (several lines if they hold line breaks), others as JSON |
//! | `tool_call_response` | `result` | each text block (a blob); a block of another type as JSON |
//! | `tool_call_response` | `resource` | each text resource block's content (a blob) |
//! | `inquiry_request` | `question` | the question's `text` (the whole question as JSON without one) |
//! | `inquiry_response` | `answer` | the answer (a string as it is, else JSON) |
//! | `compaction` | `summary` | the summary |
//! | an entry of another type | `entry` | the whole entry as JSON |
//!
//! Turn starts, config deltas and compaction undos hold no text and are not
//! searched. Every entry of the log is searched, those of turns a
//! compaction covers too: the search is of the history as logged, not of
//! the view the model is sent. Content that is binary (a resource given as
//! `blob`, or content holding a NUL byte, as grep judges it) is not
//! searched.
//!
//! The matcher is the `regex` crate's (`-F` escapes the pattern, `-i` folds
//! case, Unicode-aware). Each part's text is searched whole: a match is
//! found, its line reported, and the search goes on after that line (one
//! hit per line, as grep prints it).
//!
//! Cost: [`Searcher::each`] reads the logs on all cores, searching the text
//! they hold; then reads and searches the blobs they reference in the
//! order of the blob store, a pack's group on one core, so that a group is
//! decompressed once however the conversations referencing its blobs are
//! spread; then hands each conversation's hits over in order. A blob is
//! read and searched once per searcher, its outcome kept (a few dozen
//! bytes per distinct blob, plus the lines that matched). Held meanwhile:
//! the hits, and about 100 bytes per reference to a blob, not the
//! conversations.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use jpstore_blobstore::BlobId;
use regex::bytes::{Regex, RegexBuilder};
use serde_json::Value;

use crate::conversation::read::Conversation;
use crate::conversation::ConversationId;
use crate::error::Error;
use crate::event::{BlobRef, Entry, EventKind};
use crate::log::TornTail;
use crate::Store;

pub(crate) mod walk;

pub(crate) use walk::{walk, Text};

/// A pattern that is not a valid regular expression (or is too large).
#[derive(Debug, thiserror::Error)]
#[error("invalid pattern {pattern:?}: {message}")]
pub struct PatternError {
    /// The pattern as given.
    pub pattern: String,
    /// What the regular expression parser said.
    pub message: String,
}

/// Who an entry is from, for `--role`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Role {
    /// `chat_request`, `inquiry_response`, and an inquiry the user asks.
    User,
    /// `chat_response`, `tool_call_request`, and an inquiry the assistant
    /// asks.
    Assistant,
    /// `tool_call_response`, and an inquiry a tool asks.
    Tool,
    /// Compactions, entries of other types, inquiries of other sources.
    Other,
}

impl std::fmt::Display for Role {
    /// The role's name (`user`, `assistant`, `tool`, `other`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl Role {
    /// The role's name.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
            Role::Other => "other",
        }
    }
}

/// How a [`Searcher`] matches and what it looks at.
#[derive(Debug, Clone, Default)]
pub struct SearchOptions {
    /// The pattern is a fixed string, not a regular expression.
    pub fixed: bool,
    /// Ignore case (Unicode simple case folding).
    pub ignore_case: bool,
    /// Only entries of these roles (none: every role).
    pub roles: Vec<Role>,
    /// Only entries of these types (`chat_request`, `tool_call_response`,
    /// an unknown entry's type) or parts (`reasoning`, `arguments`, ...);
    /// none: every entry.
    pub types: Vec<String>,
    /// Stop at the first hit of each conversation (`-l`).
    pub first_only: bool,
    /// Stop a conversation's search after this many hits (the web view).
    pub max_hits: Option<usize>,
}

/// One matching line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hit {
    /// The turn of the entry (0-based, as `print` numbers them).
    pub turn: u64,
    /// The index of the entry in the log (0-based, as `export` lists them).
    pub entry: usize,
    /// The entry's type (`chat_request`, ...).
    pub entry_type: String,
    /// Who the entry is from.
    pub role: Role,
    /// Which text of the entry ([`the module documentation`](self)).
    pub part: &'static str,
    /// The line number in that text (from 1).
    pub line: u64,
    /// The line, without its line break (bytes that are not UTF-8 as
    /// U+FFFD).
    pub text: String,
    /// The first match in the line, as a byte range of `text`.
    pub span: (usize, usize),
    /// The blob the text was read from, if it was.
    pub blob: Option<BlobId>,
    /// The resource's URI (`resource` parts).
    pub uri: Option<String>,
    /// The tool's name (`arguments`; `result` and `resource` of a tool
    /// response whose request is in the log).
    pub tool: Option<String>,
}

/// Content that could not be searched.
#[derive(Debug, Clone)]
pub struct Problem {
    /// The entry referencing it.
    pub entry: usize,
    /// Its turn.
    pub turn: u64,
    /// The blob.
    pub blob: BlobId,
    /// Why (the blob store's error).
    pub error: Arc<Error>,
}

/// The hits of one conversation.
#[derive(Debug, Clone)]
pub struct ConversationHits {
    /// The conversation.
    pub id: ConversationId,
    /// Its title, if it has one.
    pub title: Option<String>,
    /// Every hit, in log order.
    pub hits: Vec<Hit>,
    /// Blobs that could not be read (the rest was searched).
    pub problems: Vec<Problem>,
    /// Bytes after the last whole record, left out of the search.
    pub torn_tail: Option<TornTail>,
}

/// What searching one blob gave (kept per searcher: each blob is read once).
#[derive(Debug)]
enum BlobOutcome {
    /// Text, searched: its matching lines (line, text, span).
    Text(Vec<LineHit>),
    /// Binary content (a NUL byte): not searched.
    Binary,
    /// It could not be read.
    Failed(Arc<Error>),
}

#[derive(Debug, Clone)]
struct LineHit {
    line: u64,
    text: String,
    span: (usize, usize),
}

/// A compiled search over one store.
pub struct Searcher<'s> {
    store: &'s Store,
    regex: Regex,
    options: SearchOptions,
    blobs: Mutex<HashMap<BlobId, Arc<OnceLock<BlobOutcome>>>>,
    read: AtomicUsize,
}

impl<'s> Searcher<'s> {
    /// A searcher of `pattern` in `store`.
    pub fn new(
        store: &'s Store,
        pattern: &str,
        options: SearchOptions,
    ) -> Result<Self, PatternError> {
        let source = if options.fixed {
            regex::escape(pattern)
        } else {
            pattern.to_owned()
        };
        let regex = RegexBuilder::new(&source)
            .case_insensitive(options.ignore_case)
            // Lines are what is reported: `^` and `$` are at line ends.
            .multi_line(true)
            .build()
            .map_err(|e| PatternError {
                pattern: pattern.to_owned(),
                message: e.to_string(),
            })?;
        Ok(Searcher {
            store,
            regex,
            options,
            blobs: Mutex::new(HashMap::new()),
            read: AtomicUsize::new(0),
        })
    }

    /// How many blobs this searcher has read (each at most once).
    pub(crate) fn blobs_read(&self) -> usize {
        self.read.load(Ordering::Relaxed)
    }

    /// Searches conversation `id`.
    pub fn conversation(&self, id: &ConversationId) -> Result<ConversationHits, Error> {
        let conversation = self.store.read(id)?;
        Ok(self.search(&conversation))
    }

    /// Searches `ids` on all cores, handing each conversation's outcome to
    /// `sink` in the order of `ids` (a conversation that cannot be read
    /// with its error, which does not stop the others). Stops handing them
    /// over when `sink` returns `false`.
    ///
    /// Three steps: every log is read and the text it holds searched (on
    /// all cores); then the blobs they reference, each once, in the order
    /// of the blob store, a pack's group on one core (so each group is
    /// decompressed once, wherever the conversations referencing its blobs
    /// are); then the hits are put in log order. What is held meanwhile is
    /// the hits and, per reference to a blob, its place (about 100 bytes),
    /// not the conversations.
    pub fn each(
        &self,
        ids: &[ConversationId],
        mut sink: impl FnMut(&ConversationId, Result<ConversationHits, Error>) -> bool,
    ) {
        self.each_mapped(ids, &|_| (), |id, outcome| {
            sink(id, outcome.map(|(hits, ())| hits))
        });
    }

    /// [`Searcher::each`], handing `sink` also what `map` makes of each
    /// conversation (in the worker's thread, while the conversation is in
    /// memory).
    pub(crate) fn each_mapped<T: Send>(
        &self,
        ids: &[ConversationId],
        map: &(dyn Fn(&Conversation) -> T + Sync),
        mut sink: impl FnMut(&ConversationId, Result<(ConversationHits, T), Error>) -> bool,
    ) {
        let prepared: Vec<Result<(Prepared, T), Error>> = crate::parallel::map_ordered(ids, |id| {
            self.store
                .read(id)
                .map(|conversation| (self.prepare(&conversation), map(&conversation)))
        });
        let mut blobs: Vec<BlobId> = prepared
            .iter()
            .flatten()
            .flat_map(|(p, _)| {
                p.items.iter().filter_map(|item| match item {
                    Item::Blob(_, r) => Some(r.id),
                    Item::Lines(..) => None,
                })
            })
            .collect();
        blobs.sort_unstable();
        blobs.dedup();
        self.read_blobs(blobs);
        for (id, outcome) in ids.iter().zip(prepared) {
            if !sink(id, outcome.map(|(p, t)| (self.finish(p), t))) {
                return;
            }
        }
    }

    /// Searches a conversation already read (its blobs read as they come:
    /// [`Searcher::each`] reads them in the order of the blob store).
    pub(crate) fn search(&self, conversation: &Conversation) -> ConversationHits {
        self.finish(self.prepare(conversation))
    }

    /// The hits of the text `conversation` holds, and the blobs it
    /// references that are to be searched, in log order.
    fn prepare(&self, conversation: &Conversation) -> Prepared {
        let mut prepared = Prepared {
            out: ConversationHits {
                id: conversation.id.clone(),
                title: conversation.state.metadata.title().map(str::to_owned),
                hits: Vec::new(),
                problems: Vec::new(),
                torn_tail: conversation.torn_tail,
            },
            items: Vec::new(),
        };
        let mut found = 0;
        walk(conversation, &mut |step| {
            if self.full_at(found) {
                return false;
            }
            if !self.options.roles.is_empty() && !self.options.roles.contains(&step.role) {
                return true;
            }
            if !self.wanted(step.entry_type, step.part) {
                return true;
            }
            let template = Hit {
                turn: step.turn,
                entry: step.entry,
                entry_type: step.entry_type.to_owned(),
                role: step.role,
                part: step.part,
                line: 0,
                text: String::new(),
                span: (0, 0),
                blob: None,
                uri: step.uri.map(str::to_owned),
                tool: step.tool.map(str::to_owned),
            };
            match step.text {
                Text::Inline(text) => {
                    if memchr::memchr(0, text).is_some() {
                        return true;
                    }
                    let lines = self.lines(text);
                    if !lines.is_empty() {
                        found += lines.len();
                        prepared.items.push(Item::Lines(template, lines));
                    }
                }
                Text::Blob(r) => prepared.items.push(Item::Blob(template, *r)),
            }
            true
        });
        // `-l`: a hit in the log's text is enough; its blobs are not read.
        if self.options.first_only && found > 0 {
            prepared
                .items
                .retain(|item| matches!(item, Item::Lines(..)));
        }
        prepared
    }

    /// The hits of a prepared conversation, its blobs searched (each once
    /// per searcher).
    fn finish(&self, prepared: Prepared) -> ConversationHits {
        let mut out = prepared.out;
        for item in prepared.items {
            if self.full(&out) {
                break;
            }
            match item {
                Item::Lines(template, lines) => {
                    push_lines(self, &mut out, &template, lines.into_iter(), None)
                }
                Item::Blob(template, r) => {
                    match self.cell(&r.id).get_or_init(|| self.read_blob(&r.id)) {
                        BlobOutcome::Binary => {}
                        BlobOutcome::Failed(error) => out.problems.push(Problem {
                            entry: template.entry,
                            turn: template.turn,
                            blob: r.id,
                            error: Arc::clone(error),
                        }),
                        BlobOutcome::Text(lines) => {
                            push_lines(self, &mut out, &template, lines.iter().cloned(), Some(r.id))
                        }
                    }
                }
            }
        }
        out
    }

    /// The cell of blob `id`'s outcome (made empty the first time).
    fn cell(&self, id: &BlobId) -> Arc<OnceLock<BlobOutcome>> {
        let mut blobs = self.blobs.lock().unwrap_or_else(|p| p.into_inner());
        Arc::clone(blobs.entry(*id).or_default())
    }

    /// Reads and searches blob `id`.
    fn read_blob(&self, id: &BlobId) -> BlobOutcome {
        self.read.fetch_add(1, Ordering::Relaxed);
        match self.store.blobs().get_content(id) {
            Ok(content) if memchr::memchr(0, &content).is_some() => BlobOutcome::Binary,
            Ok(content) => BlobOutcome::Text(self.lines(&content)),
            Err(e) => BlobOutcome::Failed(Arc::new(Error::Blob(e))),
        }
    }

    /// Reads and searches every blob of `ids` not searched yet, in the
    /// order of the blob store (by pack and group), each group on one
    /// core: a group is decompressed once, however the conversations
    /// referencing its blobs are spread.
    fn read_blobs(&self, ids: Vec<BlobId>) {
        let mut placed: Vec<((u8, String, u64), BlobId)> = ids
            .into_iter()
            .filter(|id| self.cell(id).get().is_none())
            .map(|id| {
                let at = match self.store.blobs().locate(&id) {
                    Ok(Some(jpstore_blobstore::Location::Packed { pack, offset })) => {
                        (0, pack, offset)
                    }
                    Ok(Some(jpstore_blobstore::Location::Loose(_))) => (1, String::new(), 0),
                    // Not found, or an error: the read reports it.
                    Ok(None) | Err(_) => (2, String::new(), 0),
                };
                (at, id)
            })
            .collect();
        placed.sort_unstable();
        // Runs of one group (loose objects and the rest: runs of 64).
        let mut runs: Vec<Vec<BlobId>> = Vec::new();
        let mut last: Option<&(u8, String, u64)> = None;
        for (at, id) in &placed {
            let same = last.is_some_and(|l| {
                l == at && (at.0 == 0 || runs.last().is_some_and(|r| r.len() < 64))
            });
            if !same {
                runs.push(Vec::new());
            }
            if let Some(run) = runs.last_mut() {
                run.push(*id);
            }
            last = Some(at);
        }
        crate::parallel::map_ordered(&runs, |run| {
            for id in run {
                self.cell(id).get_or_init(|| self.read_blob(id));
            }
        });
    }

    /// Whether the conversation's search is over (`-l`, a bound of hits).
    fn full(&self, out: &ConversationHits) -> bool {
        self.full_at(out.hits.len())
    }

    /// Whether `found` hits end a conversation's search.
    fn full_at(&self, found: usize) -> bool {
        match (self.options.first_only, self.options.max_hits) {
            (true, _) => found >= 1,
            (false, Some(m)) => found >= m,
            (false, None) => false,
        }
    }

    /// Whether part `part` of an entry of type `entry_type` is searched.
    fn wanted(&self, entry_type: &str, part: &str) -> bool {
        let types = &self.options.types;
        types.is_empty() || types.iter().any(|t| t == entry_type || t == part)
    }

    /// The lines of `text` that match, each once (the first match in it).
    fn lines(&self, text: &[u8]) -> Vec<LineHit> {
        let limit = if self.options.first_only {
            1
        } else {
            self.options.max_hits.unwrap_or(usize::MAX)
        };
        let mut hits = Vec::new();
        let mut from = 0;
        let mut line = 1u64;
        let mut counted = 0;
        while from <= text.len() && hits.len() < limit {
            let Some(m) = self.regex.find_at(text, from) else {
                break;
            };
            let start = m.start();
            let line_start = memchr::memrchr(b'\n', &text[..start]).map_or(0, |i| i + 1);
            let line_end = memchr::memchr(b'\n', &text[start..]).map_or(text.len(), |i| start + i);
            // A match that runs over a line break (`\s+` does) is not a
            // hit of its line: a line matches when the pattern matches the
            // line alone, as grep reads it. Its first match then.
            let m = if m.end() > line_end {
                match self.regex.find(&text[line_start..line_end]) {
                    Some(inner) => (line_start + inner.start(), line_start + inner.end()),
                    None => {
                        from = line_end + 1;
                        continue;
                    }
                }
            } else {
                (m.start(), m.end())
            };
            let start = m.0;
            line += memchr::memchr_iter(b'\n', &text[counted..line_start]).count() as u64;
            counted = line_start;
            let shown = String::from_utf8_lossy(&text[line_start..line_end]);
            // Offsets into the line as shown (a lossy conversion may have
            // changed its length): measured on the shown prefix.
            let (span_start, span_end) = match shown {
                std::borrow::Cow::Borrowed(_) => (start - line_start, m.1 - line_start),
                std::borrow::Cow::Owned(_) => {
                    let before = String::from_utf8_lossy(&text[line_start..start]).len();
                    let within = String::from_utf8_lossy(&text[start..m.1]).len();
                    (before, before + within)
                }
            };
            // A match at the very end of a text that ends with a line
            // break is on no line.
            if start == text.len() && start > 0 && text[start - 1] == b'\n' {
                break;
            }
            hits.push(LineHit {
                line,
                text: shown.into_owned(),
                span: (span_start, span_end),
            });
            from = line_end + 1;
        }
        hits
    }
}

/// A conversation's hits in the text its log holds, and the blobs still
/// to search, in log order.
struct Prepared {
    out: ConversationHits,
    items: Vec<Item>,
}

/// One searched text of a [`Prepared`] conversation: its hits' common
/// fields (line and text left empty) and its lines, or the blob to read.
enum Item {
    Lines(Hit, Vec<LineHit>),
    Blob(Hit, BlobRef),
}

/// Adds the hits of `lines` to `out` (up to the searcher's bound).
fn push_lines(
    searcher: &Searcher<'_>,
    out: &mut ConversationHits,
    template: &Hit,
    lines: impl Iterator<Item = LineHit>,
    blob: Option<BlobId>,
) {
    for line in lines {
        if searcher.full(out) {
            break;
        }
        out.hits.push(Hit {
            line: line.line,
            text: line.text,
            span: line.span,
            blob,
            ..template.clone()
        });
    }
}

/// The type of an entry (`unknown` for an entry of another type without a
/// string `type`).
fn entry_type(entry: &Entry) -> &str {
    match entry {
        Entry::Event(e) => e.kind.type_name(),
        Entry::Unknown(o) => o.get("type").and_then(Value::as_str).unwrap_or("unknown"),
    }
}

/// Who an entry is from.
fn role(entry: &Entry) -> Role {
    let Entry::Event(e) = entry else {
        return Role::Other;
    };
    match &e.kind {
        EventKind::ChatRequest(_) | EventKind::InquiryResponse(_) => Role::User,
        EventKind::ChatResponse(_) | EventKind::ToolCallRequest(_) => Role::Assistant,
        EventKind::ToolCallResponse(_) => Role::Tool,
        EventKind::InquiryRequest(r) => match r.source.get("source").and_then(Value::as_str) {
            Some("user") => Role::User,
            Some("assistant") => Role::Assistant,
            Some("tool") => Role::Tool,
            _ => Role::Other,
        },
        _ => Role::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn searcher<'s>(store: &'s Store, pattern: &str, options: SearchOptions) -> Searcher<'s> {
        Searcher::new(store, pattern, options).expect("a valid pattern")
    }

    fn store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().expect("temp dir");
        let store =
            Store::init_dir(&dir.path().join("s"), crate::StoreOptions::default()).expect("store");
        (dir, store)
    }

    #[test]
    fn lines_are_numbered_and_each_reported_once() {
        let (_d, store) = store();
        let s = searcher(&store, "o", SearchOptions::default());
        let hits = s.lines(b"foo boo\nbar\nzoo\n");
        let got: Vec<_> = hits
            .iter()
            .map(|h| (h.line, h.text.as_str(), h.span))
            .collect();
        assert_eq!(got, vec![(1, "foo boo", (1, 2)), (3, "zoo", (1, 2))]);
        // `^` and `$` match at line ends; an empty pattern matches each line.
        let s = searcher(&store, "^bar$", SearchOptions::default());
        assert_eq!(s.lines(b"foo\nbar\nbaz").len(), 1);
        // A match over a line break is no line's: lines are matched alone.
        let s = searcher(&store, r"a\s+b", SearchOptions::default());
        let got: Vec<_> = s
            .lines(b"xa\nb a b\na\nb\nc a  b")
            .iter()
            .map(|h| h.line)
            .collect();
        assert_eq!(got, vec![2, 5]);
        let s = searcher(&store, "", SearchOptions::default());
        assert_eq!(s.lines(b"a\nb\n").len(), 2);
        assert_eq!(s.lines(b"a\n\nb").len(), 3);
    }

    #[test]
    fn fixed_strings_and_case() {
        let (_d, store) = store();
        let fixed = SearchOptions {
            fixed: true,
            ignore_case: true,
            ..SearchOptions::default()
        };
        let s = searcher(&store, "A.B", fixed);
        let hits = s.lines("xa.by\naxb\nÉA.Bé".as_bytes());
        assert_eq!(hits.len(), 2);
        assert_eq!(hits[1].span, (2, 5));
        assert!(Searcher::new(&store, "(", SearchOptions::default()).is_err());
    }

    #[test]
    fn conversations_are_handed_over_in_order_until_the_sink_stops() {
        use crate::event::input::parse_input;
        use crate::event::json::ParseMode;
        let (_d, store) = store();
        let now = crate::timestamp::Timestamp::now();
        let mut ids = Vec::new();
        for i in 0..40 {
            let mut writer = store
                .create(crate::NewConversation::default())
                .expect("a conversation");
            let input = format!(r#"{{"type":"chat_request","content":"item {i}: a needle"}}"#);
            let turn = parse_input(&input, ParseMode::Strict { now }).expect("an entry");
            writer.append(turn.entries).expect("appended");
            ids.push(writer.id().clone());
        }
        let s = searcher(&store, "needle", SearchOptions::default());
        let mut seen = Vec::new();
        s.each(&ids, |id, outcome| {
            let found = outcome.expect("searched");
            assert_eq!(found.hits[0].text, format!("item {}: a needle", seen.len()));
            seen.push(id.clone());
            seen.len() < 25
        });
        assert_eq!(seen, ids[..25]);
    }
}
